package kvevents

import (
	"slices"
	"testing"

	"github.com/warmpath/warmpath/kvindex"
)

func TestDecodeRealCapture(t *testing.T) {
	t.Parallel()
	msgs := loadCapture(t, capturePath)
	if len(msgs) != 10 {
		t.Fatalf("capture has %d messages, want 10", len(msgs))
	}
	var d Decoder
	var b Batch
	for _, m := range msgs {
		if err := d.Decode(m.Payload, &b); err != nil {
			t.Fatalf("seq %d: %v", m.Seq, err)
		}
		if b.UnknownEvents != 0 || b.UnknownFields != 0 {
			t.Errorf("seq %d: %d unknown events, %d unknown fields", m.Seq, b.UnknownEvents, b.UnknownFields)
		}
		if !b.HasDPRank || b.DPRank != 0 || b.TS < 1.7e9 {
			t.Errorf("seq %d: envelope ts=%v rank=%d/%v", m.Seq, b.TS, b.DPRank, b.HasDPRank)
		}
		var stores, removes int
		for _, ev := range b.Events {
			switch ev.Kind {
			case BlockStored:
				stores++
				if ev.BlockSize != 16 || len(ev.TokenIDs) != 16*len(ev.BlockHashes) ||
					ev.Medium != MediumGPU || ev.GroupIdx != 0 || ev.SpecKind != "full_attention" ||
					len(ev.ExtraKeys) != len(ev.BlockHashes) || ev.LoRAName != "" || ev.HasLoRAID {
					t.Errorf("seq %d: odd BlockStored %+v", m.Seq, ev)
				}
				for _, x := range ev.ExtraKeys {
					if x != nil {
						t.Errorf("seq %d: extra key %x, want nil", m.Seq, x)
					}
				}
				want := 8
				if m.Seq == 0 {
					want = 40
				}
				if len(ev.BlockHashes) != want || ev.HasParent != (m.Seq != 0) {
					t.Errorf("seq %d: %d blocks parent=%v", m.Seq, len(ev.BlockHashes), ev.HasParent)
				}
			case BlockRemoved:
				removes++
				if len(ev.BlockHashes) != 1 || ev.Medium != MediumGPU {
					t.Errorf("seq %d: odd BlockRemoved %+v", m.Seq, ev)
				}
			default:
				t.Errorf("seq %d: unexpected %v", m.Seq, ev.Kind)
			}
		}
		wantRemoves := 0
		if m.Seq >= 48 {
			wantRemoves = 8
		}
		if stores != 1 || removes != wantRemoves {
			t.Errorf("seq %d: %d stores, %d removes", m.Seq, stores, removes)
		}
	}
}

// captureStores decodes the capture and returns, per seq, a copy of its
// BlockStored event.
func captureStores(t *testing.T) map[uint64]Event {
	t.Helper()
	var d Decoder
	var b Batch
	out := make(map[uint64]Event)
	for _, m := range loadCapture(t, capturePath) {
		if err := d.Decode(m.Payload, &b); err != nil {
			t.Fatal(err)
		}
		for _, ev := range b.Events {
			if ev.Kind == BlockStored {
				ev.BlockHashes = slices.Clone(ev.BlockHashes)
				ev.TokenIDs = slices.Clone(ev.TokenIDs)
				ev.ExtraKeys = nil
				out[m.Seq] = ev
			}
		}
	}
	return out
}

// applyCapture decodes the capture's messages up to seq upTo and applies
// their events to ix as src's, as a stream does.
func applyCapture(t *testing.T, ix *kvindex.Index, src kvindex.Source, upTo uint64) {
	t.Helper()
	var d Decoder
	var b Batch
	for _, m := range loadCapture(t, capturePath) {
		if m.Seq > upTo {
			break
		}
		if err := d.Decode(m.Payload, &b); err != nil {
			t.Fatal(err)
		}
		feed(t, ix, src, b.Events...)
	}
}

// TestRealCaptureChains feeds the real capture to an index and checks the
// cached prefixes it then answers, after removals, duplicate stores and a
// clear.
func TestRealCaptureChains(t *testing.T) {
	t.Parallel()
	stores := captureStores(t)
	p0 := stores[0].TokenIDs // the 640-token prompt of seq 0
	prefix := p0[:512]
	p1 := append(slices.Clone(prefix), stores[1].TokenIDs...)
	p48 := append(slices.Clone(prefix), stores[48].TokenIDs...)
	novel := append(slices.Clone(prefix), seqTokens(7, 128)...)
	if !slices.Equal(p1, p48) {
		t.Fatal("seq 48 should re-store seq 1's blocks")
	}
	src := kvindex.Source{Worker: "w0", Model: "qwen3"}
	qwen := kvindex.ChainKey{Model: "qwen3"}
	removeBlock := func(ix *kvindex.Index, hashes ...uint64) {
		feed(t, ix, src, Event{Kind: BlockRemoved, BlockHashes: hashes, Medium: MediumGPU})
	}

	tests := []struct {
		name   string
		upTo   uint64
		after  func(ix *kvindex.Index)
		key    kvindex.ChainKey
		prompt []uint32
		want   int
	}{
		{name: "seq0 prompt after seq0", upTo: 0, key: qwen, prompt: p0, want: 624},
		{name: "shared 512 prefix only", upTo: 0, key: qwen, prompt: novel, want: 512},
		{name: "seq1 prompt before seq1", upTo: 0, key: qwen, prompt: p1, want: 512},
		{name: "seq1 prompt after seq1", upTo: 1, key: qwen, prompt: p1, want: 624},
		{name: "whole excerpt", upTo: 99, key: qwen, prompt: p0, want: 624},
		{name: "prompt one token longer", upTo: 0, key: qwen, prompt: append(slices.Clone(p0), 5), want: 640},
		{name: "prompt shorter than a block", upTo: 0, key: qwen, prompt: p0[:16], want: 0},
		{name: "other model", upTo: 0, key: kvindex.ChainKey{Model: "llama"}, prompt: p0, want: 0},
		{name: "LoRA", upTo: 0, key: kvindex.ChainKey{Model: "qwen3", LoRA: "sql"}, prompt: p0, want: 0},
		{name: "salted", upTo: 0, key: kvindex.ChainKey{Model: "qwen3", Salt: "tenant-a"}, prompt: p0, want: 0},
		{
			name: "removed block 20 ends the chain", upTo: 0, key: qwen, prompt: p0, want: 320,
			after: func(ix *kvindex.Index) { removeBlock(ix, stores[0].BlockHashes[20]) },
		},
		{
			name: "removed block 20 ends the sibling's chain too", upTo: 1, key: qwen, prompt: p1, want: 320,
			after: func(ix *kvindex.Index) { removeBlock(ix, stores[0].BlockHashes[20]) },
		},
		{
			name: "removed last block of seq1", upTo: 1, key: qwen, prompt: p1, want: 512 + 7*16,
			after: func(ix *kvindex.Index) { removeBlock(ix, stores[1].BlockHashes[7]) },
		},
		{
			name: "duplicate store survives one remove", upTo: 48, key: qwen, prompt: p1, want: 624,
			after: func(ix *kvindex.Index) { removeBlock(ix, stores[1].BlockHashes...) },
		},
		{
			name: "duplicate store gone after two removes", upTo: 48, key: qwen, prompt: p1, want: 512,
			after: func(ix *kvindex.Index) {
				removeBlock(ix, stores[1].BlockHashes...)
				removeBlock(ix, stores[1].BlockHashes...)
			},
		},
		{
			name: "all blocks cleared", upTo: 99, key: qwen, prompt: p0, want: 0,
			after: func(ix *kvindex.Index) { feed(t, ix, src, Event{Kind: AllBlocksCleared}) },
		},
		{
			name: "store after clear with a known parent is unreachable", upTo: 0, key: qwen, prompt: p1, want: 0,
			after: func(ix *kvindex.Index) {
				feed(t, ix, src, Event{Kind: AllBlocksCleared}, stores[1])
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ix := newIndex(t, nil)
			applyCapture(t, ix, src, tc.upTo)
			if tc.after != nil {
				tc.after(ix)
			}
			if bs := ix.BlockSizeSeen("w0"); bs != 16 {
				t.Errorf("block size seen %d, want 16", bs)
			}
			gpu, off := cachedOn(ix.Lookup(tc.key, tc.prompt, 16), "w0")
			if gpu != tc.want || off != 0 {
				t.Errorf("cached gpu=%d off=%d, want gpu=%d", gpu, off, tc.want)
			}
		})
	}
}
