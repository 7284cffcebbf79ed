package scoring

import (
	"cmp"
	"container/list"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/kvindex"
)

// This file holds a small discrete-event engine simulation, enough to close
// the loop in unit tests: requests are routed by a Router, run through
// step-by-step engines (decodes first, chunked prefill in arrival order,
// prefix cache with LRU eviction of free blocks, in-flight blocks
// hittable), the engines' KV events feed the fake index, and first tokens
// and outcomes go back to the router. It is not the e2e simulator; it lets
// the prediction and routing claims be checked here, at small scale.

type simBlock struct {
	key  uint64
	ref  int
	elem *list.Element // in the free LRU when ref == 0
}

type simReq struct {
	ids      []uint32
	keys     []uint64
	out      int
	arrival  float64
	d        *Decision
	computed int
	cached   int
	gen      int
	first    float64
	blocks   []*simBlock
	anon     int
}

type simWorker struct {
	name      string
	eng       engine
	maxSeqs   int
	capBlocks int
	cache     map[uint64]*simBlock
	free      *list.List // cached blocks with ref 0, oldest first
	held      int        // blocks with ref > 0, keyed or anonymous
	waiting   []*simReq
	running   []*simReq
	busy      bool
	stepEnd   float64
	chunks    map[*simReq]int
}

type sim struct {
	t     float64
	base  time.Time
	ws    []*simWorker
	pool  Workers
	g     *rig
	bs    int
	key   kvindex.ChainKey
	stats simStats
	// warmTime is when measurement starts; requests decided before it
	// only warm the router up.
	warmTime float64
	n        int  // requests arrived so far
	scrape   bool // publish engine gauges to the router's load source
	// next, when set, is called as each request ends: a closed-loop
	// client's next request, sent at once, or nil.
	next    func() *simReq
	pending []*simReq // arrivals not yet routed, by arrival time
}

type simStats struct {
	ttft, relErr, bias  []float64
	e2e, tpot, tpotErr  []float64
	cachedExact, cached int
	// first and last are the first measured arrival and the last end.
	first, last float64
}

func newSim(t *testing.T, g *rig, engines []engine, capBlocks int) *sim {
	s := &sim{base: g.clock.Now(), g: g, bs: 16, key: kvindex.ChainKey{Model: "m"}}
	for i, e := range engines {
		name := fmt.Sprintf("w%d", i)
		s.ws = append(s.ws, &simWorker{name: name, eng: e, maxSeqs: 256, capBlocks: capBlocks,
			cache: map[uint64]*simBlock{}, free: list.New(), chunks: map[*simReq]int{}})
		s.pool = append(s.pool, discovery.Worker{Name: name, Address: name + ":8000", Models: []string{"m"}})
	}
	return s
}

func (s *sim) setClock() {
	s.g.clock.Set(s.base.Add(time.Duration(s.t * float64(time.Second))))
}

// arrive routes a request and queues it on the chosen engine.
func (s *sim) arrive(t *testing.T, q *simReq) {
	s.setClock()
	if s.scrape {
		for _, w := range s.ws {
			s.g.load.reports[w.name] = loadReport{Running: len(w.running), Waiting: len(w.waiting),
				KVUsage: float64(w.held) / float64(w.capBlocks), HasKVUsage: true, KVBlocks: w.capBlocks, Scraped: s.g.clock.Now()}
		}
	}
	d, err := s.g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: q.ids, Stream: true, MaxTokens: q.out}, s.pool)
	if err != nil {
		t.Fatal(err)
	}
	q.d = d
	q.keys = s.g.index.keys(s.key, q.ids, s.bs)
	s.n++
	w := s.worker(d.Worker)
	w.waiting = append(w.waiting, q)
	if !w.busy {
		s.step(w)
	}
}

func (s *sim) worker(name string) *simWorker {
	for _, w := range s.ws {
		if w.name == name {
			return w
		}
	}
	panic("no worker " + name)
}

// admit looks up the prefix cache, allocates blocks (evicting free cached
// blocks oldest first) and registers the prompt's full blocks as cached.
func (s *sim) admit(w *simWorker, q *simReq) bool {
	limit := (len(q.ids) - 1) / s.bs
	hits := 0
	for hits < limit && w.cache[q.keys[hits]] != nil {
		hits++
	}
	need := len(q.keys) - hits + (len(q.ids)%s.bs+q.out+s.bs-1)/s.bs
	for _, k := range q.keys[:hits] {
		if w.cache[k].ref == 0 {
			need++ // reviving a free block takes it out of the free pool
		}
	}
	for w.held+w.free.Len()+need > w.capBlocks && w.free.Len() > 0 {
		b := w.free.Remove(w.free.Front()).(*simBlock)
		delete(w.cache, b.key)
		s.g.index.setKey(w.name, b.key, false)
	}
	if w.held+w.free.Len()+need > w.capBlocks {
		return false
	}
	for _, k := range q.keys {
		b := w.cache[k]
		if b == nil {
			b = &simBlock{key: k}
			w.cache[k] = b
			s.g.index.setKey(w.name, k, true)
		}
		if b.ref == 0 {
			if b.elem != nil {
				w.free.Remove(b.elem)
				b.elem = nil
			}
			w.held++
		}
		b.ref++
		q.blocks = append(q.blocks, b)
	}
	q.anon = (len(q.ids)%s.bs + q.out + s.bs - 1) / s.bs
	w.held += q.anon
	q.cached = hits * s.bs
	q.computed = q.cached
	return true
}

func (s *sim) release(w *simWorker, q *simReq) {
	for i := len(q.blocks) - 1; i >= 0; i-- {
		b := q.blocks[i]
		b.ref--
		if b.ref == 0 {
			w.held--
			b.elem = w.free.PushBack(b)
		}
	}
	w.held -= q.anon
}

// step builds the engine's next batch at s.t and schedules its end.
func (s *sim) step(w *simWorker) {
	budget := w.eng.budget
	clear(w.chunks)
	prefill, decodes, ctx := 0, 0, 0.0
	for _, q := range w.running {
		if q.computed == len(q.ids) {
			decodes++
			budget--
			ctx += float64(len(q.ids) + q.gen)
			w.chunks[q] = 0
		}
	}
	add := func(q *simReq) {
		k := min(len(q.ids)-q.computed, budget)
		if k <= 0 {
			return
		}
		budget -= k
		prefill += k
		ctx += float64(q.computed + k)
		w.chunks[q] = k
	}
	for _, q := range w.running {
		if q.computed < len(q.ids) {
			add(q)
		}
	}
	for len(w.waiting) > 0 && len(w.running) < w.maxSeqs && budget > 0 {
		q := w.waiting[0]
		if !s.admit(w, q) {
			break
		}
		w.waiting = w.waiting[1:]
		w.running = append(w.running, q)
		add(q)
	}
	if len(w.chunks) == 0 {
		w.busy = false
		return
	}
	w.busy = true
	e := w.eng
	w.stepEnd = s.t + e.o + e.p*float64(prefill) + e.d*float64(decodes) + e.c*ctx
}

// finishStep applies the step that ended at s.t and starts the next.
func (s *sim) finishStep(w *simWorker) {
	s.setClock()
	keep := w.running[:0]
	for _, q := range w.running {
		k, ok := w.chunks[q]
		switch {
		case !ok:
		case k > 0:
			q.computed += k
			if q.computed == len(q.ids) {
				q.gen = 1
				q.first = s.t + w.eng.f
				s.g.r.FirstToken(q.d)
			}
		default:
			q.gen++
		}
		if q.computed == len(q.ids) && q.gen >= q.out {
			s.release(w, q)
			s.ended(q)
			continue
		}
		keep = append(keep, q)
	}
	w.running = keep
	s.step(w)
}

func (s *sim) done(q *simReq) {
	ttft := q.first - q.arrival
	s.g.r.Done(q.d, Outcome{End: EndCompleted, HTTPStatus: 200, TTFT: time.Duration(ttft * float64(time.Second)),
		Duration:     time.Duration((s.t - q.arrival) * float64(time.Second)),
		PromptTokens: len(q.ids), CompletionTokens: q.out, CachedTokens: q.cached})
	if q.d.Decided.Sub(s.base) < time.Duration(s.warmTime*float64(time.Second)) {
		return
	}
	s.stats.ttft = append(s.stats.ttft, ttft)
	e2e := s.t - q.arrival
	s.stats.e2e = append(s.stats.e2e, e2e)
	if q.out > 2 {
		tpot := (s.t - q.first) / float64(q.out-1)
		s.stats.tpot = append(s.stats.tpot, tpot)
		s.stats.tpotErr = append(s.stats.tpotErr, math.Abs(q.d.Chosen.PredictedTPOT.Seconds()-tpot)/tpot)
	}
	if s.stats.first == 0 || q.arrival < s.stats.first {
		s.stats.first = q.arrival
	}
	s.stats.last = max(s.stats.last, s.t)
	pred := q.d.Chosen.PredictedTTFT.Seconds()
	s.stats.relErr = append(s.stats.relErr, math.Abs(pred-ttft)/ttft)
	s.stats.bias = append(s.stats.bias, (pred-ttft)/ttft)
	s.stats.cached++
	if q.d.Chosen.CachedTokens == q.cached {
		s.stats.cachedExact++
	}
}

// ended counts q's end and sends a closed-loop client's next request.
func (s *sim) ended(q *simReq) {
	s.done(q)
	if s.next == nil {
		return
	}
	if n := s.next(); n != nil {
		n.arrival = s.t
		i, _ := slices.BinarySearchFunc(s.pending, n.arrival, func(p *simReq, t float64) int { return cmp.Compare(p.arrival, t) })
		s.pending = slices.Insert(s.pending, i, n)
	}
}

// run plays the arrivals (sorted by time), and those closed-loop clients
// send, to completion.
func (s *sim) run(t *testing.T, reqs []*simReq, times []float64) {
	for i, q := range reqs {
		q.arrival = times[i]
	}
	s.pending = append(s.pending, reqs...)
	for {
		next := math.Inf(1)
		var nw *simWorker
		for _, w := range s.ws {
			if w.busy && w.stepEnd < next {
				next, nw = w.stepEnd, w
			}
		}
		if len(s.pending) > 0 && s.pending[0].arrival <= next {
			q := s.pending[0]
			s.pending = s.pending[1:]
			s.t = q.arrival
			s.arrive(t, q)
			continue
		}
		if nw == nil {
			return
		}
		s.t = next
		s.finishStep(nw)
	}
}

// workloads -----------------------------------------------------------------

type simWorkload struct {
	name  string
	reqs  func(rng *rand.Rand, n int) [][]uint32
	rate  float64 // arrivals per second
	cap   int     // KV blocks per worker
	speed []float64
}

func tokens(rng *rand.Rand, n int) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = rng.Uint32N(150000)
	}
	return ids
}

// sharedPrefixes: nf families with a prefix of plen tokens and a unique
// suffix of slen; family popularity is uniform.
func sharedPrefixes(nf, plen, slen int, hot float64) func(*rand.Rand, int) [][]uint32 {
	return func(rng *rand.Rand, n int) [][]uint32 {
		fam := make([][]uint32, nf)
		for i := range fam {
			fam[i] = tokens(rng, plen)
		}
		out := make([][]uint32, n)
		for i := range out {
			f := rng.IntN(nf)
			if rng.Float64() < hot {
				f = 0
			}
			out[i] = append(slices.Clip(fam[f]), tokens(rng, slen)...)
		}
		return out
	}
}

func independent(lo, hi int) func(*rand.Rand, int) [][]uint32 {
	return func(rng *rand.Rand, n int) [][]uint32 {
		out := make([][]uint32, n)
		for i := range out {
			out[i] = tokens(rng, lo+rng.IntN(hi-lo))
		}
		return out
	}
}

type simResult struct {
	median, p90, mape, p90ape, bias, cachedExact float64
	e2e, tpotAPE                                 float64 // medians
	e2eMean, e2eP90                              float64
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func percentile(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(int(p*float64(len(s))), len(s)-1)]
}

func runSim(t *testing.T, wl simWorkload, policy string, cfg Config, n, warm int) simResult {
	base := engine{o: 0.006, p: 40e-6, d: 150e-6, c: 4e-9, f: 0.003, budget: 8192}
	var engines []engine
	for _, f := range wl.speed {
		engines = append(engines, base.slower(f, 8192))
	}
	g := newRig(t, policy, cfg, nil)
	s := newSim(t, g, engines, wl.cap)
	s.scrape = true
	rng := rand.New(rand.NewPCG(11, 12))
	prompts := wl.reqs(rng, n)
	reqs := make([]*simReq, n)
	times := make([]float64, n)
	at := 0.0
	for i := range reqs {
		at += rng.ExpFloat64() / wl.rate
		times[i] = at
		reqs[i] = &simReq{ids: prompts[i], out: 16 + rng.IntN(48)}
	}
	s.warmTime = times[warm]
	s.run(t, reqs, times)
	st := s.stats
	return simResult{
		median:      percentile(st.ttft, 0.5),
		p90:         percentile(st.ttft, 0.9),
		mape:        percentile(st.relErr, 0.5),
		p90ape:      percentile(st.relErr, 0.9),
		bias:        percentile(st.bias, 0.5),
		cachedExact: float64(st.cachedExact) / float64(st.cached),
		e2e:         percentile(st.e2e, 0.5),
		e2eMean:     mean(st.e2e),
		e2eP90:      percentile(st.e2e, 0.9),
		tpotAPE:     percentile(st.tpotErr, 0.5),
	}
}

// TestSimulatedRouting runs three workloads on a heterogeneous pool (speeds
// 1×, 1.5×, 2× slower, not told to the router) under every policy, and
// checks warmpath's prediction accuracy and routing against the baselines.
func TestSimulatedRouting(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	t.Parallel()
	workloads := []simWorkload{
		// 40 prefixes of 2048 tokens (80K tokens) against 4096-block
		// (64K-token) caches: no worker can hold them all.
		{name: "shared", reqs: sharedPrefixes(40, 2048, 256, 0), rate: 14, cap: 4096, speed: []float64{1, 1.5, 2}},
		// Half of all requests share one hot prefix, with long unique
		// suffixes: the hot prefix's worker alone cannot keep up.
		{name: "skewed", reqs: sharedPrefixes(16, 2048, 1024, 0.5), rate: 24, cap: 4096, speed: []float64{1, 1.5, 2}},
		{name: "independent", reqs: independent(512, 3072), rate: 12, cap: 4096, speed: []float64{1, 1.5, 2}},
	}
	policies := append(PolicyNames(), "warmpath/ttft")
	const n, warm = 900, 200
	results := map[string]map[string]simResult{}
	var table strings.Builder
	fmt.Fprintf(&table, "%-12s %-14s %9s %9s %8s %8s %9s %8s %9s %8s\n", "workload", "policy", "p50 TTFT", "p90 TTFT", "p50 APE", "p90 APE", "p50 bias", "cached=", "p50 E2E", "TPOT APE")
	for _, wl := range workloads {
		results[wl.name] = map[string]simResult{}
		for _, p := range policies {
			cfg := DefaultConfig()
			name, obj, ok := strings.Cut(p, "/")
			if ok {
				cfg.Objective = Objective(obj)
			}
			r := runSim(t, wl, name, cfg, n, warm)
			results[wl.name][p] = r
			fmt.Fprintf(&table, "%-12s %-14s %8.3fs %8.3fs %7.1f%% %7.1f%% %+8.1f%% %7.1f%% %8.3fs %7.1f%%\n", wl.name, p, r.median, r.p90, 100*r.mape, 100*r.p90ape, 100*r.bias, 100*r.cachedExact, r.e2e, 100*r.tpotAPE)
		}
	}
	t.Logf("after %d warm-up requests, %d measured:\n%s", warm, n-warm, table.String())

	for _, wl := range workloads {
		// The skewed workload's hot worker runs near saturation. Its
		// bound was looser (20%, 100%) while the ledger credited a
		// finished prompt's step to prompts decided after that step
		// began (p90 36–37%); it is the same as the others' now.
		maxMed, maxP90 := 0.10, 0.30
		for _, p := range []string{PolicyWarmpath, "warmpath/ttft"} {
			w := results[wl.name][p]
			if w.mape > maxMed || w.p90ape > maxP90 {
				t.Errorf("%s, %s: prediction error median %.1f%%, p90 %.1f%%; want ≤ %.0f%%, ≤ %.0f%%", wl.name, p, 100*w.mape, 100*w.p90ape, 100*maxMed, 100*maxP90)
			}
			if w.cachedExact < 0.95 {
				t.Errorf("%s, %s: cached tokens exact on %.1f%%, want ≥ 95%%", wl.name, p, 100*w.cachedExact)
			}
		}
		// The default objective (e2e) trades first tokens for whole
		// responses, but not the median first token.
		e, tt := results[wl.name][PolicyWarmpath], results[wl.name]["warmpath/ttft"]
		if e.median > tt.median*1.05 {
			t.Errorf("%s: e2e objective's median TTFT %.3fs more than 5%% over the ttft objective's %.3fs", wl.name, e.median, tt.median)
		}
		if e.e2eMean > tt.e2eMean*1.02 {
			t.Errorf("%s: e2e objective's mean E2E %.3fs worse than the ttft objective's %.3fs", wl.name, e.e2eMean, tt.e2eMean)
		}
	}
	// The TTFT objective's claims on first tokens.
	const ttft = "warmpath/ttft"
	sh, sk, in := results["shared"], results["skewed"], results["independent"]
	if sh[ttft].median > sh[PolicyRandom].median/2 {
		t.Errorf("shared: warmpath median %.3fs not 2× better than random %.3fs", sh[ttft].median, sh[PolicyRandom].median)
	}
	// The issue asks 1.3× on the e2e simulator; this small run (one seed,
	// 700 requests) is held to 1.2×.
	if sk[ttft].p90*1.2 > sk[PolicyPrefixMax].p90 {
		t.Errorf("skewed: warmpath p90 %.3fs not 1.2× better than prefix-max %.3fs", sk[ttft].p90, sk[PolicyPrefixMax].p90)
	}
	if sh[ttft].p90 > sh[PolicyPrefixMax].p90*1.1 {
		t.Errorf("shared: warmpath p90 %.3fs worse than prefix-max %.3fs", sh[ttft].p90, sh[PolicyPrefixMax].p90)
	}
	if sk[ttft].p90 > sk[PolicyAffinity].p90*1.05 {
		t.Errorf("skewed: warmpath p90 %.3fs worse than affinity %.3fs", sk[ttft].p90, sk[PolicyAffinity].p90)
	}
	if in[ttft].median > in[PolicyLeastRequest].median*1.05 {
		t.Errorf("independent: warmpath median %.3fs worse than least-request %.3fs", in[ttft].median, in[PolicyLeastRequest].median)
	}
}

// closedSim is a closed-loop run: clients each send their next request
// when the last one ends, on engines whose speeds the router is not told.
type closedSim struct {
	engines  []engine
	prompts  func(rng *rand.Rand, n int) [][]uint32
	out      func(rng *rand.Rand) int
	clients  int
	n, warm  int
	capacity int
}

type closedResult struct {
	ttft, e2e, tpot     [2]float64 // median, p90
	ttftErr, tpotErr    [2]float64 // median, p90 of |pred − actual| / actual
	throughput, seconds float64
}

func (c closedSim) run(t *testing.T, policy string, cfg Config) closedResult {
	g := newRig(t, policy, cfg, nil)
	s := newSim(t, g, c.engines, c.capacity)
	s.scrape = true
	rng := rand.New(rand.NewPCG(21, 22))
	prompts := c.prompts(rng, c.n)
	i := 0
	mk := func() *simReq {
		if i == len(prompts) {
			return nil
		}
		q := &simReq{ids: prompts[i], out: c.out(rng)}
		i++
		return q
	}
	var first []*simReq
	for range c.clients {
		first = append(first, mk())
	}
	// Requests decided after the warm-up count; the warm-up ends at the
	// warm-th arrival, known once it is sent.
	s.warmTime = math.Inf(1)
	s.next = func() *simReq {
		if i == c.warm {
			s.warmTime = s.t
		}
		return mk()
	}
	s.run(t, first, make([]float64, len(first)))
	st := s.stats
	q := func(xs []float64) [2]float64 { return [2]float64{percentile(xs, 0.5), percentile(xs, 0.9)} }
	return closedResult{ttft: q(st.ttft), e2e: q(st.e2e), tpot: q(st.tpot), ttftErr: q(st.relErr), tpotErr: q(st.tpotErr),
		throughput: float64(len(st.e2e)) / (st.last - st.first), seconds: st.last - st.first}
}

// TestSimulatedObjectives runs independent prompts in a closed loop on a
// pool whose workers prefill at different speeds with different step
// budgets and decode alike: the pool where the lowest TTFT is not the
// fastest response. It compares the objectives with load balancing.
func TestSimulatedObjectives(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	t.Parallel()
	eng := func(p float64, budget int) engine {
		return engine{o: 0.012, p: p, d: 200e-6, c: 8e-9, f: 0.003, budget: budget}
	}
	c := closedSim{
		engines:  []engine{eng(40e-6, 8192), eng(80e-6, 4096), eng(120e-6, 2048), eng(160e-6, 1024)},
		prompts:  independent(2000, 4000),
		out:      func(rng *rand.Rand) int { return 64 + rng.IntN(128) },
		clients:  24,
		n:        900,
		warm:     200,
		capacity: 1 << 16,
	}
	type row struct {
		name string
		r    closedResult
	}
	var rows []row
	for _, obj := range Objectives()[:2] {
		cfg := DefaultConfig()
		cfg.Objective = obj
		rows = append(rows, row{"warmpath/" + string(obj), c.run(t, PolicyWarmpath, cfg)})
	}
	for _, p := range []string{PolicyLeastRequest, PolicyRoundRobin} {
		rows = append(rows, row{p, c.run(t, p, DefaultConfig())})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-16s %9s %9s %9s %9s %9s %9s %9s %9s\n", "policy", "TTFT p50", "E2E p50", "E2E p90", "TPOT p50", "req/s", "TTFT APE", "TPOT APE", "TPOT p90")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-16s %8.3fs %8.3fs %8.3fs %7.1fms %9.2f %8.1f%% %8.1f%% %8.1f%%\n", r.name, r.r.ttft[0], r.r.e2e[0], r.r.e2e[1],
			1e3*r.r.tpot[0], r.r.throughput, 100*r.r.ttftErr[0], 100*r.r.tpotErr[0], 100*r.r.tpotErr[1])
	}
	t.Logf("closed loop, %d clients, %d requests after %d warm-up:\n%s", c.clients, c.n-c.warm, c.warm, b.String())
	ttft, e2e := rows[0].r, rows[1].r
	best := rows[2].r
	for _, r := range rows[2:] {
		if r.r.throughput > best.throughput {
			best = r.r
		}
	}
	// The targets against the best load balancer.
	if e2e.throughput < 0.95*best.throughput || e2e.e2e[0] > 1.05*best.e2e[0] {
		t.Errorf("e2e objective: %.2f req/s, E2E p50 %.3fs; best balancer %.2f req/s, %.3fs", e2e.throughput, e2e.e2e[0], best.throughput, best.e2e[0])
	}
	if !(ttft.e2e[0] > e2e.e2e[0]) || !(ttft.throughput < e2e.throughput) {
		t.Errorf("ttft objective (E2E p50 %.3fs, %.2f req/s) not behind the e2e objective (%.3fs, %.2f req/s) on this pool",
			ttft.e2e[0], ttft.throughput, e2e.e2e[0], e2e.throughput)
	}
	// Short answers put few other prefills in one response's decode, and
	// which come is chance: the TPOT error is bounded looser than the
	// benchmark's targets.
	if e2e.tpotErr[0] > 0.12 || e2e.ttftErr[0] > 0.10 {
		t.Errorf("e2e objective: TPOT error median %.1f%%, TTFT %.1f%%", 100*e2e.tpotErr[0], 100*e2e.ttftErr[0])
	}
}
