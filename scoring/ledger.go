package scoring

import (
	"math"
	"slices"
	"time"

	"github.com/warmpath/warmpath/discovery"
)

// The ledger room: the one record of what warmpath has in flight. Every
// decision Pick commits is an assignment here from its reservation to its
// Done; a worker's load, as the TTFT model sees it, is this ledger
// reconciled with the worker's last scrape. The ledger is guarded by the
// router's mutex.

// ledger holds the live assignments and, per worker, those in flight and
// those recently ended.
type ledger struct {
	// told is set once first tokens are reported (FirstToken, or a peer's).
	told    bool
	workers map[string]*workerLedger
	live    map[*Decision]*assignment
	// remote holds the peers' assignments (shared.go), which load the
	// workers as the router's own do.
	remote map[peerKey]*assignment
	// nextID numbers the router's own assignments for its peers.
	nextID uint64
}

func newLedger() ledger {
	return ledger{workers: make(map[string]*workerLedger), live: make(map[*Decision]*assignment),
		remote: make(map[peerKey]*assignment)}
}

// worker returns the ledger of worker, creating it.
func (l *ledger) worker(name string) *workerLedger {
	w, ok := l.workers[name]
	if !ok {
		w = &workerLedger{}
		l.workers[name] = w
	}
	return w
}

// reserve records a as in flight for d and numbers it.
func (l *ledger) reserve(d *Decision, a *assignment) {
	l.nextID++
	a.id = l.nextID
	a.ledger.inflight = append(a.ledger.inflight, a)
	l.live[d] = a
}

// end removes d's assignment at now and returns it, or false when d is not
// live (already ended, or not from this router).
func (l *ledger) end(d *Decision, now time.Time) (*assignment, bool) {
	a, ok := l.live[d]
	if !ok {
		return nil, false
	}
	delete(l.live, d)
	a.ledger.remove(a, now)
	a.ledger.pruneEnded(a.ledger.lastScrape)
	return a, true
}

// firstToken records that d's request produced its first token at now and
// returns its assignment, or false when d is not live.
func (l *ledger) firstToken(d *Decision, now time.Time) (*assignment, bool) {
	l.told = true
	a, ok := l.live[d]
	if ok && !a.firstSeen {
		a.ledger.started(a, now)
	}
	return a, ok
}

// forget drops worker's ledger unless it has assignments in flight, and
// reports whether it did.
func (l *ledger) forget(worker string) bool {
	if w, ok := l.workers[worker]; ok && len(w.inflight) > 0 {
		return false
	}
	delete(l.workers, worker)
	return true
}

// inFlight returns the number of the router's own assignments in flight
// per worker, for workers with any.
func (l *ledger) inFlight() map[string]int {
	out := make(map[string]int)
	for name, w := range l.workers {
		for _, a := range w.inflight {
			if !a.remote {
				out[name]++
			}
		}
	}
	return out
}

// assignment is one routed request from its decision to its Done: the load
// it reserves on its worker and what was predicted for it.
type assignment struct {
	// id numbers the router's own assignments; remote marks a peer's.
	id      uint64
	remote  bool
	worker  string
	ledger  *workerLedger
	decided time.Time
	// prompt and uncached are in tokens; blocks is the KV blocks the
	// request occupies (prompt only). uncached includes more, the prefill
	// of a completions request's prompts after the first (prompt is the
	// first's): work the worker does for it, which the ones routed after
	// it wait for.
	prompt   int
	uncached float64
	more     float64
	blocks   int
	// start and first are the predicted start of its prefill and its
	// first token; firstSeen is set when the caller reported it.
	start     time.Time
	first     time.Time
	firstSeen bool
	firstAt   time.Time
	// ownBlocks is the KV blocks the request adds beyond its cached
	// prefix: its uncached prompt and the expected output of each of its
	// sequences.
	ownBlocks int
	// kvWait is the predicted wait for KV blocks included in start.
	kvWait time.Duration
	// stream is set for streamed requests, whose first token the caller
	// can see and report.
	stream bool
	// work is the model input at decision time; pred what came out;
	// pending the prefill stream ahead of it, when there was one.
	work    workload
	pred    prediction
	pending prefillStream
	// cached is the predicted prefix hit; exact whether it came from
	// exact tokens and the index (only then it is checked against the
	// engine's answer).
	cached int
	exact  bool
	// unexplained is set when, while it waited for its first token, the
	// engine ran or queued requests no ledger knew of.
	unexplained bool
	// model, maxTokens, prompts and seqs (Request.sequences) are the
	// request's; out is the output tokens its decode prediction assumed.
	model     string
	maxTokens int
	prompts   int
	seqs      int
	out       float64
	// decodeFrom and decodeTo are the worker's decode meter at its first
	// token and at its end: its decode window.
	decodeFrom, decodeTo meterReading
	// moved is set when Reassign moved it to another candidate: its model
	// inputs were gathered for the worker first chosen.
	moved bool
	// source is the request's Source, who will report its outcome.
	source string
}

// sequences is how many sequences a decodes: one when not known (a peer
// of wire version 2 or older does not say).
func (a *assignment) sequences() int { return max(a.seqs, 1) }

// decoding is what a adds to its worker's decode steps once past its
// first token: its sequences, and the context tokens they read (each its
// prompt).
func (a *assignment) decoding() (seqs, ctx float64) {
	n := float64(a.sequences())
	return n, n * float64(a.prompt)
}

// pastFirst reports whether a is (believed to be) decoding at t. When the
// caller reports first tokens (told), only a reported first token counts;
// otherwise the predicted first token time does.
func (a *assignment) pastFirst(t time.Time, told bool) bool {
	return a.firstSeen || (!(told && a.stream) && !t.Before(a.first))
}

// remaining is a's prefill work not yet done at t, in tokens: all of it
// before its predicted start, none after its first token, linear between.
// An assignment past its predicted first token that has not reported one
// is taken to be in its last step, half done.
func (a *assignment) remaining(t time.Time, told bool) float64 {
	switch {
	case a.pastFirst(t, told):
		return 0
	case !t.After(a.start):
		return a.uncached
	case !t.Before(a.first):
		return min(a.uncached, a.work.budget) / 2
	}
	span := a.first.Sub(a.start)
	return a.uncached * float64(a.first.Sub(t)) / float64(span)
}

// ledgerLoad is a worker's load as warmpath's own assignments show it,
// reconciled with the last scrape.
type ledgerLoad struct {
	inflight int
	// ahead is prefill tokens not yet computed; pendingUncached the full
	// uncached tokens of requests not past their first token.
	ahead           float64
	aheadReqs       float64
	aheadCtx        float64
	pendingUncached float64
	decoding        float64
	decodeCtx       float64
	// blocks is the KV blocks held by in-flight requests (dynamo-cost).
	blocks int
	// extra is the number of requests the scrape shows beyond the ledger.
	extra int
	// pending is the FIFO prefill stream ahead, when first tokens are
	// reported: what calibration needs to redo ahead in hindsight.
	pending prefillStream
	// kvUsage is the scraped usage, -1 when unknown.
	kvUsage float64
}

// prefillStream is the prefill work a decision found queued on a worker
// whose first tokens are reported: queued tokens pending since start, of
// which the load took ahead to remain, taking the rest as done at the
// pace the calibrated model predicts for it (streamPace).
type prefillStream struct {
	start  time.Time
	queued float64
	ahead  float64
}

// hindsight returns the tokens that were ahead of a request decided at
// decided, of own tokens, whose first token came at first, had the stream
// progressed at the pace it showed; ok is false when the stream gives no
// pace (none queued, or no time passed).
func (p prefillStream) hindsight(decided, first time.Time, own float64) (ahead float64, ok bool) {
	span := first.Sub(p.start).Seconds()
	if p.start.IsZero() || p.queued <= 0 || span <= 0 {
		return 0, false
	}
	pace := (p.queued + own) / span
	return max(p.queued-pace*decided.Sub(p.start).Seconds(), 0), true
}

// workerLedger is one worker's part of the ledger.
type workerLedger struct {
	inflight []*assignment
	// lastFirst is when the worker last reported a first token: the
	// prefill work still pending started no earlier. lastFirstTokens is
	// the uncached prompt tokens of the requests whose first tokens came
	// then (within firstTogether of each other): the step that finished
	// them gave what was left of its budget to the requests behind them.
	lastFirst       time.Time
	lastFirstTokens float64
	// lastScrape is the newest fresh scrape of the worker seen: ended
	// assignments no later scrape can count are dropped against it.
	lastScrape time.Time
	// ended holds the assignments that ended recently, oldest first: a
	// scrape taken before they ended still counts them, and without them
	// the reconciliation would take those for requests warmpath did not
	// route.
	ended []endedAssignment
	// endedShifts counts the times entries left the front of ended, which
	// moves those behind them; counted caches the reconciliation's count
	// of ended against one scrape, extended as entries are appended.
	endedShifts int
	counted     endedCount
	// meter integrates what the worker's decode steps carried (decode.go).
	meter decodeMeter
}

// firstTogether is how close first tokens must come to count as one
// engine step's: well under any step's length.
const firstTogether = time.Millisecond

// started records a's first token at t: it decodes from now on.
func (s *workerLedger) started(a *assignment, t time.Time) {
	a.firstSeen, a.firstAt = true, t
	switch {
	case t.Sub(s.lastFirst).Abs() <= firstTogether:
		s.lastFirstTokens += a.uncached
		if t.After(s.lastFirst) {
			s.lastFirst = t
		}
	case t.After(s.lastFirst):
		s.lastFirst, s.lastFirstTokens = t, a.uncached
	}
	a.decodeFrom = s.meter.started(a, t)
}

// carried returns the prefill tokens the step that ended at lastFirst did
// for the requests behind the ones it finished: an engine fills a step's
// budget with the running requests (a token per decode, the last chunk of
// each prefill being finished) and gives the rest to the next waiting
// ones, as vLLM's scheduler does. The finished prompts are taken to have
// been chunked from a step's start, so their last chunk is what a step's
// prefill share leaves of them.
func (s *workerLedger) carried(budget, decoding float64) float64 {
	share := budget - decoding
	if share < 1 || s.lastFirstTokens <= 0 {
		return 0
	}
	last := math.Mod(s.lastFirstTokens, share)
	if last == 0 {
		return 0
	}
	return share - last
}

// carriedTo returns the prefill tokens the step that ended at lastFirst
// did for the stream behind the prompts it finished, whose first prompt,
// of uncached tokens, was decided at decided: the rest of the step's
// budget (carried), given first to that prompt and to the next ones only
// past it, so less than all of it (its first token would have come with
// the step's); and nothing when that prompt was decided after the step
// began, since an engine builds a step's batch as the step starts. The
// step's start is the model's price of a step of the finished prompts'
// last chunk and what it carried.
func (s *workerLedger) carriedTo(decided time.Time, uncached float64, m StepModel, budget, decoding, decodeCtx float64) float64 {
	carried := s.carried(budget, decoding)
	c := min(carried, uncached-1)
	if c <= 0 {
		return 0
	}
	step := queueWait(m, budget-decoding-carried+c, decoding, decodeCtx, budget)
	began := s.lastFirst.Add(-time.Duration(step * float64(time.Second)))
	if decided.After(began) {
		return 0
	}
	return c
}

// typical is what a worker's outcomes taught about its typical request,
// to price the requests only a scrape shows and the blocks they free: its
// mean uncached and prompt tokens, its mean time from first token to end
// (seconds) and its mean completion tokens; the last two are 0 until an
// outcome is seen.
type typical struct {
	uncached, prompt float64
	decode, out      float64
}

// endedAssignment is what the scrape reconciliation needs of an
// assignment after its end: when it was in the engine, and in which state.
type endedAssignment struct {
	decided, start, ended time.Time
	// first is when its first token came (reported or, if never
	// reported, predicted).
	first time.Time
}

// maxEnded bounds workerLedger.ended: a worker ending more requests than
// this within one scrape's age undercounts the reconciliation, never more.
const maxEnded = 4096

// ownBlocks is the KV blocks a request adds beyond its cached prefix: its
// uncached prompt, and the typical output for each of its seqs sequences,
// which decode side by side into blocks of their own.
func ownBlocks(uncached float64, seqs int, typ typical, blockSize int) int {
	return int(math.Ceil((uncached + float64(seqs)*typ.out) / float64(blockSize)))
}

// kvWait predicts how long a request needing need more KV blocks waits for
// admission on an engine of capacity blocks: blocks are held by the
// in-flight requests (their own blocks plus the largest shared prefix,
// or what the scrape shows if more) and come free as decoding requests
// end, each expected typ.decode after its first token. It is 0 when the
// capacity or the decode time is unknown, or the request fits.
func (s *workerLedger) kvWait(now time.Time, capacity, need int, usage float64, blockSize int, told bool, typ typical) time.Duration {
	if capacity <= 0 || typ.decode <= 0 || len(s.inflight) == 0 {
		return 0
	}
	held, shared := 0, 0
	for _, a := range s.inflight {
		held += a.ownBlocks
		shared = max(shared, (a.prompt-int(a.uncached-a.more))/blockSize)
	}
	held += shared
	if usage >= 0 {
		held = max(held, int(usage*float64(capacity)))
	}
	free := capacity - held
	if need <= free {
		return 0
	}
	type ending struct {
		at     time.Time
		blocks int
	}
	var ends []ending
	decode := time.Duration(typ.decode * float64(time.Second))
	for _, a := range s.inflight {
		first := a.first
		if a.firstSeen {
			first = a.firstAt
		} else if told && a.stream && first.Before(now) {
			first = now
		}
		ends = append(ends, ending{at: first.Add(decode), blocks: a.ownBlocks})
	}
	slices.SortFunc(ends, func(x, y ending) int { return x.at.Compare(y.at) })
	var at time.Time
	for _, e := range ends {
		free += e.blocks
		at = e.at
		if free >= need {
			break
		}
	}
	return max(at.Sub(now), 0)
}

// remove deletes a, which ended at now, keeping the others in decision
// (FIFO) order, and remembers it for the reconciliation of scrapes taken
// before now.
func (s *workerLedger) remove(a *assignment, now time.Time) {
	for i, b := range s.inflight {
		if b == a {
			copy(s.inflight[i:], s.inflight[i+1:])
			s.inflight[len(s.inflight)-1] = nil
			s.inflight = s.inflight[:len(s.inflight)-1]
			break
		}
	}
	a.decodeTo = s.meter.ended(a, now)
	first := a.first
	if a.firstSeen {
		first = a.firstAt
	}
	if len(s.ended) == maxEnded {
		copy(s.ended, s.ended[1:])
		s.ended = s.ended[:maxEnded-1]
		s.endedShifts++
	}
	s.ended = append(s.ended, endedAssignment{decided: a.decided, start: a.start, ended: now, first: first})
}

// pruneEnded drops the ended assignments that no scrape taken at or after
// since can have seen.
func (s *workerLedger) pruneEnded(since time.Time) {
	i := 0
	for i < len(s.ended) && !s.ended[i].ended.After(since) {
		i++
	}
	if i > 0 {
		n := copy(s.ended, s.ended[i:])
		clear(s.ended[n:])
		s.ended = s.ended[:n]
		s.endedShifts++
	}
}

// endedCount is how many of a ledger's ended assignments a scrape taken at
// at saw running and waiting, over its first n entries, when the ledger
// had shifted them shifts times.
type endedCount struct {
	at               time.Time
	n, shifts        int
	running, waiting int
}

// endedAt returns how many ended assignments a scrape taken at at saw in
// the engine, running and waiting: those decided by then, waiting if they
// had neither started nor had their first token. A decision asks it once
// per candidate and each scrape stands for a second, so the count is kept
// and extended by the entries appended since, not made again over every
// entry of the scrape's age.
func (s *workerLedger) endedAt(at time.Time) (running, waiting int) {
	c := &s.counted
	if !c.at.Equal(at) || c.shifts != s.endedShifts {
		*c = endedCount{at: at, shifts: s.endedShifts}
	}
	for _, e := range s.ended[c.n:] {
		if e.decided.After(at) {
			continue
		}
		if e.start.After(at) && e.first.After(at) {
			c.waiting++
		} else {
			c.running++
		}
	}
	c.n = len(s.ended)
	return c.running, c.waiting
}

// load sums the ledger at now and reconciles it with scrape r when it is
// fresh: requests the engine reports beyond those warmpath routed (other
// routers, direct clients) are added, the waiting ones as prefill work of
// the worker's average uncached size, the running ones as decodes.
//
// When first tokens are reported (told), the prefill work pending is one
// FIFO stream that started at the later of the last first token and the
// oldest pending decision, progressing at the pace the worker's model m
// predicts for it (streamPace); what is taken to remain of it is what the
// pace leaves, given that no first token has yet confirmed its end
// (streamRemaining).
func (s *workerLedger) load(now time.Time, r discovery.EngineLoad, fresh bool, blockSize int, told bool, m StepModel, budget float64, typ typical) ledgerLoad {
	l := ledgerLoad{inflight: len(s.inflight), kvUsage: -1}
	var runningAt, waitingAt int
	var streamStart time.Time
	var firstPending float64 // the uncached tokens of the stream's first prompt
	for _, a := range s.inflight {
		if a.pastFirst(now, told) {
			n, ctx := a.decoding()
			l.decoding += n
			l.decodeCtx += ctx
		} else {
			if told && a.stream {
				if streamStart.IsZero() {
					streamStart, firstPending = a.decided, a.uncached
				}
				l.ahead += a.uncached
			} else {
				l.ahead += a.remaining(now, told)
			}
			l.aheadReqs++
			l.aheadCtx += float64(a.prompt)
			l.pendingUncached += a.uncached
		}
		l.blocks += a.blocks
		if fresh && !a.decided.After(r.ScrapedAt) {
			if a.start.After(r.ScrapedAt) && !a.firstSeen {
				waitingAt++
			} else {
				runningAt++
			}
		}
	}
	if told && l.ahead > 0 {
		queued := l.ahead
		if s.lastFirst.After(streamStart) {
			queued = max(queued-s.carriedTo(streamStart, firstPending, m, budget, l.decoding, l.decodeCtx), 0)
			streamStart = s.lastFirst
		}
		done := now.Sub(streamStart).Seconds() / streamPace(m, queued, l.decoding, l.decodeCtx, budget)
		l.ahead = streamRemaining(queued, done)
		l.pending = prefillStream{start: streamStart, queued: queued, ahead: l.ahead}
	}
	if !fresh {
		return l
	}
	// Assignments that ended after the scrape were still in the engine
	// when it was taken.
	if r.ScrapedAt.After(s.lastScrape) {
		s.lastScrape = r.ScrapedAt
	}
	s.pruneEnded(r.ScrapedAt)
	endedRunning, endedWaiting := s.endedAt(r.ScrapedAt)
	runningAt += endedRunning
	waitingAt += endedWaiting
	if r.HasKVCacheUsage {
		l.kvUsage = r.KVCacheUsage
	}
	extra := max(0, r.Running+r.Waiting-runningAt-waitingAt)
	extraWaiting := min(extra, max(0, r.Waiting-waitingAt))
	extraRunning := extra - extraWaiting
	l.extra = extra
	l.ahead += float64(extraWaiting) * typ.uncached
	l.aheadReqs += float64(extraWaiting)
	l.aheadCtx += float64(extraWaiting) * typ.prompt
	l.pendingUncached += float64(extraWaiting) * typ.uncached
	l.decoding += float64(extraRunning)
	l.decodeCtx += float64(extraRunning) * typ.prompt
	l.blocks += extra * int(typ.prompt) / blockSize
	if extra > 0 {
		s.markUnexplained(r.ScrapedAt, told)
	}
	return l
}

// streamSpread is the mean absolute error of a prefill stream's predicted
// end, as a fraction of the stream: the first tokens of Mooncake's prompts
// of 4K uncached tokens or more came 5.0% and 7.0% from their predictions
// on average (two sets of runs, 2026-12-07).
const streamSpread = 0.06

// streamRemaining returns the tokens expected to remain of a prefill stream
// of queued tokens whose pace says done are computed, given that its end
// has not been seen. The end is taken to fall about the paced one with a
// Laplace spread of streamSpread·queued: well before it the pace's
// remainder; near it, and past it, what the spread leaves beyond the time
// already waited. A stream long overdue keeps a remainder of the spread
// (the Laplace tail has no memory), so the requests behind it are not
// priced as if it were done, while one the pace puts near its end is not
// priced at a fixed share of a step.
func streamRemaining(queued, done float64) float64 {
	b := streamSpread * queued
	d := queued - done
	if b <= 0 {
		return max(d, 0)
	}
	if d <= 0 {
		return b
	}
	// E[end − now | end > now] for end ~ Laplace(queued, b), now = done.
	e := math.Exp(-d / b)
	return (d + b*e/2) / (1 - e/2)
}

// streamPace returns the seconds per token in which m predicts queued
// prefill tokens to be computed beside decoding sequences of decodeCtx
// context tokens: their cost as a queue wait (workload.parts, its steps'
// overhead and the decodes beside them included) over the tokens. Progress
// credited at this pace, and the wait then predicted for what remains, add
// up to the wait predicted for the whole stream. At the bare per-token
// cost they did not: a fit that puts part of a long prefill's cost in the
// step overhead (the two are nearly collinear over prompts of many steps)
// credited the stream too much progress, and the requests behind it were
// predicted to wait too little. A model that prices the work at nothing
// falls back to its per-token cost.
func streamPace(m StepModel, queued, decoding, decodeCtx, budget float64) float64 {
	if queued <= 0 {
		return m.PrefillPerToken
	}
	if pace := queueWait(m, queued, decoding, decodeCtx, budget) / queued; pace > 0 {
		return pace
	}
	return m.PrefillPerToken
}

// queueWait returns the seconds m predicts a request waits behind ahead
// prefill tokens beside decoding sequences of decodeCtx context tokens:
// the queue part of its TTFT (workload.parts).
func queueWait(m StepModel, ahead, decoding, decodeCtx, budget float64) float64 {
	w := workload{ahead: ahead, decoding: decoding, decodeCtx: decodeCtx, budget: budget}
	q, _ := w.parts()
	return dot(q, m.vector())
}

// markUnexplained flags the router's own assignments that were waiting for
// their first token when a scrape showed requests no ledger knows (another
// router's, or a client's that bypasses warmpath): their time to first
// token includes work the model never saw, so calibration must not read it
// as the worker's speed.
func (s *workerLedger) markUnexplained(at time.Time, told bool) {
	for _, a := range s.inflight {
		if !a.remote && !a.decided.After(at) && !a.pastFirst(at, told) {
			a.unexplained = true
		}
	}
}
