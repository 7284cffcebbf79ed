package kvindex

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"sync"
	"time"

	"github.com/warmpath/warmpath/internal/component"
)

// Defaults for [New].
const (
	// DefaultEntryBudget is the default bound on (block, worker) entries.
	DefaultEntryBudget = 4 << 20
	// DefaultStaleAfter is the default silence after which a worker is stale.
	DefaultStaleAfter = 5 * time.Minute
	// DefaultSpeculativeTTL is the default lifetime of a speculative entry.
	DefaultSpeculativeTTL = 5 * time.Second
)

// Config tunes an Index: the kvindex section of warmpath's configuration
// (with kvevents.Config's keys beside it). Field comments give the unit and
// the default.
type Config struct {
	// EntryBudget bounds the (block, worker) entries the index holds,
	// speculative entries included. Past it, the least recently touched
	// blocks are dropped, chain tails before their roots, passing over the
	// blocks of streams within their fair share (the budget over the
	// streams holding entries), so one worker's flood cannot evict the
	// others. Default 4194304 (about 0.25 GiB at most); 0 selects it.
	EntryBudget int `yaml:"entry_budget"`
	// StaleAfter is how long a worker may publish nothing before
	// [Index.Stale] reports it; 0 disables staleness. An idle vLLM engine
	// publishes nothing, so it must exceed normal lulls. Default 5m.
	StaleAfter time.Duration `yaml:"stale_after"`
	// SpeculativeTTL is how long the blocks of a just-routed request count
	// as cached on the chosen worker before its real events arrive, unless
	// a real event replaces them first. Default 5s; 0 selects it.
	SpeculativeTTL time.Duration `yaml:"speculative_ttl"`
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{EntryBudget: DefaultEntryBudget, StaleAfter: DefaultStaleAfter, SpeculativeTTL: DefaultSpeculativeTTL}
}

// Validate reports every invalid field, joined.
func (c *Config) Validate() error {
	var errs []error
	if c.EntryBudget < 0 {
		errs = append(errs, fmt.Errorf("entry_budget: %d is negative", c.EntryBudget))
	}
	if c.StaleAfter < 0 || c.SpeculativeTTL < 0 {
		errs = append(errs, fmt.Errorf("stale_after, speculative_ttl: %v, %v, must not be negative", c.StaleAfter, c.SpeculativeTTL))
	}
	return errors.Join(errs...)
}

// Index maps chains of token blocks to the workers (and data-parallel ranks)
// whose KV cache holds them, learned from the events of their engines'
// caches, which a subscriber applies through [Index.Apply].
//
// An Index is safe for concurrent use: lookups share a read lock, event
// application takes the write lock one batch at a time, and no write holds
// it for work proportional to the index: tables resize a piece per write,
// and a stream's clear drops its blocks a piece per hold. Build it with
// [New].
type Index struct {
	mu sync.RWMutex

	keys    table    // block key → node index
	pages   [][]node // see nodes.go
	nnodes  uint32   // node indices handed out so far, 0 included
	free    []uint32
	exts    []nodeExt // holders of shared nodes
	freeExt []uint32
	head    uint32 // most recently touched
	tail    uint32 // least recently touched

	// Lookups cannot reorder the LRU list under the read lock, so they log
	// the chains they hit (node indices, each chain ended by 0) and the next
	// writer replays the log before changing anything.
	touchMu  sync.Mutex
	touchLog []uint32

	slots []*slot // by slot id; nil when free
	// names[id] is slots[id].name, kept apart so that a lookup building
	// its matches reads one array instead of every slot.
	names  []slotName
	byName map[slotName]uint16
	// warmed keeps what table.warm read, so that its reads stay.
	warmed   uint64
	entries  int // (node, slot) entries including speculative ones
	specs    int // speculative entries
	maxSlots int // highest slot id + 1
	ranked   int // slots with a data-parallel rank above 0

	budget     int
	staleAfter time.Duration
	specTTL    time.Duration
	// retireHook, when set (by tests), runs before each batch of retire,
	// outside the lock.
	retireHook func()
	log        *slog.Logger
	now        func() time.Time
	m          *metrics
}

// slotName identifies one event stream: a worker's data-parallel rank.
type slotName struct {
	worker string
	rank   int
}

// slot is the index state of one (worker, rank) stream.
type slot struct {
	id     uint16
	name   slotName
	model  string
	blocks table // engine hash → node index
	// specQ[specHead:] are the speculations not yet swept, in expiry order.
	specQ    []specItem
	specHead int
	// specAt maps a node in the shared form to the expiry of the slot's
	// latest speculation on it; a node in the speculative form keeps its
	// expiry itself (see specExpiry). nspec counts the slot's
	// speculations in both forms.
	specAt map[uint32]int64
	nspec  int
	// retiring is the blocks table of a clear whose entries are still on
	// their nodes, dropped retireBatch slots at a time (clearSlotLocked);
	// retired is how many of its slots have been walked.
	retiring table
	retired  int

	status StreamStatus
	lastAt time.Time
	since  time.Time
}

type specItem struct {
	node  uint32
	until int64
}

// New returns an empty Index configured by cfg. It fails when cfg is
// invalid or its metrics cannot be registered.
func New(cfg Config, o component.Options) (*Index, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kvindex: %w", err)
	}
	ix := &Index{
		nnodes:     1,
		byName:     make(map[slotName]uint16),
		budget:     cmp.Or(cfg.EntryBudget, DefaultEntryBudget),
		staleAfter: cfg.StaleAfter,
		specTTL:    cmp.Or(cfg.SpeculativeTTL, DefaultSpeculativeTTL),
		log:        o.Log(),
		now:        o.Now(),
	}
	m, err := newMetrics(o)
	if err != nil {
		return nil, err
	}
	ix.m = m
	return ix, nil
}

// Source names the stream a batch came from.
type Source struct {
	// Worker is the worker's name; Rank its data-parallel rank.
	Worker string
	Rank   int
	// Model is warmpath's model name for the worker: with the event's LoRA
	// name and cache salt it roots the chains the worker stores.
	Model string
}

// MaxStreams bounds the (worker, rank) streams an Index tracks; events of
// further streams are dropped and counted (reason "too_many_streams").
const MaxStreams = 1 << 14

// slotLocked returns the slot for src, creating it, or nil when MaxStreams
// are taken. ix.mu must be held.
func (ix *Index) slotLocked(src Source) *slot {
	name := slotName{src.Worker, src.Rank}
	if id, ok := ix.byName[name]; ok {
		s := ix.slots[id]
		if s.model != src.Model {
			// A new model roots different chains: the old keys are wrong.
			ix.clearSlotLocked(s)
			ix.finishRetiringLocked(s) // rare: at once
			s.model, s.status.Model = src.Model, src.Model
		}
		return s
	}
	id := -1
	for i, s := range ix.slots {
		if s == nil {
			id = i
			break
		}
	}
	if id < 0 {
		if len(ix.slots) >= MaxStreams {
			return nil
		}
		id = len(ix.slots)
		ix.slots = append(ix.slots, nil)
		ix.names = append(ix.names, slotName{})
	}
	now := ix.now()
	s := &slot{
		id:     uint16(id),
		name:   name,
		model:  src.Model,
		specAt: make(map[uint32]int64),
		since:  now,
		status: StreamStatus{Worker: src.Worker, Rank: src.Rank, Model: src.Model},
	}
	ix.slots[id] = s
	ix.names[id] = name
	ix.byName[name] = s.id
	if src.Rank > 0 {
		ix.ranked++
	}
	ix.maxSlots = max(ix.maxSlots, id+1)
	return s
}

// Apply applies events, one batch of src's stream, in order and in one
// critical section, and counts them. Events that cannot be applied
// exactly (a store whose parent block is unknown, a removal of an unknown
// block, a malformed event) are skipped and counted. Apply keeps none of
// events' slices. A stream unknown so far is added; when MaxStreams are
// taken, its events are dropped and counted.
//
// A batch that ends by clearing the stream's blocks (AllBlocksCleared)
// returns once they are all dropped, but drops them a piece at a time,
// letting lookups and other streams in between (see retire).
func (ix *Index) Apply(src Source, events []Event) {
	if s := ix.applyBatch(src, events); s != nil {
		ix.retire(s)
	}
}

// applyBatch is Apply's critical section; it returns the slot when a
// clear left entries to retire.
func (ix *Index) applyBatch(src Source, events []Event) *slot {
	ix.lock()
	defer ix.mu.Unlock()
	s := ix.slotLocked(src)
	if s == nil {
		ix.m.skipped.WithLabelValues("too_many_streams").Add(float64(len(events)))
		return nil
	}
	now := ix.now()
	s.lastAt = now
	s.status.Batches++
	ix.sweepLocked(now.UnixNano())
	for i := range events {
		ix.applyLocked(s, &events[i])
	}
	ix.evictLocked()
	ix.gaugesLocked()
	if s.retiring.len() == 0 {
		return nil
	}
	return s
}

func (ix *Index) applyLocked(s *slot, ev *Event) {
	if ev.Kind != AllBlocksCleared {
		// A block stored or removed after a clear in the same batch must
		// not meet the cleared entries on its node.
		ix.finishRetiringLocked(s)
	}
	switch ev.Kind {
	case AllBlocksCleared:
		ix.m.events[ev.Kind].Inc()
		ix.clearSlotLocked(s)
	case BlockRemoved:
		ix.m.events[ev.Kind].Inc()
		for _, h := range ev.BlockHashes {
			if !ix.removeLocked(s, h, !ev.Offloaded) {
				ix.m.skipUnknownHash.Inc()
			}
		}
	case BlockStored:
		ix.m.events[ev.Kind].Inc()
		n := len(ev.BlockHashes)
		if ev.BlockSize < 1 || len(ev.TokenIDs) != n*ev.BlockSize || (ev.Extra != nil && len(ev.Extra) != n) {
			ix.m.skipInvalid.Inc()
			return
		}
		s.status.BlockSize = ev.BlockSize
		var key uint64
		if ev.HasParent {
			ni := ix.blockOf(s, ev.ParentHash)
			if ni == 0 {
				// Missed events: the chain cannot be placed. Never guess.
				ix.m.skipUnreachable.Inc()
				s.status.Unreachable++
				return
			}
			key = ix.node(ni).key
		} else {
			key = ChainKey{Model: s.model, LoRA: ev.LoRA, Salt: ev.Salt}.root()
		}
		// Chain all keys first, then insert tail first so the chain's root
		// ends up most recently used and tails are evicted before roots.
		var stack [64]uint64
		keys := stack[:]
		if n > len(stack) {
			keys = make([]uint64, n)
		}
		keys = keys[:n]
		if ev.Extra == nil {
			chainKeys(key, ev.TokenIDs, ev.BlockSize, keys)
		} else {
			for i := range n {
				key = blockKey(key, ev.TokenIDs[i*ev.BlockSize:(i+1)*ev.BlockSize])
				if d := ev.Extra[i]; d != 0 {
					key = chainKey(key, d)
				}
				keys[i] = key
			}
		}
		for hi := n; hi > 0; hi -= warmChunk {
			lo := max(0, hi-warmChunk)
			ix.warmed ^= ix.keys.warm(keys[lo:hi]) ^ s.blocks.warm(ev.BlockHashes[lo:hi])
			for i := hi - 1; i >= lo; i-- {
				ix.storeLocked(s, ev.BlockHashes[i], keys[i], !ev.Offloaded)
			}
		}
	default:
		ix.m.skipInvalid.Inc()
	}
}

// nodeOf returns the node of a block key, or 0. It is table.get with the
// key comparison written in, since lookups call it for every block.
func (ix *Index) nodeOf(key uint64) uint32 {
	t := &ix.keys
	if t.n == 0 {
		return 0
	}
	fp := fingerprint(key)
	slots := t.slotsOf(fp)
	for i := home(slots, fp); ; {
		s := slots[i]
		ni := uint32(s)
		if ni == 0 {
			return 0
		}
		if uint32(s>>32) == fp && ix.node(ni).key == key {
			return ni
		}
		if i++; i == len(slots) {
			i = 0
		}
	}
}

// blockOf returns the node s holds under an engine hash, or 0.
func (ix *Index) blockOf(s *slot, hash uint64) uint32 {
	return s.blocks.get(hash, func(ni uint32) bool {
		e, ok := ix.entryOf(ix.node(ni), s.id)
		return ok && e.hash == hash
	})
}

func (ix *Index) nodeFor(key uint64) uint32 {
	if ni := ix.nodeOf(key); ni != 0 {
		return ni
	}
	ni := ix.newNode()
	ix.node(ni).key = key
	ix.keys.insert(key, ni)
	return ni
}

func (ix *Index) storeLocked(s *slot, hash, key uint64, gpu bool) {
	if ni := ix.blockOf(s, hash); ni != 0 && ix.node(ni).key != key {
		// The engine reused a hash for different content (a fold
		// collision or a reset we missed): forget the old block.
		ix.dropEntryLocked(s, ni, hash)
	}
	ni := ix.nodeFor(key)
	n := ix.node(ni)
	e, ok := ix.entryOf(n, s.id)
	if !ok {
		e = entry{hash: hash, slot: s.id}
		s.blocks.insert(hash, ni)
		s.status.Blocks++
		ix.entries++
	}
	if gpu {
		e.gpu++
	} else {
		e.off++
	}
	if ix.has(n, bSpec, s.id) {
		// The real event replaces the speculation, before the entry goes
		// in: a node that was only this speculation becomes an inline one
		// without passing through the shared form.
		ix.unspecLocked(s, ni)
	}
	ix.putEntry(ni, e)
	ix.toFront(ni)
}

// removeLocked drops one reference of hash in one medium. It reports
// whether the hash was known.
func (ix *Index) removeLocked(s *slot, hash uint64, gpu bool) bool {
	ni := ix.blockOf(s, hash)
	if ni == 0 {
		return false
	}
	n := ix.node(ni)
	e, ok := ix.entryOf(n, s.id)
	if !ok {
		return false
	}
	switch {
	case gpu && e.gpu > 0:
		e.gpu--
	case !gpu && e.off > 0:
		e.off--
	default:
		return false
	}
	if e.gpu == 0 && e.off == 0 {
		ix.dropEntryLocked(s, ni, hash)
	} else {
		ix.putEntry(ni, e)
	}
	return true
}

// dropEntryLocked removes s's entry from node ni, whatever its counts.
func (ix *Index) dropEntryLocked(s *slot, ni uint32, hash uint64) {
	if ix.delEntry(ix.node(ni), s.id) {
		ix.entries--
		s.status.Blocks--
	}
	s.blocks.del(hash, func(v uint32) bool { return v == ni })
	ix.maybeFree(ni)
}

// maybeFree frees node ni if nothing holds it.
func (ix *Index) maybeFree(ni uint32) {
	n := ix.node(ni)
	if n.b != 0 {
		return
	}
	ix.unlink(ni)
	ix.keys.del(n.key, func(v uint32) bool { return v == ni })
	*n = node{}
	ix.free = append(ix.free, ni)
}

// clearSlotLocked empties s: its speculative entries are dropped, its
// blocks table handed to s.retiring, whose entries stay on their nodes
// until retired (retireSomeLocked, finishRetiringLocked or retire). An
// engine's blocks number in the hundreds of thousands, and dropping them
// all at once held the write lock 47 ms at 256K blocks, stalling every
// decision. Until they are retired, lookups still find s holding them: a
// stale answer of a few milliseconds, as any event not yet applied gives.
func (ix *Index) clearSlotLocked(s *slot) {
	ix.finishRetiringLocked(s)
	if s.blocks.len() > 0 {
		s.retiring, s.retired = s.blocks, 0
	}
	s.blocks = table{}
	// Every speculation not yet swept has an item in the queue; an item
	// whose speculation is gone may name a node freed since, which must
	// not be freed twice.
	for _, it := range s.specQ[s.specHead:] {
		if ix.has(ix.node(it.node), bSpec, s.id) {
			ix.dropSpecLocked(s, it.node)
		}
	}
	s.specQ, s.specHead = s.specQ[:0], 0
}

// retireBatch is the slots of a cleared blocks table walked per hold of
// the write lock: under a thousand entries, about a quarter of a
// millisecond at 256K blocks on the development VM.
const retireBatch = 1024

// retireSomeLocked drops the entries of up to max slots of s.retiring and
// reports whether none is left. An entry is s's on its node when s
// retires it: s stores nothing meanwhile (applyLocked retires everything
// first), and a node freed and reused since holds no entry of s.
func (ix *Index) retireSomeLocked(s *slot, max int) bool {
	end := min(s.retired+max, s.retiring.span())
	for ; s.retired < end; s.retired++ {
		ni := s.retiring.at(s.retired)
		if ni == 0 {
			continue
		}
		if e, ok := ix.entryOf(ix.node(ni), s.id); ok {
			ix.dropEntryLocked(s, ni, e.hash)
		}
	}
	if s.retired < s.retiring.span() {
		return false
	}
	s.retiring, s.retired = table{}, 0
	return true
}

// finishRetiringLocked drops every entry s.retiring still holds.
func (ix *Index) finishRetiringLocked(s *slot) {
	if s.retiring.len() > 0 {
		ix.retireSomeLocked(s, s.retiring.span())
	}
}

// retire drops s's retiring entries a batch per hold of the write lock.
// It stops early when s left the index meanwhile (RemoveWorker retires
// them all before it frees the slot).
func (ix *Index) retire(s *slot) {
	for done := false; !done; {
		if ix.retireHook != nil {
			ix.retireHook()
		}
		ix.lock()
		if int(s.id) >= len(ix.slots) || ix.slots[s.id] != s {
			ix.mu.Unlock()
			return
		}
		done = ix.retireSomeLocked(s, retireBatch)
		ix.gaugesLocked()
		ix.mu.Unlock()
	}
}

func (ix *Index) dropSpecLocked(s *slot, ni uint32) {
	if ix.has(ix.node(ni), bSpec, s.id) {
		ix.unspecLocked(s, ni)
	}
	ix.maybeFree(ni)
}

// unspecLocked drops s's speculation on node ni, which has one.
func (ix *Index) unspecLocked(s *slot, ni uint32) {
	ix.clearSpec(ni, s.id)
	s.nspec--
	ix.entries--
	ix.specs--
}

// LRU list: head is most recent. Node 0 is the nil link.

func (ix *Index) unlink(ni uint32) {
	n := ix.node(ni)
	if n.prev != 0 {
		ix.node(n.prev).next = n.next
	} else if ix.head == ni {
		ix.head = n.next
	}
	if n.next != 0 {
		ix.node(n.next).prev = n.prev
	} else if ix.tail == ni {
		ix.tail = n.prev
	}
	n.prev, n.next = 0, 0
}

func (ix *Index) toFront(ni uint32) {
	if ix.head == ni {
		return
	}
	ix.unlink(ni)
	n := ix.node(ni)
	n.next = ix.head
	if ix.head != 0 {
		ix.node(ix.head).prev = ni
	}
	ix.head = ni
	if ix.tail == 0 {
		ix.tail = ni
	}
}

// maxTouchLog bounds the lookup touch log; touches past it are dropped
// (they only affect which blocks the budget evicts first).
const maxTouchLog = 1 << 18

// logTouches records the nodes of a chain a lookup hit, root first, as
// runs: pairs (node, n) for the n nodes node, node−1, …, node−n+1, which
// hold consecutive blocks (a chain stored in one event takes consecutive
// nodes, tail first). A pair (0, 0) ends the chain in the log. Called
// under the read lock, so every logged index is valid until a writer
// frees a node; every writer takes the lock through lock, which drains
// the log first, or the drain would link a free node back into the LRU
// list.
func (ix *Index) logTouches(runs []uint32) {
	if len(runs) == 0 {
		return
	}
	ix.touchMu.Lock()
	if len(ix.touchLog)+len(runs)+2 <= maxTouchLog {
		ix.touchLog = append(ix.touchLog, runs...)
		ix.touchLog = append(ix.touchLog, 0, 0)
	}
	ix.touchMu.Unlock()
}

// lock takes the write lock, as every writer does, and replays the
// lookups' touches (drainTouchesLocked) before the writer can free a node.
func (ix *Index) lock() {
	ix.mu.Lock()
	ix.drainTouchesLocked()
}

// drainTouchesLocked moves the chains lookups hit to the LRU head in the
// order they were hit, each tail first so that its root ends up most recent.
func (ix *Index) drainTouchesLocked() {
	// The write lock excludes every lookup, so touchMu is not needed.
	log := ix.touchLog
	ix.touchLog = log[:0]
	start := 0
	for i := 0; i+1 < len(log); i += 2 {
		if log[i] != 0 {
			continue
		}
		for j := i - 2; j >= start; j -= 2 {
			top, n := log[j], log[j+1]
			for ni := top - n + 1; ni <= top; ni++ {
				ix.toFront(ni)
			}
		}
		start = i + 2
	}
}

// evictLocked drops least recently touched nodes until the entry budget
// holds. The budget is shared fairly between streams: while the index is
// over it, a block held by one stream alone that holds no more than its fair
// share (the budget over the streams holding entries) is passed over, moved
// to the front instead, so that a stream flooding the index evicts its own
// blocks rather than every other stream's. Some stream is always over its
// share when the index is over budget, so passing over ends.
func (ix *Index) evictLocked() {
	if ix.entries <= ix.budget {
		return
	}
	streams := 0
	for _, s := range ix.slots {
		if s != nil && s.entries() > 0 {
			streams++
		}
	}
	share := ix.budget / max(streams, 1)
	for passes := ix.entries; ix.entries > ix.budget && ix.tail != 0; {
		ni := ix.tail
		n := ix.node(ni)
		if passes > 0 && n.b&modeInline != 0 {
			if s := ix.slots[uint16(n.b)]; s != nil && s.entries() <= share {
				passes--
				ix.toFront(ni)
				continue
			}
		}
		ix.m.evictions.Inc()
		for {
			e, ok := ix.anyEntry(n)
			if !ok {
				break
			}
			if s := ix.slots[e.slot]; s != nil {
				ix.dropEntryLocked(s, ni, e.hash)
			} else {
				ix.delEntry(n, e.slot) // cannot happen; keeps the loop finite
				ix.entries--
			}
		}
		for _, s := range ix.slots {
			if s != nil && ix.has(n, bSpec, s.id) {
				ix.dropSpecLocked(s, ni)
			}
		}
		if ix.tail == ni {
			// Whatever state is left, the node must leave the list.
			ix.release(n)
			ix.maybeFree(ni)
		}
	}
}

// entries counts the slot's entries, real and speculative.
func (s *slot) entries() int { return s.status.Blocks + s.nspec }

// Speculate enters the full blocks of tokens under key on worker (rank 0)
// for the speculative TTL, because the engine serves a request's in-flight
// blocks as hits before their events arrive: the blocks past the last one
// the worker really holds. Real events for the same blocks replace the
// speculation. Unknown workers are ignored.
func (ix *Index) Speculate(worker string, key ChainKey, tokens []uint32, blockSize int) {
	ix.AppendSpeculate(nil, worker, key, tokens, blockSize)
}

// AppendSpeculate is Speculate, and appends to dst the keys of the blocks it
// entered, root first: what a peer replica enters with SpeculateKeys. dst
// is returned unchanged when nothing was entered.
func (ix *Index) AppendSpeculate(dst []uint64, worker string, key ChainKey, tokens []uint32, blockSize int) []uint64 {
	if blockSize < 1 || len(tokens) < blockSize {
		return dst
	}
	if key.Model == "" {
		ix.mu.RLock()
		id, ok := ix.byName[slotName{worker, 0}]
		if ok {
			key.Model = ix.slots[id].model
		}
		ix.mu.RUnlock()
		if !ok {
			return dst
		}
	}
	keys := BlockKeys(key, tokens, blockSize) // hashed before any lock is taken
	from := ix.speculate(worker, keys)
	return append(dst, keys[from:]...)
}

// SpeculateKeys enters, on worker (rank 0), the block keys a peer's
// AppendSpeculate returned for a request it routed there, as Speculate
// does for this replica's own. Unknown workers are ignored.
func (ix *Index) SpeculateKeys(worker string, keys []uint64) {
	if len(keys) > 0 {
		ix.speculate(worker, keys)
	}
}

// warmChunk is how many blocks' table slots a long chain's store warms
// (table.warm) before it stores them: enough reads to keep many in flight,
// few enough that two tables' slots stay cached until the stores use them.
const warmChunk = 256

// specChunk is how many blocks a speculation enters under one hold of the
// write lock: a 100K-token prompt's 6,250 blocks go in a dozen holds, so
// lookups and events wait for one chunk, not the whole prompt.
const specChunk = 512

// speculate enters keys, a chain root first, as speculative on worker's
// rank 0, a chunk at a time from the tail (see speculateLocked), and
// returns the index of the first key it entered (len(keys) when none). A
// lookup between two chunks sees the chain's tail without its root, which
// it cannot reach: it counts the speculation once it is whole.
func (ix *Index) speculate(worker string, keys []uint64) int {
	from := len(keys)
	for hi := len(keys); hi > 0; {
		lo := max(0, hi-specChunk)
		ix.lock()
		id, ok := ix.byName[slotName{worker, 0}]
		if !ok {
			ix.mu.Unlock()
			return from
		}
		f := ix.speculateLocked(ix.slots[id], keys[lo:hi])
		ix.mu.Unlock()
		if f == hi-lo {
			return from // nothing entered: the walk stopped at the chunk's tail
		}
		from = lo + f
		if f > 0 {
			return from // the walk stopped inside the chunk
		}
		hi = lo
	}
	return from
}

// speculateLocked enters keys, a chain root first, as speculative on s and
// returns the index of the first key it entered (len(keys) when none).
// The write lock must be held, taken through lock.
func (ix *Index) speculateLocked(s *slot, keys []uint64) int {
	now := ix.now().UnixNano()
	ix.sweepLocked(now)
	until := now + int64(ix.specTTL)
	// Walk from the tail to the first block the worker really holds: the
	// ones below it are its cached prefix (engines store a chain root
	// first and evict it tail first), which the lookup has just touched.
	// A block speculated on less than half a TTL ago stops the walk too:
	// that speculation covered the blocks below it, and a burst of
	// siblings costs one probe each.
	//
	// Warm the keys' slots (table.warm) in windows that double: a new
	// prompt's walk goes through every block, a warm one's stops after
	// the few its last turn added.
	from, warmFrom, win := len(keys), len(keys), 16
	for i := len(keys) - 1; i >= 0; i-- {
		if i < warmFrom {
			lo := max(0, warmFrom-win)
			ix.warmed ^= ix.keys.warm(keys[lo:warmFrom])
			warmFrom, win = lo, min(2*win, specChunk)
		}
		ni := ix.nodeFor(keys[i])
		n := ix.node(ni)
		if at, ok := ix.specExpiry(s, ni); ok && at-now >= int64(ix.specTTL)/2 {
			break
		}
		if !ix.has(n, bSpec, s.id) {
			if _, ok := ix.entryOf(n, s.id); ok {
				ix.toFront(ni)
				break
			}
			ix.entries++
			ix.specs++
			s.nspec++
		}
		ix.setSpec(ni, s.id, until)
		s.specQ = append(s.specQ, specItem{node: ni, until: until})
		ix.toFront(ni)
		from = i
	}
	ix.evictLocked()
	ix.gaugesLocked()
	return from
}

// sweepLocked drops expired speculative entries.
func (ix *Index) sweepLocked(now int64) {
	if ix.specs == 0 {
		for _, s := range ix.slots {
			if s != nil {
				s.specQ, s.specHead = s.specQ[:0], 0
			}
		}
		return
	}
	for _, s := range ix.slots {
		if s == nil {
			continue
		}
		i := s.specHead
		for ; i < len(s.specQ) && s.specQ[i].until <= now; i++ {
			it := s.specQ[i]
			if at, ok := ix.specExpiry(s, it.node); ok && at == it.until {
				ix.dropSpecLocked(s, it.node)
			}
		}
		// Move the live part down only once the swept part is as long, so
		// a sweep costs what it drops, not what is queued.
		switch s.specHead = i; {
		case i == len(s.specQ):
			s.specQ, s.specHead = s.specQ[:0], 0
		case i >= 1024 && 2*i >= len(s.specQ):
			n := copy(s.specQ, s.specQ[i:])
			s.specQ, s.specHead = s.specQ[:n], 0
		}
	}
}

// Match is one worker's cached prefix for a lookup.
type Match struct {
	// Worker is the worker's name; Rank the data-parallel rank that holds
	// the longest prefix.
	Worker string
	Rank   int
	// GPUTokens counts leading prompt tokens cached in GPU memory.
	GPUTokens int
	// OffloadedTokens counts the tokens after GPUTokens that continue the
	// prefix in another medium (CPU, storage): hits that must be loaded.
	OffloadedTokens int
}

// CachedTokens returns the whole cached prefix, all media together.
func (m Match) CachedTokens() int { return m.GPUTokens + m.OffloadedTokens }

// Lookup returns, per worker with a hit, the number of leading tokens of
// the prompt its cache holds, in whole blocks of blockSize tokens, capped
// at floor((len(tokens)−1)/blockSize)·blockSize as vLLM caps it (the last
// prompt token is always recomputed). Workers with no hit are absent.
// When several ranks of a worker hit, the one with the longest prefix
// wins. Lookup stops at the first block no worker holds.
func (ix *Index) Lookup(key ChainKey, tokens []uint32, blockSize int) []Match {
	return ix.AppendLookup(nil, key, tokens, blockSize)
}

// AppendLookup is Lookup appending its matches to dst, so that a caller
// that reuses dst makes a lookup allocate nothing.
func (ix *Index) AppendLookup(dst []Match, key ChainKey, tokens []uint32, blockSize int) []Match {
	if blockSize < 1 || len(tokens) <= blockSize {
		return dst
	}
	start := time.Now()
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	// Per slot: blocks held in any medium, and on GPU, as the walk drops it.
	var depthStack [2 * 128]int32
	depth := depthStack[:]
	if 2*ix.maxSlots > len(depth) {
		depth = make([]int32, 2*ix.maxSlots)
	}
	depthAny, depthGPU := depth[:ix.maxSlots], depth[ix.maxSlots:2*ix.maxSlots]
	var runStack [512]uint32
	w := chainWalk{ix: ix, tokens: tokens, blockSize: blockSize, blocks: (len(tokens) - 1) / blockSize,
		h: key.root(), chunk: 16, depthAny: depthAny, depthGPU: depthGPU}
	_, runs := w.walk(runStack[:0])
	ix.logTouches(runs)
	if dst == nil {
		dst = make([]Match, 0, min(ix.maxSlots, 64))
	}
	var out []Match
	if ix.ranked == 0 {
		out = appendMatches(dst, depthAny, depthGPU, ix.names, blockSize)
	} else {
		out = appendRankedMatches(dst, depthAny, depthGPU, ix.names, blockSize)
	}
	ix.m.lookup.Observe(time.Since(start).Seconds())
	return out
}

// appendMatches appends a Match per slot with a hit: depthAny and
// depthGPU are the slots' blocks held in any medium and on GPU, names
// their names (empty for a free slot).
func appendMatches(out []Match, depthAny, depthGPU []int32, names []slotName, blockSize int) []Match {
	names = names[:len(depthAny)]
	depthGPU = depthGPU[:len(depthAny)]
	for id, d := range depthAny {
		if d == 0 || names[id].worker == "" {
			continue
		}
		// Field by field: a Match built on the stack and then copied
		// costs a failed store-to-load forwarding per word.
		out = append(out, Match{})
		m := &out[len(out)-1]
		m.Worker, m.Rank = names[id].worker, names[id].rank
		m.GPUTokens = int(depthGPU[id]) * blockSize
		m.OffloadedTokens = int(d)*blockSize - m.GPUTokens
	}
	return out
}

// appendRankedMatches is appendMatches where workers have data-parallel
// ranks: one Match per worker, its rank with the longest prefix.
func appendRankedMatches(out []Match, depthAny, depthGPU []int32, names []slotName, blockSize int) []Match {
	first := len(out)
	out = appendMatches(out, depthAny, depthGPU, names, blockSize)
	byWorker := make(map[string]int, len(out)-first)
	kept := out[:first]
	for _, m := range out[first:] {
		if j, ok := byWorker[m.Worker]; ok {
			if m.CachedTokens() > kept[j].CachedTokens() {
				kept[j] = m
			}
			continue
		}
		byWorker[m.Worker] = len(kept)
		kept = append(kept, m)
	}
	return kept
}

// chainWalk is the state of one lookup's walk down a prompt's chain of
// blocks. It hashes a chunk of blocks at a time, which lets the CPU
// overlap their hashes, the chunks doubling from 16 blocks so that an
// early miss wastes little (walkChunks).
type chainWalk struct {
	ix        *Index
	tokens    []uint32
	blockSize int
	blocks    int    // blocks up to the cap
	h         uint64 // key of the last block hashed
	hashed    int    // blocks hashed so far
	chunk     int
	now       int64 // unix nanos, for speculative entries; 0 until needed

	// Per slot, blocks held in any medium and on GPU, set as the walk
	// drops the slot.
	depthAny, depthGPU []int32
	// The slots 0–63 still holding every block so far, in any medium and
	// on GPU; hiAny and hiGPU hold further words for slots ≥ 64.
	anyW, gpuW   uint64
	hiAny, hiGPU []uint64

	keys [64]uint64
}

// hash returns the keys of the next chunk of blocks, none past the cap.
func (w *chainWalk) hash() []uint64 {
	c := min(w.chunk, w.blocks-w.hashed, len(w.keys))
	w.chunk = min(2*w.chunk, len(w.keys)) // doubling without a cap overflows on long chains
	keys := w.keys[:c]
	w.h = chainKeys(w.h, w.tokens[w.hashed*w.blockSize:], w.blockSize, keys)
	w.hashed += c
	return keys
}

// walk walks the chain, recording per slot the blocks it holds in any
// medium and on GPU. It returns the number of leading blocks some slot
// holds, and their nodes appended to runs as logTouches takes them: runs
// (node, n) of consecutive nodes going down. (runs is not kept in w, so
// that a caller's stack array can back it.)
func (w *chainWalk) walk(runs []uint32) (int, []uint32) {
	n := len(w.depthAny)
	w.anyW = ^uint64(0) >> (64 - min(n, 64)) // all slots to begin with
	w.gpuW = w.anyW
	if words := (n + 63) / 64; words > 1 {
		hi := make([]uint64, 2*(words-1))
		for k := range hi {
			hi[k] = ^uint64(0)
		}
		w.hiAny, w.hiGPU = hi[:words-1], hi[words-1:]
		w.hiAny[words-2] = ^uint64(0) >> (64*words - n)
		w.hiGPU[words-2] = w.hiAny[words-2]
	}
	i, runs := w.walkChunks(runs)
	// The slots still holding every block: depth i. For slots 0–63 over
	// the whole word without a branch, which is cheaper than a step per
	// set bit when most of them are set.
	low := min(len(w.depthAny), 64)
	fillDepth(w.depthAny[:low], w.anyW, int32(i))
	fillDepth(w.depthGPU[:low], w.gpuW, int32(i))
	for k := range w.hiAny {
		setDepth(w.depthAny, k+1, w.hiAny[k], i)
		setDepth(w.depthGPU, k+1, w.hiGPU[k], i)
	}
	return i, runs
}

// walkChunks is walk's loop, for any block size and any number of
// slots: it hashes a chunk of blocks at a time (see hash) and walks their
// nodes.
func (w *chainWalk) walkChunks(runs []uint32) (int, []uint32) {
	pages := w.ix.pages
	fast := w.hiAny == nil
	i := 0
	var prev uint32 // the node of the previous block
	for keys := w.hash(); len(keys) > 0; keys = w.hash() {
		for j := 0; j < len(keys); {
			// The common case first: a chain stored in one event takes
			// consecutive nodes, tail first, so a block's node is usually
			// the one just below the previous block's; and most blocks
			// are shared, held on GPU only, and drop no slot.
			if ni := prev - 1; fast && prev > 1 {
				off := ni & (pageSize - 1)
				if m := descend(pages[ni>>pageShift][:off+1], keys[j:], w.anyW); m > 0 {
					runs[len(runs)-1] += uint32(m)
					j += m
					prev -= uint32(m)
					if m == int(off)+1 || j == len(keys) {
						continue // on to the page below, or the next chunk
					}
				}
			}
			ni := w.find(pages, prev, keys[j], i+j)
			if ni == 0 {
				return i + j, runs
			}
			runs = visit(runs, prev, ni)
			prev = ni
			j++
		}
		i += len(keys)
	}
	return i, runs
}

// find returns the node of block i, of key k, after node prev (0 for the
// first block), dropping the slots that do not hold it, or 0 when the walk
// ends there. It is walkChunks' case past the node below prev.
func (w *chainWalk) find(pages [][]node, prev uint32, k uint64, i int) uint32 {
	if w.hiAny == nil && prev != 0 {
		// The next most common case: the block's node starts another
		// run, and is the previous node's successor in the LRU list
		// (lookups and stores move a chain to the front root last).
		// With the pages at hand: through step the probe is a chain of
		// six dependent loads.
		nx := pages[prev>>pageShift][prev&(pageSize-1)].next
		if n := &pages[nx>>pageShift][nx&(pageSize-1)]; n.key == k && n.b>>61 == modeShared>>61 {
			if drop := w.anyW &^ n.a; drop != 0 {
				setDepth(w.depthAny, 0, drop, i)
				w.anyW &= n.a
			}
			if drop := w.gpuW &^ n.a; drop != 0 {
				setDepth(w.depthGPU, 0, drop, i)
				w.gpuW &= n.a
			}
			if w.anyW == 0 {
				return 0
			}
			return nx
		}
	}
	return w.step(prev, k, i)
}

// fillDepth sets depth[id] to d for each id whose bit is set in set; those
// entries must be 0.
func fillDepth(depth []int32, set uint64, d int32) {
	for id := range depth {
		depth[id] |= -int32(set>>uint(id)&1) & d
	}
}

// visit adds node ni, the node of the block after node prev's, to runs:
// to prev's run when ni lies just below it, else as a run of its own.
func visit(runs []uint32, prev, ni uint32) []uint32 {
	if ni == prev-1 && len(runs) > 0 {
		runs[len(runs)-1]++
		return runs
	}
	return append(runs, ni, 1)
}

// descend returns how many of keys the nodes at the end of page hold in
// walk's common case, the first key against the last node and on down:
// each node holds its key, is shared, and is held by every slot in all.
func descend(page []node, keys []uint64, all uint64) int {
	n := min(len(page), len(keys))
	page = page[len(page)-n:]
	for j := range n {
		nd := &page[n-1-j]
		if (nd.key^keys[j])|(nd.b>>61^modeShared>>61)|(all&^nd.a) != 0 {
			return j
		}
	}
	return n
}

// step is walk's general case for block i, of key k, after node prev (0
// for the first block). It finds the block's node, drops the slots that
// do not hold it, and returns the node, or 0 when the walk ends there.
func (w *chainWalk) step(prev uint32, k uint64, i int) uint32 {
	ix := w.ix
	// Besides the node below prev, try the one after it in the LRU list:
	// stores and lookups move chains to the front root last, so it is
	// often the chain's next block. Then the table.
	ni := prev - 1
	n := ix.holding(ni, k)
	if n == nil && prev != 0 {
		ni = ix.node(prev).next
		n = ix.holding(ni, k)
	}
	if n == nil {
		if ni = ix.nodeOf(k); ni == 0 {
			return 0
		}
		n = ix.node(ni)
	}
	g, a := n.a, n.a
	if n.b>>61 != modeShared>>61 {
		g, a = ix.holders(n, 0, w.nowNanos())
	}
	setDepth(w.depthAny, 0, w.anyW&^a, i)
	setDepth(w.depthGPU, 0, w.gpuW&^g, i)
	w.anyW &= a
	w.gpuW &= g
	live := w.anyW != 0
	for k := range w.hiAny {
		g, a := ix.holders(n, k+1, w.nowNanos())
		setDepth(w.depthAny, k+1, w.hiAny[k]&^a, i)
		setDepth(w.depthGPU, k+1, w.hiGPU[k]&^g, i)
		w.hiAny[k] &= a
		w.hiGPU[k] &= g
		live = live || w.hiAny[k] != 0
	}
	if !live {
		return 0
	}
	return ni
}

// nowNanos returns the walk's time, read from the clock the first time a
// node needs it (only speculative entries do).
func (w *chainWalk) nowNanos() int64 {
	if w.now == 0 {
		w.now = w.ix.now().UnixNano()
	}
	return w.now
}

// holding returns node ni if it is in use and holds key k, or nil; ni
// may be any value.
func (ix *Index) holding(ni uint32, k uint64) *node {
	if ni-1 < ix.nnodes-1 {
		if n := ix.node(ni); n.key == k && n.b != 0 {
			return n
		}
	}
	return nil
}

// setDepth records depth d for the slots of word k whose bits are set.
func setDepth(depth []int32, k int, set uint64, d int) {
	for ; set != 0; set &= set - 1 {
		depth[k*64+bits.TrailingZeros64(set)] = int32(d)
	}
}

func (ix *Index) gaugesLocked() {
	ix.m.entries.Set(float64(ix.entries))
	ix.m.nodes.Set(float64(ix.keys.len()))
}
