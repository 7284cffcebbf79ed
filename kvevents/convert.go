package kvevents

import (
	"strconv"

	"github.com/warmpath/warmpath/kvindex"
)

// fullAttention reports whether ev belongs to the KV-cache group prefix
// routing follows: full attention, which is group 0 in vLLM.
func fullAttention(ev *Event) bool {
	if ev.SpecKind != "" {
		return ev.SpecKind == "full_attention"
	}
	return ev.GroupIdx == 0
}

// loraOf returns the adapter that roots ev's chain: its name, or
// "lora-id:N" for the integer id of engines before ≈0.11.1; "" for the
// base model.
func loraOf(ev *Event) string {
	if ev.LoRAName == "" && ev.HasLoRAID {
		return "lora-id:" + strconv.FormatInt(ev.LoRAID, 10)
	}
	return ev.LoRAName
}

// converter turns decoded batches into the events [kvindex.Index.Apply]
// takes. It reuses its buffers: what convert returns aliases the batch
// and the converter, and is valid until the next call. A converter
// belongs to one goroutine; the zero value is ready to use.
type converter struct {
	events []kvindex.Event
	extra  []uint64
}

// convert returns b's events as the index takes them: the adapter named,
// the cache salt found, the other extra keys digested, the medium told
// apart as GPU or not, and the events of other KV-cache groups dropped.
// It counts in m what it drops and what the decoder did not recognise.
func (c *converter) convert(b *Batch, m *metrics) []kvindex.Event {
	c.events, c.extra = c.events[:0], c.extra[:0]
	if b.UnknownEvents > 0 {
		m.skipUnknownEvent.Add(float64(b.UnknownEvents))
	}
	if b.UnknownFields > 0 {
		m.skipUnknownField.Add(float64(b.UnknownFields))
	}
	for i := range b.Events {
		ev := &b.Events[i]
		if ev.Kind == AllBlocksCleared {
			c.events = append(c.events, kvindex.Event{Kind: AllBlocksCleared})
			continue
		}
		if !fullAttention(ev) {
			m.skipOtherGroup.Inc()
			continue
		}
		out := kvindex.Event{
			Kind: ev.Kind, BlockHashes: ev.BlockHashes, ParentHash: ev.ParentHash, HasParent: ev.HasParent,
			TokenIDs: ev.TokenIDs, BlockSize: ev.BlockSize, Offloaded: ev.Medium != "" && ev.Medium != MediumGPU,
		}
		if ev.Kind == BlockStored {
			out.LoRA = loraOf(ev)
			if !ev.HasParent && len(ev.ExtraKeys) > 0 && ev.ExtraKeys[0] != nil {
				out.Salt = saltOf(ev.ExtraKeys[0], ev)
			}
			out.Extra = c.digests(ev, out.Salt)
		}
		c.events = append(c.events, out)
	}
	return c.events
}

// digests returns the digests of ev's extra keys per block, salt being
// its chain's salt (kvindex.Event.Extra), in c's buffer; nil when no
// block has extra keys besides the adapter and the salt. Extra keys that
// do not match the blocks one to one are passed on at their own length,
// for the index to skip the event as invalid.
func (c *converter) digests(ev *Event, salt string) []uint64 {
	if ev.ExtraKeys == nil {
		return nil
	}
	start := len(c.extra)
	some := false
	for i, raw := range ev.ExtraKeys {
		var d uint64
		if raw != nil {
			s := ""
			if i == 0 && !ev.HasParent {
				s = salt
			}
			d = extraDigest(raw, ev, s)
		}
		some = some || d != 0
		c.extra = append(c.extra, d)
	}
	if !some && len(ev.ExtraKeys) == len(ev.BlockHashes) {
		c.extra = c.extra[:start]
		return nil
	}
	return c.extra[start:len(c.extra):len(c.extra)]
}
