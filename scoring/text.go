package scoring

import (
	"hash/maphash"
	"time"

	"github.com/warmpath/warmpath/kvindex"
)

// The approximate mode: without exact token ids, the gathering room hashes
// the prompt's text (Request.Prompt) in chunks, and textRoutes, warmpath's
// memory of which chunks it routed where, estimates each candidate's
// cached prefix from it.

// textRoutes remembers, per worker, the text chunks warmpath routed there.
// Commits write it, so it is guarded by the router's mutex.
type textRoutes struct {
	cfg     *Config
	workers map[string]*textHistory
}

func newTextRoutes(cfg *Config) textRoutes {
	return textRoutes{cfg: cfg, workers: make(map[string]*textHistory)}
}

// apply estimates cached tokens on d's candidates from the routed history
// of chain; the decision is approximate when any candidate matched.
func (t *textRoutes) apply(d *Decision, chain []uint64, now time.Time) {
	ttl := int64(t.cfg.TextTTL)
	for i := range d.Candidates {
		h := t.workers[d.Candidates[i].Worker]
		if h == nil {
			continue
		}
		k := h.match(chain, now.UnixNano(), ttl)
		if k == 0 {
			continue
		}
		d.Mode = ModeApproximate
		est := int(float64(k*t.cfg.TextChunk) / t.cfg.BytesPerToken)
		d.Candidates[i].CachedTokens = min(est, max(d.PromptTokens-1, 0))
	}
}

// record notes that chain was routed to worker at now.
func (t *textRoutes) record(worker string, chain []uint64, now time.Time) {
	h := t.workers[worker]
	if h == nil {
		h = newTextHistory(t.cfg.TextHistory)
		t.workers[worker] = h
	}
	h.record(chain, now.UnixNano())
}

// forget drops worker's history.
func (t *textRoutes) forget(worker string) { delete(t.workers, worker) }

// textChain hashes body in whole chunks of size bytes, each hash chained to
// the one before and to key, so equal hashes mean equal text prefixes. It is
// the approximate mode's stand-in for token blocks; the trailing partial
// chunk is not hashed, as the engine caches only whole blocks.
func textChain(seed maphash.Seed, key kvindex.ChainKey, body []byte, size int, dst []uint64) []uint64 {
	h := maphash.String(seed, key.Model+"\x00"+key.LoRA+"\x00"+key.Salt)
	for off := 0; off+size <= len(body); off += size {
		h = mix(h ^ maphash.Bytes(seed, body[off:off+size]))
		dst = append(dst, h)
	}
	return dst
}

// mix is the splitmix64 finaliser.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// textHistory remembers which text chunks warmpath routed to one worker and
// when. It holds at most capacity chunks, forgetting the oldest inserted
// first. It is not safe for concurrent use.
type textHistory struct {
	seen     map[uint64]int64 // chain hash → last routed, unix ns
	ring     []uint64         // chain hashes in insertion order
	next     int
	capacity int
}

func newTextHistory(capacity int) *textHistory {
	return &textHistory{seen: make(map[uint64]int64), capacity: capacity}
}

// record notes that chain was routed to the worker at now.
func (h *textHistory) record(chain []uint64, now int64) {
	for _, c := range chain {
		if _, ok := h.seen[c]; ok {
			h.seen[c] = now
			continue
		}
		if len(h.ring) < h.capacity {
			h.ring = append(h.ring, c)
		} else {
			delete(h.seen, h.ring[h.next])
			h.ring[h.next] = c
			h.next = (h.next + 1) % h.capacity
		}
		h.seen[c] = now
	}
}

// match returns how many leading chunks of chain were routed to the worker
// within ttl before now.
func (h *textHistory) match(chain []uint64, now, ttl int64) int {
	for i, c := range chain {
		t, ok := h.seen[c]
		if !ok || now-t > ttl {
			return i
		}
	}
	return len(chain)
}
