package kvindex

import (
	"github.com/zeebo/xxh3"
)

// vLLM's per-block extra hash keys are, in order: the LoRA (its name, or
// the integer id before ≈0.11.1), multimodal items, the cache salt (block 0
// only) and prompt-embedding digests. warmpath roots chains in the LoRA name
// and the salt, so those are recognised; every other extra key is folded
// into the block's key, which makes requests that cannot name it (images,
// embeddings) miss from that block on, as the engine would if the item
// differed.

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

// foldExtra folds a block's extra keys other than the LoRA and (on a
// chain's first block) the salt into key.
func foldExtra(key uint64, raw []byte, ev *Event, first bool) uint64 {
	var salt []byte
	if first {
		salt = []byte(saltOf(raw, ev))
	}
	saltSeen := false
	extraKeys(raw, func(elem []byte) {
		if isLoRA(elem, ev) {
			return
		}
		if first && !saltSeen && len(salt) > 0 {
			r := reader{b: elem}
			if s, err := r.str(); err == nil && string(s) == string(salt) && r.off == len(elem) {
				// Only the last such string is the salt; earlier equal
				// strings are folded, which cannot match a request anyway.
				saltSeen = true
				return
			}
		}
		key = xxh3.HashSeed(elem, key)
	})
	return key
}
