package kvevents

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/warmpath/warmpath/kvindex"
)

// golden is one msgspec-produced case from testdata/msgspec/generate.py.
type golden struct {
	Name          string        `json:"name"`
	Payload       []byte        `json:"payload_b64"`
	TS            float64       `json:"ts"`
	DPRank        *int          `json:"dp_rank"`
	Events        []goldenEvent `json:"events"`
	UnknownEvents int           `json:"unknown_events"`
	UnknownFields int           `json:"unknown_fields"`
}

type goldenEvent struct {
	Type        string   `json:"type"`
	BlockHashes []uint64 `json:"block_hashes"`
	Parent      *uint64  `json:"parent"`
	TokenIDs    []uint32 `json:"token_ids"`
	BlockSize   int      `json:"block_size"`
	LoRAID      *int64   `json:"lora_id"`
	Medium      string   `json:"medium"`
	LoRAName    string   `json:"lora_name"`
	ExtraNil    []bool   `json:"extra_nil"`
	GroupIdx    int      `json:"group_idx"`
	Kind        string   `json:"kind"`
	Window      int      `json:"window"`
}

func loadGoldens(t *testing.T) []golden {
	t.Helper()
	f, err := os.Open("testdata/msgspec/cases.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []golden
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		var g golden
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatal(err)
		}
		out = append(out, g)
	}
	if len(out) == 0 {
		t.Fatal("no golden cases")
	}
	return out
}

func TestDecodeMsgspecGoldens(t *testing.T) {
	t.Parallel()
	for _, g := range loadGoldens(t) {
		t.Run(g.Name, func(t *testing.T) {
			t.Parallel()
			var d Decoder
			var b Batch
			if err := d.Decode(g.Payload, &b); err != nil {
				t.Fatal(err)
			}
			if b.TS != g.TS || b.HasDPRank != (g.DPRank != nil) || (g.DPRank != nil && b.DPRank != *g.DPRank) {
				t.Errorf("envelope ts=%v rank=%d/%v, want %v %v", b.TS, b.DPRank, b.HasDPRank, g.TS, g.DPRank)
			}
			if b.UnknownEvents != g.UnknownEvents || b.UnknownFields != g.UnknownFields {
				t.Errorf("unknown events/fields = %d/%d, want %d/%d", b.UnknownEvents, b.UnknownFields, g.UnknownEvents, g.UnknownFields)
			}
			if len(b.Events) != len(g.Events) {
				t.Fatalf("%d events, want %d", len(b.Events), len(g.Events))
			}
			for i, want := range g.Events {
				got := b.Events[i]
				if got.Kind.String() != want.Type || !slices.Equal(got.BlockHashes, want.BlockHashes) ||
					got.Medium != want.Medium || got.GroupIdx != want.GroupIdx {
					t.Errorf("event %d: got %v %v medium %q group %d, want %+v", i, got.Kind, got.BlockHashes, got.Medium, got.GroupIdx, want)
				}
				if got.Kind != BlockStored {
					continue
				}
				if got.HasParent != (want.Parent != nil) || (want.Parent != nil && got.ParentHash != *want.Parent) {
					t.Errorf("event %d: parent %v/%d, want %v", i, got.HasParent, got.ParentHash, want.Parent)
				}
				if !slices.Equal(got.TokenIDs, want.TokenIDs) || got.BlockSize != want.BlockSize {
					t.Errorf("event %d: tokens/block size differ", i)
				}
				if got.HasLoRAID != (want.LoRAID != nil) || (want.LoRAID != nil && got.LoRAID != *want.LoRAID) {
					t.Errorf("event %d: lora id %v/%d, want %v", i, got.HasLoRAID, got.LoRAID, want.LoRAID)
				}
				if got.LoRAName != want.LoRAName || got.SpecKind != want.Kind || got.SlidingWindow != want.Window {
					t.Errorf("event %d: lora %q kind %q window %d, want %+v", i, got.LoRAName, got.SpecKind, got.SlidingWindow, want)
				}
				var nils []bool
				if got.ExtraKeys != nil {
					nils = []bool{}
					for _, x := range got.ExtraKeys {
						nils = append(nils, x == nil)
					}
				}
				if !slices.Equal(nils, want.ExtraNil) || (nils == nil) != (want.ExtraNil == nil) {
					t.Errorf("event %d: extra keys nil pattern %v, want %v", i, nils, want.ExtraNil)
				}
			}
		})
	}
}

// TestMsgspecLoRAAndSalt checks that the LoRA name and the cache salt found
// in block 0's extra keys root the chain, and that a multimodal extra key
// ends what a plain request can match.
func TestMsgspecLoRAAndSalt(t *testing.T) {
	t.Parallel()
	prompt := append(goldenTokens(300, 48), 1)
	tests := []struct {
		name string
		key  kvindex.ChainKey
		want int
	}{
		{name: "adapter and salt match block 0 only", key: kvindex.ChainKey{Model: "m", LoRA: "sql", Salt: "tenant-a"}, want: 16},
		{name: "no salt", key: kvindex.ChainKey{Model: "m", LoRA: "sql"}, want: 0},
		{name: "other salt", key: kvindex.ChainKey{Model: "m", LoRA: "sql", Salt: "tenant-b"}, want: 0},
		{name: "base model", key: kvindex.ChainKey{Model: "m", Salt: "tenant-a"}, want: 0},
	}
	for _, g := range loadGoldens(t) {
		if g.Name != "v0.2x-array-ints" && g.Name != "map-era-bytes" {
			continue
		}
		var d Decoder
		var b Batch
		if err := d.Decode(g.Payload, &b); err != nil {
			t.Fatal(err)
		}
		ix := newIndex(t, nil)
		// The first event is the LoRA store; the second (sliding window
		// group) must not reach the index.
		feed(t, ix, kvindex.Source{Worker: "w", Model: "m"}, b.Events[:2]...)
		for _, tc := range tests {
			gpu, _ := cachedOn(ix.Lookup(tc.key, prompt, 16), "w")
			if gpu != tc.want {
				t.Errorf("%s/%s: cached %d, want %d", g.Name, tc.name, gpu, tc.want)
			}
		}
	}
}

func goldenTokens(start, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(start + 7*i)
	}
	return out
}
