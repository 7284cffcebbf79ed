package kvevents

import (
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/kvindex"
)

// TestConvert feeds wire events through the converter to an index and
// checks what a lookup then finds and what the converter counted.
func TestConvert(t *testing.T) {
	t.Parallel()
	p := seqTokens(1, 4*testBlock+1)
	store := func(mod func(ev *Event)) Event {
		ev := Event{Kind: BlockStored, BlockHashes: []uint64{1, 2, 3, 4}, TokenIDs: p[:4*testBlock], BlockSize: testBlock}
		if mod != nil {
			mod(&ev)
		}
		return ev
	}
	loraSalt := (&enc{}).arr(2).str("sql").str("tenant-a").b
	item := (&enc{}).arr(1).arr(2).str("mm-abc").uint(4).b
	base := kvindex.ChainKey{Model: "m"}
	tests := []struct {
		name       string
		events     []Event
		key        kvindex.ChainKey
		gpu, off   int
		otherGroup float64
	}{
		{name: "full attention group 0", events: []Event{store(nil)}, key: base, gpu: 64},
		{name: "other KV-cache group ignored", events: []Event{store(func(ev *Event) { ev.GroupIdx = 1 })}, key: base, otherGroup: 1},
		{name: "sliding window kind ignored even in group 0",
			events: []Event{store(func(ev *Event) { ev.SpecKind = "sliding_window" })}, key: base, otherGroup: 1},
		{name: "the kind decides over the group",
			events: []Event{store(func(ev *Event) { ev.GroupIdx, ev.SpecKind = 1, "full_attention" })}, key: base, gpu: 64},
		{name: "other group's removal ignored",
			events: []Event{store(nil), {Kind: BlockRemoved, BlockHashes: []uint64{2}, GroupIdx: 2}}, key: base, gpu: 64, otherGroup: 1},
		{name: "removal ends the prefix", events: []Event{store(nil), {Kind: BlockRemoved, BlockHashes: []uint64{2}}}, key: base, gpu: 16},
		{name: "all blocks cleared", events: []Event{store(nil), {Kind: AllBlocksCleared}}, key: base},
		{name: "a CPU medium is offloaded", events: []Event{store(func(ev *Event) { ev.Medium = "CPU" })}, key: base, off: 64},
		{name: "an integer LoRA id roots as lora-id:N",
			events: []Event{store(func(ev *Event) { ev.LoRAID, ev.HasLoRAID = 7, true })},
			key:    kvindex.ChainKey{Model: "m", LoRA: "lora-id:7"}, gpu: 64},
		{name: "the LoRA name wins over the id",
			events: []Event{store(func(ev *Event) { ev.LoRAID, ev.HasLoRAID, ev.LoRAName = 7, true, "sql" })},
			key:    kvindex.ChainKey{Model: "m", LoRA: "sql"}, gpu: 64},
		{name: "the salt among block 0's extra keys roots the chain",
			events: []Event{store(func(ev *Event) { ev.LoRAName, ev.ExtraKeys = "sql", [][]byte{loraSalt, nil, nil, nil} })},
			key:    kvindex.ChainKey{Model: "m", LoRA: "sql", Salt: "tenant-a"}, gpu: 64},
		{name: "a salted chain misses without the salt",
			events: []Event{store(func(ev *Event) { ev.LoRAName, ev.ExtraKeys = "sql", [][]byte{loraSalt, nil, nil, nil} })},
			key:    kvindex.ChainKey{Model: "m", LoRA: "sql"}},
		{name: "a multimodal item ends a plain request's match",
			events: []Event{store(func(ev *Event) { ev.ExtraKeys = [][]byte{nil, item, nil, nil} })}, key: base, gpu: 16},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ix := newIndex(t, nil)
			m, err := newMetrics(component.Options{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var c converter
			ix.Apply(kvindex.Source{Worker: "w", Model: "m"}, c.convert(&Batch{Events: tc.events}, m))
			if gpu, off := cachedOn(ix.Lookup(tc.key, p, testBlock), "w"); gpu != tc.gpu || off != tc.off {
				t.Errorf("cached gpu=%d off=%d, want gpu=%d off=%d", gpu, off, tc.gpu, tc.off)
			}
			if n := testutil.ToFloat64(m.skipOtherGroup); n != tc.otherGroup {
				t.Errorf("other_group skips %v, want %v", n, tc.otherGroup)
			}
		})
	}
}

// TestConvertExtra checks the digests of extra keys the converter hands
// the index: equal items give equal digests, different items different
// ones, the adapter and the salt none, and extra keys misaligned with the
// blocks are passed on for the index to reject.
func TestConvertExtra(t *testing.T) {
	t.Parallel()
	tokens := seqTokens(1, 2*testBlock)
	item := func(id string) []byte { return (&enc{}).arr(1).arr(2).str(id).uint(4).b }
	extra := func(parent bool, keys ...[]byte) []uint64 {
		t.Helper()
		m, err := newMetrics(component.Options{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ev := Event{Kind: BlockStored, BlockHashes: []uint64{1, 2}, TokenIDs: tokens, BlockSize: testBlock,
			LoRAName: "sql", HasParent: parent, ExtraKeys: keys}
		var c converter
		return slices.Clone(c.convert(&Batch{Events: []Event{ev}}, m)[0].Extra)
	}
	salted := (&enc{}).arr(2).str("sql").str("tenant-a").b
	abc, xyz := extra(false, nil, item("mm-abc")), extra(false, nil, item("mm-xyz"))
	tests := []struct {
		name string
		got  []uint64
		want func(got []uint64) bool
	}{
		{"no extra keys", extra(false), func(d []uint64) bool { return d == nil }},
		{"null per block", extra(false, nil, nil), func(d []uint64) bool { return d == nil }},
		{"adapter and salt only", extra(false, salted, nil), func(d []uint64) bool { return d == nil }},
		{"an item digests its block alone", abc, func(d []uint64) bool { return len(d) == 2 && d[0] == 0 && d[1] != 0 }},
		{"the same item, the same digest", extra(false, nil, item("mm-abc")), func(d []uint64) bool { return slices.Equal(d, abc) }},
		{"another item, another digest", xyz, func(d []uint64) bool { return len(d) == 2 && d[1] != 0 && d[1] != abc[1] }},
		{"the salt is digested on a continued chain", extra(true, salted, nil), func(d []uint64) bool { return len(d) == 2 && d[0] != 0 }},
		{"misaligned keys are passed on", extra(false, nil, nil, nil), func(d []uint64) bool { return len(d) == 3 }},
	}
	for _, tc := range tests {
		if !tc.want(tc.got) {
			t.Errorf("%s: digests %s", tc.name, fmt.Sprint(tc.got))
		}
	}
}
