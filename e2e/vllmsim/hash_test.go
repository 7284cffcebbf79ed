package vllmsim

import (
	"encoding/hex"
	"testing"
)

func seq(from, to uint32) []uint32 {
	var out []uint32
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// TestBlockHashWorkedExample checks the hashes and bytes of the worked
// example in the vLLM spec (§1.8): tokens 1..32, seed "vllm-none-hash".
func TestBlockHashWorkedExample(t *testing.T) {
	t.Parallel()
	h := newHasher(DefaultHashSeed)
	if got := hex.EncodeToString(h.none[:]); got != "9bd96a485ad84efdafb72ee48a1d7a69bcead0f8f0433173941b276b9581eef0" {
		t.Fatalf("NONE_HASH = %s", got)
	}
	tokens := seq(1, 32)
	hashes := h.chain(nil, tokens, 16, func(int) []string { return nil })
	if len(hashes) != 2 || hashes[0].Uint64() != 8866452693264111234 || hashes[1].Uint64() != 807986237951177663 {
		t.Fatalf("hashes %d %d", hashes[0].Uint64(), hashes[1].Uint64())
	}
	stored := Event{Kind: BlockStored, Hashes: hashes, Tokens: tokens, BlockSize: 16}
	batch := &Batch{TS: 1750000000.5, Events: []Event{stored}}
	tokHex := ""
	for i := 1; i <= 32; i++ {
		tokHex += hex.EncodeToString([]byte{byte(i)})
	}
	tests := []struct {
		name string
		enc  eventEncoder
		want string
	}{
		{"array-v0.11", eventEncoder{wire: WireArrayV011},
			"93cb41da13b860200000" + "91" + "97" + "ab426c6f636b53746f726564" +
				"92cf7b0bf7bf7fd01682cf0b368b33d87bf3bf" + "c0" + "dc0020" + tokHex + "10" + "c0" + "a3475055" + "00"},
		{"array", eventEncoder{wire: WireArray},
			"93cb41da13b860200000" + "91" + "9b" + "ab426c6f636b53746f726564" +
				"92cf7b0bf7bf7fd01682cf0b368b33d87bf3bf" + "c0" + "dc0020" + tokHex + "10" + "c0" + "a3475055" +
				"c0" + "92c0c0" + "00" + "ae" + hex.EncodeToString([]byte("full_attention")) + "00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := hex.EncodeToString(tt.enc.appendBatch(nil, batch))
			if got != tt.want {
				t.Errorf("payload\n got  %s\n want %s", got, tt.want)
			}
		})
	}
	t.Run("map", func(t *testing.T) {
		t.Parallel()
		b := AppendBatch(nil, batch, WireMap, false)
		if len(b) != 228 {
			t.Errorf("map payload is %d bytes, spec example is 228", len(b))
		}
		b = AppendBatch(nil, batch, WireMap, true)
		if len(b) != 278 {
			t.Errorf("bytes-hash payload is %d bytes, spec example is 278", len(b))
		}
	})
	t.Run("removed and cleared", func(t *testing.T) {
		t.Parallel()
		b := eventEncoder{wire: WireMap}.appendBatch(nil, &Batch{Events: []Event{
			{Kind: BlockRemoved, Hashes: hashes}, {Kind: AllBlocksCleared},
		}, Rank: 1})
		v, err := decodeMsgpack(b)
		if err != nil {
			t.Fatal(err)
		}
		env := v.([]any)
		evs := env[1].([]any)
		rm := evs[0].(map[string]any)
		if rm["type"] != "BlockRemoved" || len(rm) != 4 || rm["medium"] != "GPU" || evs[1].(map[string]any)["type"] != "AllBlocksCleared" || env[2] != uint64(1) {
			t.Errorf("decoded %v", env)
		}
	})
}

// TestCacheSaltChangesChain checks that a cache salt (an extra key on
// block 0 only) changes every hash of the chain, and is put on the wire.
func TestCacheSaltChangesChain(t *testing.T) {
	t.Parallel()
	h := newHasher("0")
	plain := h.chain(nil, seq(1, 48), 16, func(int) []string { return nil })
	r := Request{CacheSalt: "tenant-a"}
	salted := h.chain(nil, seq(1, 48), 16, r.extraKeys)
	for i := range plain {
		if plain[i] == salted[i] {
			t.Errorf("block %d: salt did not change the hash", i)
		}
	}
}
