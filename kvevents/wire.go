package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/warmpath/warmpath/kvindex"
)

// EventKind is the type of one KV-cache event: the index's kinds are
// vLLM's, and String returns the vLLM tag.
type EventKind = kvindex.EventKind

// The event kinds vLLM publishes.
const (
	BlockStored      = kvindex.BlockStored
	BlockRemoved     = kvindex.BlockRemoved
	AllBlocksCleared = kvindex.AllBlocksCleared
)

// MediumGPU is the medium of blocks in the engine's device block pool, and
// the medium assumed when an event carries none (vLLM before 0.11).
const MediumGPU = "GPU"

// Event is one decoded KV-cache event. Slices alias the [Decoder]'s buffers
// and the payload; they are valid until the next call to [Decoder.Decode].
type Event struct {
	Kind EventKind
	// BlockHashes are the engine's block hashes, folded to 64 bits: ints as
	// their two's complement bit pattern, bytes as their last 8 bytes read
	// big-endian (which equals vLLM's int mode).
	BlockHashes []uint64
	// ParentHash is the hash of the block before the first stored one, when
	// HasParent is true. BlockStored only.
	ParentHash uint64
	HasParent  bool
	// TokenIDs covers the stored blocks, BlockSize tokens each. BlockStored only.
	TokenIDs  []uint32
	BlockSize int
	// LoRAID is the deprecated integer LoRA id, when HasLoRAID is true.
	LoRAID    int64
	HasLoRAID bool
	// LoRAName is the adapter name, empty for the base model.
	LoRAName string
	// Medium is the upper-cased storage medium ("GPU", "CPU", ...); empty
	// when the event carries none, which means GPU.
	Medium string
	// ExtraKeys holds, per stored block, the raw msgpack of that block's extra
	// hash keys, or nil when the block has none (or the field is absent).
	ExtraKeys [][]byte
	// GroupIdx is the KV-cache group (0 for plain full-attention models).
	GroupIdx int
	// SpecKind is kv_cache_spec_kind, e.g. "full_attention"; empty when absent.
	SpecKind      string
	SlidingWindow int
}

// Batch is one decoded KVEventBatch. A Batch is reused by [Decoder.Decode];
// its contents are valid until the next call.
type Batch struct {
	// TS is the engine's wall-clock time in seconds when it published.
	TS float64
	// Events are the recognised events, in order.
	Events []Event
	// DPRank is the data-parallel rank, when HasDPRank is true.
	DPRank    int
	HasDPRank bool
	// UnknownEvents counts events whose tag was not recognised; they were skipped.
	UnknownEvents int
	// UnknownFields counts fields (map keys or extra array positions) that
	// were not recognised; they were skipped.
	UnknownFields int
}

// ErrPayload is wrapped by every error [Decoder.Decode] returns.
var ErrPayload = errors.New("invalid kv event payload")

// Decoder decodes vLLM KVEventBatch payloads (msgpack) of every known layout:
// array or map envelopes, array-era (tag first) and map-era ("type" key)
// events, integer or bytes hashes, and every optional field.
//
// A Decoder reuses its buffers between calls and is not safe for concurrent
// use; the zero value is ready to use.
type Decoder struct {
	hashes  []uint64
	tokens  []uint32
	extras  [][]byte
	interns map[string]string
}

// maxInterned bounds the strings a Decoder keeps to avoid allocating on
// every event; past it, new names are allocated per event.
const maxInterned = 4096

// Decode parses payload into b, replacing its contents. The events in b
// alias payload and the Decoder's buffers. Unknown event tags and fields
// are skipped and counted in b. Malformed msgpack or values of the wrong
// type return an error wrapping [ErrPayload]; b then holds the events
// decoded before the fault.
func (d *Decoder) Decode(payload []byte, b *Batch) error {
	*b = Batch{Events: b.Events[:0]}
	d.hashes = d.hashes[:0]
	d.tokens = d.tokens[:0]
	d.extras = d.extras[:0]
	r := reader{b: payload}
	if err := d.envelope(&r, b); err != nil {
		return fmt.Errorf("%w at byte %d: %w", ErrPayload, r.off, err)
	}
	if r.off != len(payload) {
		return fmt.Errorf("%w: %d trailing bytes", ErrPayload, len(payload)-r.off)
	}
	return nil
}

func (d *Decoder) envelope(r *reader, b *Batch) error {
	c, err := r.peek()
	if err != nil {
		return err
	}
	if c&0xf0 == 0x80 || c == 0xde || c == 0xdf {
		n, err := r.mapLen()
		if err != nil {
			return err
		}
		for range n {
			key, err := r.str()
			if err != nil {
				return fmt.Errorf("envelope key: %w", err)
			}
			switch string(key) {
			case "ts":
				err = d.ts(r, b)
			case "events":
				err = d.events(r, b)
			case "data_parallel_rank":
				err = d.rank(r, b)
			default:
				b.UnknownFields++
				err = r.skip()
			}
			if err != nil {
				return fmt.Errorf("envelope %q: %w", key, err)
			}
		}
		return nil
	}
	n, err := r.arrayLen()
	if err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	if n < 2 {
		return fmt.Errorf("envelope has %d elements, want 2 or 3: %w", n, ErrType)
	}
	if err := d.ts(r, b); err != nil {
		return fmt.Errorf("envelope ts: %w", err)
	}
	if err := d.events(r, b); err != nil {
		return err
	}
	if n >= 3 {
		if err := d.rank(r, b); err != nil {
			return fmt.Errorf("envelope data_parallel_rank: %w", err)
		}
	}
	for range n - 3 {
		b.UnknownFields++
		if err := r.skip(); err != nil {
			return err
		}
	}
	return nil
}

func (d *Decoder) ts(r *reader, b *Batch) error {
	if r.isNil() {
		return nil
	}
	f, err := r.float()
	b.TS = f
	return err
}

func (d *Decoder) rank(r *reader, b *Batch) error {
	if r.isNil() {
		return nil
	}
	v, err := r.smallInt()
	b.DPRank, b.HasDPRank = v, err == nil
	return err
}

// smallInt reads an integer that must fit in an int32.
func (r *reader) smallInt() (int, error) {
	u, _, err := r.integer()
	if err != nil {
		return 0, err
	}
	v := int64(u)
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, fmt.Errorf("integer %d out of range: %w", v, ErrType)
	}
	return int(v), nil
}

func (d *Decoder) events(r *reader, b *Batch) error {
	n, err := r.arrayLen()
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	for i := range n {
		if err := d.event(r, b); err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
	}
	return nil
}

// field names an event field; array-era positions map onto these.
type field uint8

const (
	fUnknown field = iota
	fHashes
	fParent
	fTokens
	fBlockSize
	fLoRAID
	fMedium
	fLoRAName
	fExtraKeys
	fGroupIdx
	fSpecKind
	fSlidingWindow
)

// Positional layouts of the array era, after the tag.
var (
	storedFields  = []field{fHashes, fParent, fTokens, fBlockSize, fLoRAID, fMedium, fLoRAName, fExtraKeys, fGroupIdx, fSpecKind, fSlidingWindow}
	removedFields = []field{fHashes, fMedium, fGroupIdx}
)

func fieldByName(name []byte) field {
	switch string(name) {
	case "block_hashes":
		return fHashes
	case "parent_block_hash":
		return fParent
	case "token_ids":
		return fTokens
	case "block_size":
		return fBlockSize
	case "lora_id":
		return fLoRAID
	case "medium":
		return fMedium
	case "lora_name":
		return fLoRAName
	case "extra_keys":
		return fExtraKeys
	case "group_idx":
		return fGroupIdx
	case "kv_cache_spec_kind":
		return fSpecKind
	case "kv_cache_spec_sliding_window":
		return fSlidingWindow
	}
	return fUnknown
}

func kindOf(tag []byte) EventKind {
	switch string(tag) {
	case "BlockStored":
		return BlockStored
	case "BlockRemoved":
		return BlockRemoved
	case "AllBlocksCleared":
		return AllBlocksCleared
	}
	return 0
}

// allowed reports whether kind k has field f.
func allowed(k EventKind, f field) bool {
	switch k {
	case BlockStored:
		return f != fUnknown
	case BlockRemoved:
		return f == fHashes || f == fMedium || f == fGroupIdx
	}
	return false
}

func (d *Decoder) event(r *reader, b *Batch) error {
	c, err := r.peek()
	if err != nil {
		return err
	}
	ev := Event{}
	if c&0xf0 == 0x80 || c == 0xde || c == 0xdf {
		n, err := r.mapLen()
		if err != nil {
			return err
		}
		// vLLM writes "type" first, but a map may be in any order: note
		// where known fields start until the tag is known.
		var pending [16]pendingField
		np := 0
		for range n {
			key, err := r.str()
			if err != nil {
				return fmt.Errorf("key: %w", err)
			}
			if string(key) == "type" {
				tag, err := r.str()
				if err != nil {
					return fmt.Errorf("type: %w", err)
				}
				ev.Kind = kindOf(tag)
				continue
			}
			f := fieldByName(key)
			switch {
			case ev.Kind == 0 && f != fUnknown:
				if np == len(pending) {
					return fmt.Errorf("too many fields before type: %w", ErrType)
				}
				pending[np] = pendingField{off: r.off, f: f}
				np++
				if err := r.skip(); err != nil {
					return err
				}
			case ev.Kind == 0 || !allowed(ev.Kind, f):
				if ev.Kind != 0 {
					b.UnknownFields++
				}
				if err := r.skip(); err != nil {
					return err
				}
			default:
				if err := d.field(r, &ev, f); err != nil {
					return fmt.Errorf("%s: %w", key, err)
				}
			}
		}
		for _, p := range pending[:np] {
			if ev.Kind == 0 {
				break
			}
			if !allowed(ev.Kind, p.f) {
				b.UnknownFields++
				continue
			}
			lr := reader{b: r.b, off: p.off}
			if err := d.field(&lr, &ev, p.f); err != nil {
				return fmt.Errorf("field before type: %w", err)
			}
		}
	} else {
		n, err := r.arrayLen()
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("empty event array: %w", ErrType)
		}
		tag, err := r.str()
		if err != nil {
			return fmt.Errorf("tag: %w", err)
		}
		ev.Kind = kindOf(tag)
		var layout []field
		switch ev.Kind {
		case BlockStored:
			layout = storedFields
		case BlockRemoved:
			layout = removedFields
		}
		for i := 1; i < n; i++ {
			if ev.Kind == 0 || i-1 >= len(layout) {
				if ev.Kind != 0 {
					b.UnknownFields++
				}
				if err := r.skip(); err != nil {
					return err
				}
				continue
			}
			if err := d.field(r, &ev, layout[i-1]); err != nil {
				return fmt.Errorf("%s field %d: %w", ev.Kind, i, err)
			}
		}
	}
	if ev.Kind == 0 {
		b.UnknownEvents++
		return nil
	}
	b.Events = append(b.Events, ev)
	return nil
}

// pendingField is a map-event field met before the "type" key.
type pendingField struct {
	off int
	f   field
}

func (d *Decoder) field(r *reader, ev *Event, f field) error {
	switch f {
	case fHashes:
		if r.isNil() {
			return nil
		}
		n, err := r.arrayLen()
		if err != nil {
			return err
		}
		start := len(d.hashes)
		for range n {
			h, err := r.hash()
			if err != nil {
				return err
			}
			d.hashes = append(d.hashes, h)
		}
		ev.BlockHashes = d.hashes[start:len(d.hashes):len(d.hashes)]
	case fParent:
		if r.isNil() {
			return nil
		}
		h, err := r.hash()
		ev.ParentHash, ev.HasParent = h, err == nil
		return err
	case fTokens:
		if r.isNil() {
			return nil
		}
		n, err := r.arrayLen()
		if err != nil {
			return err
		}
		start := len(d.tokens)
		if d.tokens, err = r.appendUint32s(d.tokens, n); err != nil {
			return err
		}
		ev.TokenIDs = d.tokens[start:len(d.tokens):len(d.tokens)]
	case fBlockSize:
		v, err := r.smallInt()
		ev.BlockSize = v
		return err
	case fLoRAID:
		if r.isNil() {
			return nil
		}
		u, _, err := r.integer()
		ev.LoRAID, ev.HasLoRAID = int64(u), err == nil
		return err
	case fMedium:
		if r.isNil() {
			return nil
		}
		s, err := r.str()
		if err != nil {
			return err
		}
		ev.Medium = canonicalMedium(s)
	case fLoRAName:
		if r.isNil() {
			return nil
		}
		s, err := r.str()
		if err != nil {
			return err
		}
		ev.LoRAName = d.intern(s)
	case fExtraKeys:
		if r.isNil() {
			return nil
		}
		n, err := r.arrayLen()
		if err != nil {
			return err
		}
		start := len(d.extras)
		for range n {
			if r.isNil() {
				d.extras = append(d.extras, nil)
				continue
			}
			from := r.off
			if err := r.skip(); err != nil {
				return err
			}
			d.extras = append(d.extras, r.b[from:r.off:r.off])
		}
		ev.ExtraKeys = d.extras[start:len(d.extras):len(d.extras)]
	case fGroupIdx:
		if r.isNil() {
			return nil
		}
		v, err := r.smallInt()
		ev.GroupIdx = v
		return err
	case fSpecKind:
		if r.isNil() {
			return nil
		}
		s, err := r.str()
		if err != nil {
			return err
		}
		ev.SpecKind = d.intern(s)
	case fSlidingWindow:
		if r.isNil() {
			return nil
		}
		v, err := r.smallInt()
		ev.SlidingWindow = v
		return err
	}
	return nil
}

// hash reads a block hash in any of its wire forms and folds it to 64 bits.
func (r *reader) hash() (uint64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if c&0xe0 == 0xa0 || (c >= 0xc4 && c <= 0xc6) || (c >= 0xd9 && c <= 0xdb) {
		s, err := r.str()
		if err != nil {
			return 0, err
		}
		return foldHash(s), nil
	}
	u, _, err := r.integer()
	return u, err
}

// foldHash returns the last 8 bytes of a digest as a big-endian integer,
// left-padded with zeros when the digest is shorter.
func foldHash(s []byte) uint64 {
	if len(s) >= 8 {
		return binary.BigEndian.Uint64(s[len(s)-8:])
	}
	var buf [8]byte
	copy(buf[8-len(s):], s)
	return binary.BigEndian.Uint64(buf[:])
}

func canonicalMedium(s []byte) string {
	switch {
	case bytes.EqualFold(s, []byte("GPU")):
		return MediumGPU
	case bytes.EqualFold(s, []byte("CPU")):
		return "CPU"
	case bytes.EqualFold(s, []byte("DISK")):
		return "DISK"
	case bytes.EqualFold(s, []byte("STORAGE")):
		return "STORAGE"
	}
	return strings.ToUpper(string(s))
}

func (d *Decoder) intern(s []byte) string {
	if v, ok := d.interns[string(s)]; ok {
		return v
	}
	v := string(s)
	if d.interns == nil {
		d.interns = make(map[string]string)
	}
	if len(d.interns) < maxInterned {
		d.interns[v] = v
	}
	return v
}
