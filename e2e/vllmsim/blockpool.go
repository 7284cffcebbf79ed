package vllmsim

// block is one KV-cache block of the pool.
type block struct {
	id     int
	ref    int
	hash   BlockHash
	hashed bool
	// prev and next link the block into the free queue while ref == 0.
	prev, next *block
	inFree     bool
}

// blockPool models vLLM v1's BlockPool: a fixed set of blocks, a
// hash → blocks map of cached full blocks (duplicates allowed: two
// physical copies can hold the same hash), reference counts, and a
// doubly linked free queue in eviction order. Blocks are evicted lazily,
// when a free cached block is popped for reuse; that is when BlockRemoved
// is emitted. Block 0 is vLLM's null block and never used. A blockPool is
// owned by one engine and not safe for concurrent use.
type blockPool struct {
	blocks []block
	head   block // sentinel of the free queue: head.next is evicted first
	nfree  int
	cached map[BlockHash][]*block
	// events collects the KV events of the current step, in order.
	events []Event
}

func newBlockPool(numBlocks int) *blockPool {
	p := &blockPool{
		blocks: make([]block, numBlocks),
		cached: make(map[BlockHash][]*block),
	}
	p.head.next, p.head.prev = &p.head, &p.head
	for i := range p.blocks {
		p.blocks[i].id = i
		if i > 0 {
			p.pushBack(&p.blocks[i])
		}
	}
	return p
}

// usable is the number of blocks requests can hold (all but the null block).
func (p *blockPool) usable() int { return len(p.blocks) - 1 }

func (p *blockPool) unlink(b *block) {
	b.prev.next, b.next.prev = b.next, b.prev
	b.prev, b.next, b.inFree = nil, nil, false
	p.nfree--
}

func (p *blockPool) pushBack(b *block) {
	b.prev, b.next = p.head.prev, &p.head
	p.head.prev.next, p.head.prev = b, b
	b.inFree = true
	p.nfree++
}

func (p *blockPool) pushFront(b *block) {
	b.prev, b.next = &p.head, p.head.next
	p.head.next.prev, p.head.next = b, b
	b.inFree = true
	p.nfree++
}

// hit returns the cached blocks of the longest prefix of hashes, at most
// maxBlocks long: the lookup stops at the first hash not cached.
func (p *blockPool) hit(hashes []BlockHash, maxBlocks int) []*block {
	var out []*block
	for i := 0; i < len(hashes) && i < maxBlocks; i++ {
		bs := p.cached[hashes[i]]
		if len(bs) == 0 {
			break
		}
		out = append(out, bs[0])
	}
	return out
}

// hitLen returns the number of leading hashes that are cached.
func (p *blockPool) hitLen(hashes []BlockHash) int {
	n := 0
	for n < len(hashes) && len(p.cached[hashes[n]]) > 0 {
		n++
	}
	return n
}

// touch takes a reference on each block, removing free ones from the queue.
func (p *blockPool) touch(bs []*block) {
	for _, b := range bs {
		if b.ref == 0 && b.inFree {
			p.unlink(b)
		}
		b.ref++
	}
}

// evictable counts the blocks of bs that sit in the free queue; touching
// them consumes free blocks just as allocation does.
func evictable(bs []*block) int {
	n := 0
	for _, b := range bs {
		if b.ref == 0 {
			n++
		}
	}
	return n
}

// allocate pops n blocks from the front of the free queue, evicting the
// cached ones (emitting one BlockRemoved per evicted hash). The caller
// checks p.nfree >= n first.
func (p *blockPool) allocate(n int) []*block {
	out := make([]*block, 0, n)
	for range n {
		b := p.head.next
		p.unlink(b)
		if b.hashed {
			p.evict(b)
		}
		b.ref = 1
		out = append(out, b)
	}
	return out
}

func (p *blockPool) evict(b *block) {
	bs := p.cached[b.hash]
	for i, c := range bs {
		if c == b {
			bs = append(bs[:i], bs[i+1:]...)
			break
		}
	}
	if len(bs) == 0 {
		delete(p.cached, b.hash)
	} else {
		p.cached[b.hash] = bs
	}
	b.hashed = false
	p.events = append(p.events, Event{Kind: BlockRemoved, Hashes: []BlockHash{b.hash}})
}

// free releases one reference on each block, in reverse order so that a
// chain's tail is evicted before its head. Blocks reaching zero join the
// free queue: unhashed ones at the front (reused first), cached ones at the
// tail, as in recent vLLM releases.
func (p *blockPool) free(bs []*block) {
	for i := len(bs) - 1; i >= 0; i-- {
		b := bs[i]
		b.ref--
		if b.ref > 0 {
			continue
		}
		if b.hashed {
			p.pushBack(b)
		} else {
			p.pushFront(b)
		}
	}
}

// register marks blocks as cached under hashes, emitting one BlockStored
// for the run. parent is the hash of the block before the run, if any.
func (p *blockPool) register(bs []*block, hashes []BlockHash, parent *BlockHash, tokens []uint32, blockSize int, extra [][]string) {
	for i, b := range bs {
		b.hash, b.hashed = hashes[i], true
		p.cached[b.hash] = append(p.cached[b.hash], b)
	}
	ev := Event{Kind: BlockStored, Hashes: hashes, Tokens: tokens, BlockSize: blockSize, Extra: extra}
	if parent != nil {
		ev.Parent, ev.HasParent = *parent, true
	}
	p.events = append(p.events, ev)
}

// reset drops every cached hash, as vLLM's reset_prefix_cache does. It
// fails (returns false) while any block is held by a request.
func (p *blockPool) reset() bool {
	if p.nfree != p.usable() {
		return false
	}
	for i := range p.blocks {
		p.blocks[i].hashed = false
	}
	clear(p.cached)
	p.events = append(p.events, Event{Kind: AllBlocksCleared})
	return true
}

// takeEvents returns and clears the pending events.
func (p *blockPool) takeEvents() []Event {
	ev := p.events
	p.events = nil
	return ev
}
