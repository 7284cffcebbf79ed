package vllmsim

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// EngineConfig is the configuration of one engine core (one data-parallel
// rank). Field names follow `vllm serve` flags where vLLM has them.
type EngineConfig struct {
	// BlockSize is the number of tokens per KV-cache block (--block-size).
	BlockSize int
	// NumGPUBlocks is the size of the KV cache in blocks, including vLLM's
	// reserved null block (--num-gpu-blocks-override).
	NumGPUBlocks int
	// MaxNumBatchedTokens is the token budget of one step
	// (--max-num-batched-tokens).
	MaxNumBatchedTokens int
	// MaxNumSeqs caps the number of running requests (--max-num-seqs).
	MaxNumSeqs int
	// MaxModelLen caps prompt plus output length (--max-model-len).
	MaxModelLen int
	// Step is the step-time model.
	Step StepCost
	// HashSeed is the NONE_HASH seed (PYTHONHASHSEED), "vllm-none-hash" by
	// default in recent vLLM.
	HashSeed string
	// Seed drives generated token ids.
	Seed uint64
	// Rank is the data-parallel rank, published in every KV-event batch.
	Rank int
}

// StepCost is the step-time model: a step takes
// Overhead + PrefillPerToken·(prefill tokens) + DecodePerSeq·(decoding
// sequences) + ContextPerToken·(context tokens read).
type StepCost struct {
	Overhead        time.Duration
	PrefillPerToken time.Duration
	DecodePerSeq    time.Duration
	// ContextPerToken is a per-token cost too small for a Duration's
	// nanosecond unit, so it is in picoseconds.
	ContextPicosPerToken int64
}

// Duration returns the time of a step with the given work.
func (c StepCost) Duration(prefillTokens, decodeSeqs, contextTokens int) time.Duration {
	return c.Overhead + time.Duration(prefillTokens)*c.PrefillPerToken +
		time.Duration(decodeSeqs)*c.DecodePerSeq +
		time.Duration(int64(contextTokens)*c.ContextPicosPerToken/1000)
}

// Validate reports every invalid field.
func (c *EngineConfig) Validate() error {
	var errs []error
	if c.BlockSize <= 0 {
		errs = append(errs, fmt.Errorf("block size %d: must be positive", c.BlockSize))
	}
	if c.NumGPUBlocks < 2 {
		errs = append(errs, fmt.Errorf("num gpu blocks %d: must be at least 2", c.NumGPUBlocks))
	}
	if c.MaxNumBatchedTokens <= 0 {
		errs = append(errs, fmt.Errorf("max num batched tokens %d: must be positive", c.MaxNumBatchedTokens))
	}
	if c.MaxNumSeqs <= 0 {
		errs = append(errs, fmt.Errorf("max num seqs %d: must be positive", c.MaxNumSeqs))
	}
	if c.MaxModelLen <= 1 {
		errs = append(errs, fmt.Errorf("max model len %d: must be at least 2", c.MaxModelLen))
	}
	if c.Step.Overhead < 0 || c.Step.PrefillPerToken < 0 || c.Step.DecodePerSeq < 0 || c.Step.ContextPicosPerToken < 0 {
		errs = append(errs, errors.New("step-time coefficients must not be negative"))
	}
	return errors.Join(errs...)
}

// Request is one generation request inside an engine. The engine owns it
// from Add until its final Output; callers read only the fields they set
// and the Output values.
type Request struct {
	// ID names the request in logs.
	ID string
	// Prompt holds the prompt token ids; it must be non-empty.
	Prompt []uint32
	// MaxTokens is the number of tokens to generate, at least 1.
	MaxTokens int
	// CacheSalt isolates the prefix cache (vLLM's cache_salt), "" for none.
	CacheSalt string
	// Arrival is when the request reached the engine, on the engine clock.
	Arrival time.Duration

	tokens     []uint32 // prompt then generated tokens
	hashes     []BlockHash
	blocks     []*block
	registered int // leading blocks already in the cache map
	computed   int // num_computed_tokens
	generated  int
	cached     int // prefix-cache hit at first scheduling; -1 before
	running    bool
	done       bool
	scheduled  int // tokens scheduled in the current step
	firstAt    time.Duration
	startAt    time.Duration // first scheduled; -1 before
}

// Output reports what a step produced for one request: a generated token,
// and whether the request finished.
type Output struct {
	Req *Request
	// Token is the generated token id.
	Token uint32
	// Index is the position of Token among the generated tokens (0 = first).
	Index int
	// Finished is set on the request's last output.
	Finished bool
	// PromptTokens, CachedTokens and Generated are the usage figures so far.
	PromptTokens, CachedTokens, Generated int
	// Arrival, Scheduled and FirstToken are when the request arrived, was
	// first scheduled and got its first token, on the engine clock.
	Arrival, Scheduled, FirstToken time.Duration
}

// StepResult is the outcome of one engine step.
type StepResult struct {
	// Start and Duration place the step on the engine clock; its outputs
	// become visible at Start+Duration.
	Start, Duration time.Duration
	Outputs         []Output
	// Events are the KV-cache events of the step, in emission order.
	Events []Event
	// PrefillTokens, DecodeSeqs and ContextTokens are the step's work.
	PrefillTokens, DecodeSeqs, ContextTokens int
	// Preempted counts requests preempted in the step.
	Preempted int
	// Queries and Hits are prefix-cache lookups of newly scheduled requests, in tokens.
	Queries, Hits int
}

// Engine is a model of one vLLM v1 engine core: the scheduler, the
// KV-cache block pool and the step-time model. It is deterministic: the
// same sequence of Add, Abort and Step calls gives the same results. An
// Engine is not safe for concurrent use; one goroutine owns it.
type Engine struct {
	cfg         EngineConfig
	pool        *blockPool
	hasher      *hasher
	running     []*Request
	waiting     []*Request // FCFS; preempted requests go to the front
	preemptions int
}

// NewEngine returns an idle engine with an empty cache.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("engine config: %w", err)
	}
	if cfg.HashSeed == "" {
		cfg.HashSeed = DefaultHashSeed
	}
	return &Engine{cfg: cfg, pool: newBlockPool(cfg.NumGPUBlocks), hasher: newHasher(cfg.HashSeed)}, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() EngineConfig { return e.cfg }

// ErrPromptTooLong is returned by Add for a prompt that cannot fit the
// model length together with one output token.
var ErrPromptTooLong = errors.New("prompt too long")

// Add queues r at the tail of the waiting queue.
func (e *Engine) Add(r *Request) error {
	if len(r.Prompt) == 0 {
		return errors.New("empty prompt")
	}
	if len(r.Prompt) >= e.cfg.MaxModelLen {
		return fmt.Errorf("%w: %d tokens, max model len %d", ErrPromptTooLong, len(r.Prompt), e.cfg.MaxModelLen)
	}
	if e.blocksFor(len(r.Prompt)+1) > e.pool.usable() {
		return fmt.Errorf("%w: %d tokens exceed the KV cache of %d blocks", ErrPromptTooLong, len(r.Prompt), e.pool.usable())
	}
	// A request that could outgrow the whole cache would preempt itself
	// forever; vLLM refuses such a max_model_len at startup.
	r.MaxTokens = max(1, min(r.MaxTokens, e.cfg.MaxModelLen-len(r.Prompt), e.pool.usable()*e.cfg.BlockSize-len(r.Prompt)))
	r.tokens = append(make([]uint32, 0, len(r.Prompt)+r.MaxTokens), r.Prompt...)
	r.hashes = e.hasher.chain(nil, r.tokens, e.cfg.BlockSize, r.extraKeys)
	r.cached, r.startAt = -1, -1
	e.waiting = append(e.waiting, r)
	return nil
}

// extraKeys returns vLLM's extra hash keys of block i: the cache salt on block 0.
func (r *Request) extraKeys(i int) []string {
	if i == 0 && r.CacheSalt != "" {
		return []string{r.CacheSalt}
	}
	return nil
}

// Abort removes r, freeing its blocks. Aborting a finished or unknown
// request does nothing.
func (e *Engine) Abort(r *Request) {
	if r.done {
		return
	}
	e.waiting = removeRequest(e.waiting, r)
	e.running = removeRequest(e.running, r)
	e.pool.free(r.blocks)
	r.blocks, r.done, r.running = nil, true, false
}

// Idle reports whether the engine has no request to run.
func (e *Engine) Idle() bool { return len(e.running) == 0 && len(e.waiting) == 0 }

// Running and Waiting return the queue lengths.
func (e *Engine) Running() int { return len(e.running) }

// Waiting returns the number of queued requests, preempted ones included.
func (e *Engine) Waiting() int { return len(e.waiting) }

// Preemptions returns the number of preemptions so far.
func (e *Engine) Preemptions() int { return e.preemptions }

// KVUsage returns the fraction of usable blocks held by requests, as
// vllm:kv_cache_usage_perc (evictable cached blocks count as free).
func (e *Engine) KVUsage() float64 {
	return 1 - float64(e.pool.nfree)/float64(e.pool.usable())
}

// ResetPrefixCache drops every cached block, emitting AllBlocksCleared into
// the next step's events (or the one returned by TakeEvents). Like vLLM it
// fails while requests hold blocks.
func (e *Engine) ResetPrefixCache() bool { return e.pool.reset() }

// TakeEvents returns events emitted outside a step (a reset while idle).
func (e *Engine) TakeEvents() []Event { return e.pool.takeEvents() }

// CachedPrefix returns the prefix-cache hit, in tokens, that a request with
// this prompt and salt would get now (capped at floor((P−1)/B)·B). It does
// not change the cache or its LRU order.
func (e *Engine) CachedPrefix(prompt []uint32, salt string) int {
	r := Request{Prompt: prompt, CacheSalt: salt}
	hashes := e.hasher.chain(nil, prompt, e.cfg.BlockSize, r.extraKeys)
	limit := (len(prompt) - 1) / e.cfg.BlockSize
	return min(e.pool.hitLen(hashes), limit) * e.cfg.BlockSize
}

// CachedHashes returns the 64-bit wire hashes of every cached block.
func (e *Engine) CachedHashes() []uint64 {
	out := make([]uint64, 0, len(e.pool.cached))
	for h := range e.pool.cached {
		out = append(out, h.Uint64())
	}
	return out
}

// blocksFor returns how many blocks a request needs to hold n tokens.
func (e *Engine) blocksFor(n int) int { return (n + e.cfg.BlockSize - 1) / e.cfg.BlockSize }

// Step runs one scheduler step starting at now: it schedules running
// requests first (a decode token or their next prefill chunk), preempting
// the latest running request when blocks run out, then admits waiting
// requests in order while the budget, max_num_seqs and free blocks allow;
// it then advances every scheduled request as the forward pass would.
// Step on an idle engine returns a zero-duration result.
func (e *Engine) Step(now time.Duration) StepResult {
	res := StepResult{Start: now}
	if e.Idle() {
		res.Events = e.pool.takeEvents()
		return res
	}
	budget := e.cfg.MaxNumBatchedTokens
	var sched []*Request
	preempted := false
	for i := 0; i < len(e.running) && budget > 0; {
		r := e.running[i]
		n := min(len(r.tokens)-r.computed, budget)
		if n <= 0 {
			i++
			continue
		}
		ok := true
		for !e.grow(r, n) {
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			res.Preempted++
			preempted = true
			if victim == r {
				ok = false
				break
			}
		}
		if !ok {
			break
		}
		r.scheduled = n
		sched = append(sched, r)
		budget -= n
		i++
	}
	if !preempted {
		for len(e.waiting) > 0 && budget > 0 && len(e.running) < e.cfg.MaxNumSeqs {
			r := e.waiting[0]
			var hits []*block
			if r.computed == 0 && len(r.blocks) == 0 {
				hits = e.pool.hit(r.hashes, (len(r.tokens)-1)/e.cfg.BlockSize)
			}
			done := len(hits) * e.cfg.BlockSize
			n := min(len(r.tokens)-done, budget)
			need := e.blocksFor(done+n) - len(hits)
			if need+evictable(hits) > e.pool.nfree {
				break
			}
			e.pool.touch(hits)
			r.blocks = append(hits, e.pool.allocate(need)...)
			r.registered, r.computed = len(hits), done
			if r.cached < 0 {
				r.cached, r.startAt = done, now
			}
			res.Queries += len(r.tokens)
			res.Hits += done
			e.register(r, done+n)
			e.waiting = e.waiting[1:]
			e.running = append(e.running, r)
			r.running = true
			r.scheduled = n
			sched = append(sched, r)
			budget -= n
		}
	}
	for _, r := range sched {
		if r.generated > 0 && r.scheduled == 1 && r.computed == len(r.tokens)-1 {
			res.DecodeSeqs++
		} else {
			res.PrefillTokens += r.scheduled
		}
		res.ContextTokens += r.computed + r.scheduled
	}
	res.Duration = e.cfg.Step.Duration(res.PrefillTokens, res.DecodeSeqs, res.ContextTokens)
	end := now + res.Duration
	for _, r := range sched {
		r.computed += r.scheduled
		r.scheduled = 0
		if r.computed < len(r.tokens) {
			continue // partial prefill chunk: no token yet
		}
		tok := e.sample(r)
		r.tokens = append(r.tokens, tok)
		r.hashes = e.hasher.chain(r.hashes, r.tokens, e.cfg.BlockSize, r.extraKeys)
		if r.generated == 0 {
			r.firstAt = end
		}
		r.generated++
		out := Output{
			Req: r, Token: tok, Index: r.generated - 1,
			PromptTokens: len(r.Prompt), CachedTokens: r.cached, Generated: r.generated,
			Arrival: r.Arrival, Scheduled: r.startAt, FirstToken: r.firstAt,
		}
		if r.generated >= r.MaxTokens {
			out.Finished = true
			e.finish(r)
		}
		res.Outputs = append(res.Outputs, out)
	}
	e.preemptions += res.Preempted
	res.Events = e.pool.takeEvents()
	return res
}

// grow makes r hold blocks for n more tokens and registers its newly full
// blocks; it reports false when the free blocks do not suffice.
func (e *Engine) grow(r *Request, n int) bool {
	need := e.blocksFor(r.computed+n) - len(r.blocks)
	if need > e.pool.nfree {
		return false
	}
	if need > 0 {
		r.blocks = append(r.blocks, e.pool.allocate(need)...)
	}
	e.register(r, r.computed+n)
	return true
}

// register caches the full blocks among the first upto tokens of r that
// are not cached yet (vLLM's cache_full_blocks), emitting one BlockStored.
func (e *Engine) register(r *Request, upto int) {
	full := min(upto, len(r.tokens)) / e.cfg.BlockSize
	if full <= r.registered {
		return
	}
	bs := e.cfg.BlockSize
	from := r.registered
	var parent *BlockHash
	if from > 0 {
		parent = &r.hashes[from-1]
	}
	var extra [][]string
	for i := from; i < full; i++ {
		if x := r.extraKeys(i); x != nil {
			if extra == nil {
				extra = make([][]string, full-from)
			}
			extra[i-from] = x
		}
	}
	e.pool.register(r.blocks[from:full], r.hashes[from:full], parent, r.tokens[from*bs:full*bs], bs, extra)
	r.registered = full
}

// preempt frees r's blocks and puts it back at the front of the waiting
// queue with nothing computed, as vLLM's FCFS preemption does.
func (e *Engine) preempt(r *Request) {
	e.pool.free(r.blocks)
	r.blocks, r.registered, r.computed, r.running, r.scheduled = nil, 0, 0, false, 0
	e.waiting = append([]*Request{r}, e.waiting...)
}

func (e *Engine) finish(r *Request) {
	e.running = removeRequest(e.running, r)
	e.pool.free(r.blocks)
	r.blocks, r.done, r.running = nil, true, false
}

// sample returns the next generated token of r: a deterministic function
// of the seed, the prompt's last block identity and the position.
func (e *Engine) sample(r *Request) uint32 {
	x := e.cfg.Seed ^ uint64(len(r.Prompt))*0x9e3779b97f4a7c15 ^ uint64(r.generated+1)*0xbf58476d1ce4e5b9
	if len(r.hashes) > 0 {
		x ^= r.hashes[min(len(r.hashes), len(r.Prompt)/e.cfg.BlockSize+1)-1].Uint64()
	}
	x ^= x >> 31
	x *= 0x94d049bb133111eb
	x ^= x >> 29
	return uint32(x % sampleVocab)
}

// sampleVocab bounds generated token ids, so they are valid ids for any
// real tokenizer's vocabulary.
const sampleVocab = 20000

// removeRequest removes r from rs, keeping the order.
func removeRequest(rs []*Request, r *Request) []*Request {
	if i := slices.Index(rs, r); i >= 0 {
		return slices.Delete(rs, i, i+1)
	}
	return rs
}
