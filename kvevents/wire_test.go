package kvevents

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/warmpath/warmpath/kvindex"
)

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	good := batch(1, func(e *enc) {
		e.storedArray(stored{hashes: []uint64{1}, tokens: seqTokens(1, 16), blockSize: 16, medium: "GPU"})
	})
	deep := bytes.Repeat([]byte{0x91}, 100)
	tests := []struct {
		name    string
		payload []byte
		want    error
	}{
		{name: "empty", payload: nil, want: ErrTruncated},
		{name: "not an array", payload: []byte{0x05}, want: ErrType},
		{name: "envelope of one", payload: []byte{0x91, 0x00}, want: ErrType},
		{name: "truncated", payload: good[:len(good)-5], want: ErrTruncated},
		{name: "trailing bytes", payload: append(good[:len(good):len(good)], 0x00), want: ErrPayload},
		{name: "events not an array", payload: []byte{0x93, 0x00, 0x05, 0x00}, want: ErrType},
		{name: "huge array count", payload: []byte{0x93, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff}, want: ErrTruncated},
		{name: "deep nesting in unknown event", payload: append([]byte{0x93, 0x00, 0x91, 0x92, 0xa1, 'X'}, deep...), want: ErrTooDeep},
		{name: "reserved byte", payload: []byte{0x93, 0x00, 0x91, 0x92, 0xa1, 'X', 0xc1}, want: ErrType},
		{name: "negative token", payload: batch(1, func(e *enc) {
			e.arr(5).str("BlockStored").arr(1).uint(1).nil().arr(1).int(-1).uint(1)
		}), want: ErrType},
		{name: "token over 32 bits", payload: batch(1, func(e *enc) {
			e.arr(5).str("BlockStored").arr(1).uint(1).nil().arr(1).uint(1 << 40).uint(1)
		}), want: ErrType},
		{name: "hash as float", payload: batch(1, func(e *enc) {
			e.arr(2).str("BlockRemoved").arr(1).f64(1)
		}), want: ErrType},
		{name: "tag not a string", payload: batch(1, func(e *enc) { e.arr(1).uint(3) }), want: ErrType},
		{name: "empty event array", payload: batch(1, func(e *enc) { e.arr(0) }), want: ErrType},
		{name: "block size too large", payload: batch(1, func(e *enc) {
			e.arr(5).str("BlockStored").arr(0).nil().arr(0).uint(1 << 40)
		}), want: ErrType},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var d Decoder
			var b Batch
			err := d.Decode(tc.payload, &b)
			if !errors.Is(err, ErrPayload) || !errors.Is(err, tc.want) {
				t.Fatalf("Decode = %v, want %v wrapping %v", err, ErrPayload, tc.want)
			}
		})
	}
}

func TestDecodeForms(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		payload []byte
		check   func(t *testing.T, b *Batch)
	}{
		{
			name: "map envelope with unknown key",
			payload: (&enc{}).mp(4).str("events").arr(1).arr(1).str("AllBlocksCleared").
				str("ts").f64(2.5).str("data_parallel_rank").uint(3).str("snapshot").arr(2).uint(1).uint(2).b,
			check: func(t *testing.T, b *Batch) {
				if b.TS != 2.5 || b.DPRank != 3 || len(b.Events) != 1 || b.UnknownFields != 1 {
					t.Errorf("got %+v", b)
				}
			},
		},
		{
			name: "map event with type last",
			payload: batch(1, func(e *enc) {
				e.mp(3).str("block_hashes").arr(1).uint(9).str("medium").str("cpu").str("type").str("BlockRemoved")
			}),
			check: func(t *testing.T, b *Batch) {
				if len(b.Events) != 1 || b.Events[0].Kind != BlockRemoved || b.Events[0].BlockHashes[0] != 9 || b.Events[0].Medium != "CPU" {
					t.Errorf("got %+v", b.Events)
				}
			},
		},
		{
			name: "bytes hash shorter than 8",
			payload: batch(1, func(e *enc) {
				e.arr(2).str("BlockRemoved").arr(1).bin([]byte{1, 2})
			}),
			check: func(t *testing.T, b *Batch) {
				if b.Events[0].BlockHashes[0] != 0x0102 {
					t.Errorf("hash %x", b.Events[0].BlockHashes[0])
				}
			},
		},
		{
			name:    "nil ts and rank",
			payload: (&enc{}).arr(3).nil().arr(0).nil().b,
			check: func(t *testing.T, b *Batch) {
				if b.HasDPRank || b.TS != 0 {
					t.Errorf("got %+v", b)
				}
			},
		},
		{
			name: "unknown map event",
			payload: batch(2, func(e *enc) {
				e.mp(2).str("type").str("BlockPinned").str("block_hashes").arr(1).uint(1)
				e.arr(1).str("AllBlocksCleared")
			}),
			check: func(t *testing.T, b *Batch) {
				if b.UnknownEvents != 1 || len(b.Events) != 1 {
					t.Errorf("got %+v", b)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var d Decoder
			var b Batch
			if err := d.Decode(tc.payload, &b); err != nil {
				t.Fatal(err)
			}
			tc.check(t, &b)
		})
	}
}

func FuzzDecode(f *testing.F) {
	for _, m := range loadCapture(f, capturePath) {
		f.Add(m.Payload)
	}
	f.Add(batch(2, func(e *enc) {
		e.storedArray(stored{hashes: []uint64{1, 2}, tokens: seqTokens(1, 32), blockSize: 16, medium: "GPU"})
		e.removedArray(1)
	}))
	f.Add((&enc{}).mp(2).str("ts").f64(1).str("events").arr(0).b)
	f.Fuzz(func(t *testing.T, payload []byte) {
		var d Decoder
		var b Batch
		if err := d.Decode(payload, &b); err != nil {
			if !errors.Is(err, ErrPayload) {
				t.Fatalf("error %v does not wrap ErrPayload", err)
			}
			return
		}
		// Whatever decodes must convert, apply and look up without
		// panicking.
		ix := newIndex(t, nil, func(c *kvindex.Config) { c.EntryBudget = 64 })
		feed(t, ix, kvindex.Source{Worker: "w", Model: "m"}, b.Events...)
		for _, ev := range b.Events {
			if ev.BlockSize > 0 && len(ev.TokenIDs) > 0 {
				ix.Lookup(kvindex.ChainKey{Model: "m", LoRA: loraOf(&ev)}, append(ev.TokenIDs, 0), ev.BlockSize)
			}
		}
	})
}

func TestDecodeValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		raw  []byte
		want string
	}{
		{"lora and salt", (&enc{}).arr(2).str("sql").str("tenant-a").b, "[sql tenant-a]"},
		{"multimodal item", (&enc{}).arr(1).arr(2).str("mm-abc").uint(4).b, "[[mm-abc 4]]"},
		{"negative and huge ints", (&enc{}).arr(2).int(-5).uint(1 << 63).b, "[-5 9223372036854775808]"},
		{"map", (&enc{}).mp(1).str("k").nil().b, "map[k:<nil>]"},
		{"bytes", (&enc{}).bin([]byte{1, 2}).b, "[1 2]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, err := DecodeValue(tc.raw)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(v); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
	if _, err := DecodeValue([]byte{0x92, 0x01}); !errors.Is(err, ErrTruncated) {
		t.Errorf("truncated array: %v", err)
	}
	if _, err := DecodeValue([]byte{0x01, 0x01}); err == nil {
		t.Error("trailing bytes accepted")
	}
}

// TestAppendUint32s checks the token-array reader on every integer
// encoding, the largest and smallest values of each, and its errors.
func TestAppendUint32s(t *testing.T) {
	t.Parallel()
	in := []byte{
		0x00, 0x7f, // positive fixint
		0xcc, 0x80, 0xcc, 0xff, // uint8
		0xcd, 0x01, 0x00, 0xcd, 0xff, 0xff, // uint16
		0xce, 0x00, 0x01, 0x00, 0x00, 0xce, 0xff, 0xff, 0xff, 0xff, // uint32
		0xcf, 0, 0, 0, 0, 0, 0, 0, 9, // uint64, in range
		0xd0, 0x05, 0xd1, 0x01, 0x00, // int8, int16, non-negative
	}
	want := []uint32{0, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000, 0xffffffff, 9, 5, 0x100}
	r := reader{b: in}
	got, err := r.appendUint32s([]uint32{42}, len(want))
	if err != nil || !slices.Equal(got, append([]uint32{42}, want...)) || r.off != len(in) {
		t.Fatalf("got %v, %v at %d; want 42 then %v at %d", got, err, r.off, want, len(in))
	}
	for _, c := range []struct {
		what string
		in   []byte
		want error
	}{
		{"negative fixint", []byte{0xff}, ErrType},
		{"negative int8", []byte{0xd0, 0x80}, ErrType},
		{"past 2³²", []byte{0xcf, 0, 0, 0, 1, 0, 0, 0, 0}, ErrType},
		{"a string", []byte{0xa1, 'x'}, ErrType},
		{"cut uint16", []byte{0xcd, 0x01}, ErrTruncated},
		{"cut uint32", []byte{0xce, 0, 0, 1}, ErrTruncated},
		{"cut uint8", []byte{0xcc}, ErrTruncated},
		{"fewer elements", []byte{0x01}, ErrTruncated},
	} {
		r := reader{b: c.in}
		if _, err := r.appendUint32s(nil, 2); !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", c.what, err, c.want)
		}
	}
}
