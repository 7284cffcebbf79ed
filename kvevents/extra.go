package kvevents

import (
	"github.com/zeebo/xxh3"
)

// vLLM's per-block extra hash keys are, in order: the LoRA (its name, or
// the integer id before ≈0.11.1), multimodal items, the cache salt (block 0
// only) and prompt-embedding digests. warmpath roots chains in the LoRA name
// and the salt, so those are recognised; every other extra key goes into
// the block's digest (kvindex.Event.Extra), which the index folds into the
// block's key, so that requests that cannot name it (images, embeddings)
// miss from that block on, as the engine would if the item differed.

// extraKeys calls fn for each element of one block's raw extra keys.
// Malformed input ends the walk quietly: the decoder already validated it.
func extraKeys(raw []byte, fn func(elem []byte)) {
	r := reader{b: raw}
	n, err := r.arrayLen()
	if err != nil {
		fn(raw) // not a tuple: treat the whole value as one key
		return
	}
	for range n {
		from := r.off
		if r.skip() != nil {
			return
		}
		fn(raw[from:r.off])
	}
}

// isLoRA reports whether one extra key names ev's adapter.
func isLoRA(elem []byte, ev *Event) bool {
	r := reader{b: elem}
	if c, _ := r.peek(); c&0xe0 == 0xa0 || c == 0xd9 || c == 0xda || c == 0xdb {
		s, err := r.str()
		return err == nil && ev.LoRAName != "" && string(s) == ev.LoRAName
	}
	u, _, err := r.integer()
	return err == nil && ev.HasLoRAID && int64(u) == ev.LoRAID
}

// saltOf returns the cache salt among block 0's extra keys: the last string
// that is not the LoRA name. It returns "" when there is none.
func saltOf(raw []byte, ev *Event) string {
	var salt []byte
	extraKeys(raw, func(elem []byte) {
		if isLoRA(elem, ev) {
			return
		}
		r := reader{b: elem}
		if c, _ := r.peek(); c&0xe0 == 0xa0 || c == 0xd9 || c == 0xda || c == 0xdb {
			if s, err := r.str(); err == nil {
				salt = s
			}
		}
	})
	return string(salt)
}

// extraSeed starts a block's digest of extra keys.
const extraSeed = 0x6578747261 // "extra"

// extraDigest returns the digest of one block's raw extra keys other than
// ev's LoRA and salt, the cache salt when raw holds a chain's first
// block's keys (see saltOf) and "" otherwise: a hash of each such key's
// msgpack bytes in turn, never 0; or 0 when there are none. Equal keys
// give equal digests in every process.
func extraDigest(raw []byte, ev *Event, salt string) uint64 {
	saltSeen := false
	h, n := uint64(extraSeed), 0
	extraKeys(raw, func(elem []byte) {
		if isLoRA(elem, ev) {
			return
		}
		if !saltSeen && salt != "" {
			r := reader{b: elem}
			if s, err := r.str(); err == nil && string(s) == salt && r.off == len(elem) {
				// One copy of the salt is not digested; further equal
				// strings are, which cannot match a request anyway.
				saltSeen = true
				return
			}
		}
		h = xxh3.HashSeed(elem, h)
		n++
	})
	if n == 0 {
		return 0
	}
	return max(h, 1)
}
