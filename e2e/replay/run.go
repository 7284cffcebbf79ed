package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// HistoryMode says what a multi-turn session puts in the assistant turns it
// carries forward.
type HistoryMode string

// The history modes.
const (
	// HistoryResponse carries the reply text the server sent, as a real
	// chat client does. Different servers may reply differently, so later
	// turns of two runs may differ.
	HistoryResponse HistoryMode = "response"
	// HistorySynthetic carries a deterministic text of the reply's length,
	// so every run sends byte-identical requests. Token-id prompts always
	// use it.
	HistorySynthetic HistoryMode = "synthetic"
)

// Config is one replay: a workload sent to a target under a load profile.
type Config struct {
	// Label names the run in reports and plots, typically the routing
	// policy behind the target. Required.
	Label string `json:"label" yaml:"label"`
	// BaseURL is the target, e.g. "http://127.0.0.1:10000"; the API path is
	// appended. Required.
	BaseURL string `json:"base_url" yaml:"base_url"`
	// Seed makes the workload and the arrival times reproducible: the same
	// seed gives the same requests at the same offsets on every target.
	Seed     int64          `json:"seed" yaml:"seed"`
	Workload WorkloadConfig `json:"workload" yaml:"workload"`
	Load     LoadConfig     `json:"load" yaml:"load"`
	Clients  ClientConfig   `json:"clients" yaml:"clients"`
	// SLO judges each run and drives the goodput search, e.g.
	// "ttft:p90<=8s". Empty: a run meets it when every request succeeds.
	SLO SLO `json:"slo" yaml:"slo"`
	// Timeout bounds each request. Default 10m.
	Timeout Duration `json:"timeout,omitempty" yaml:"timeout"`
	// Headers are added to every request (e.g. to enable warmpath's debug
	// headers).
	Headers map[string]string `json:"headers,omitempty" yaml:"headers"`
	// History is response (default) or synthetic.
	History HistoryMode `json:"history,omitempty" yaml:"history"`
	// ProgressInterval is the least time between progress lines. Default 5s.
	ProgressInterval Duration `json:"progress_interval,omitempty" yaml:"progress_interval"`
}

// SetDefaults fills zero fields with their defaults.
func (c *Config) SetDefaults() {
	c.Workload.setDefaults()
	c.Load.setDefaults()
	if c.Clients.Mode == "" {
		c.Clients.Mode = ClientShared
	}
	if c.Clients.Count == 0 {
		c.Clients.Count = 1
	}
	if c.Timeout == 0 {
		c.Timeout = Duration(10 * time.Minute)
	}
	if c.History == "" {
		c.History = HistoryResponse
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = Duration(5 * time.Second)
	}
}

// Validate reports every problem in c, joined; each wraps ErrConfig.
func (c *Config) Validate() error {
	var errs []error
	if c.Label == "" {
		errs = append(errs, fieldErr("label", "required"))
	}
	if u, err := url.Parse(c.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fieldErr("base_url", "%q is not an http(s) URL", c.BaseURL))
	}
	switch c.Clients.Mode {
	case ClientShared, ClientSticky, ClientPerRequest, "":
	default:
		errs = append(errs, fieldErr("clients.mode", "unknown %q (shared, sticky, per-request)", c.Clients.Mode))
	}
	if c.Clients.Count < 0 {
		errs = append(errs, fieldErr("clients.count", "must be >= 0"))
	}
	if c.Timeout < 0 || c.ProgressInterval < 0 {
		errs = append(errs, fieldErr("timeout", "durations must be >= 0"))
	}
	switch c.History {
	case HistoryResponse, HistorySynthetic, "":
	default:
		errs = append(errs, fieldErr("history", "unknown %q (response, synthetic)", c.History))
	}
	if c.Load.Kind == LoadTrace && c.Workload.Kind != WorkloadMooncake && c.Workload.Kind != WorkloadAzure {
		errs = append(errs, fieldErr("load.kind", "trace needs a trace workload"))
	}
	errs = append(errs, c.Workload.Validate(), c.Load.Validate())
	return errors.Join(errs...)
}

// Option configures Run.
type Option func(*options)

type options struct {
	clock    Clock
	progress io.Writer
	logger   *slog.Logger
}

// WithClock makes Run take time from c instead of the wall clock.
func WithClock(c Clock) Option { return func(o *options) { o.clock = c } }

// WithProgress makes Run print rate-limited progress lines to w (normally
// stderr). Without it Run prints nothing.
func WithProgress(w io.Writer) Option { return func(o *options) { o.progress = w } }

// WithLogger sets the logger for run-level events. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// Run replays cfg's workload against cfg.BaseURL under cfg's load profile and
// returns the report. Sweeps and goodput searches run several times, one
// RunReport each. Failed requests are measured, not returned as errors; Run
// fails for an invalid config, an unreadable trace or a cancelled ctx (the
// report so far is returned with ctx's error).
func Run(ctx context.Context, cfg Config, opts ...Option) (*Report, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := options{clock: realClock{}, logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	sessions, err := Generate(cfg.Workload, cfg.Seed)
	if err != nil {
		return nil, fmt.Errorf("generate workload: %w", err)
	}
	if len(sessions) == 0 {
		return nil, fmt.Errorf("%w: workload: no requests", ErrConfig)
	}
	clients := newClients(cfg.Clients)
	defer func() {
		for _, c := range clients {
			c.CloseIdleConnections()
		}
	}()
	r := &runner{
		cfg:      cfg,
		clock:    o.clock,
		log:      o.logger,
		clients:  clients,
		endpoint: strings.TrimRight(cfg.BaseURL, "/") + cfg.Workload.API.Path(),
		sessions: sessions,
	}
	if o.progress != nil {
		r.progress = &progress{w: o.progress, clock: o.clock, interval: time.Duration(cfg.ProgressInterval), label: cfg.Label}
	}
	rep := &Report{
		Label: cfg.Label, Target: cfg.BaseURL, Seed: cfg.Seed, SLO: cfg.SLO,
		Workload: cfg.Workload, Load: cfg.Load, Clients: cfg.Clients, Started: o.clock.Now(),
	}
	err = r.plan(ctx, rep)
	rep.PeakGoodput = peakGoodput(rep.Runs)
	return rep, err
}

// runner executes runs. Its fields are read-only once built.
type runner struct {
	cfg      Config
	clock    Clock
	log      *slog.Logger
	clients  []*http.Client
	endpoint string
	sessions []Session
	progress *progress
}

// plan runs the load profile's basic runs in order, appending to rep.
func (r *runner) plan(ctx context.Context, rep *Report) error {
	l := r.cfg.Load
	do := func(spec runSpec) (RunReport, error) {
		seed := r.cfg.Seed
		sessions := r.sessions
		if (l.FreshPrefixes || l.FreshPrompts) && len(rep.Runs) > 0 {
			seed = r.cfg.Seed + int64(len(rep.Runs))
			w := r.cfg.Workload
			if l.FreshPrompts && !l.FreshPrefixes {
				w.PrefixSeed = w.prefixSeed(r.cfg.Seed)
			}
			var err error
			if sessions, err = Generate(w, seed); err != nil {
				return RunReport{}, fmt.Errorf("generate workload: %w", err)
			}
		}
		run, err := r.execute(ctx, spec, sessions, seed)
		rep.Runs = append(rep.Runs, run)
		r.log.Info("run finished", "label", r.cfg.Label, "run", run.Name,
			"requests", run.Summary.Requests, "failed", run.Summary.Failed,
			"ttft_p50_s", run.Summary.TTFT.P50, "slo_met", run.Summary.SLOMet)
		return run, err
	}
	switch l.Kind {
	case LoadSweep:
		rates := l.Rates
		if len(rates) == 0 {
			syncRun, err := do(runSpec{Kind: LoadSynchronous})
			if err != nil {
				return err
			}
			thr, err := do(runSpec{Kind: LoadThroughput, Concurrency: l.Concurrency})
			if err != nil {
				return err
			}
			rates = sweepRates(sessionRate(syncRun), sessionRate(thr), l.Steps)
		}
		for _, rate := range rates {
			if _, err := do(runSpec{Kind: l.Arrivals, Rate: rate, Concurrency: l.Concurrency}); err != nil {
				return err
			}
		}
		return nil
	case LoadGoodput:
		best, err := searchRate(l.MinRate, l.MaxRate, l.Iterations, func(rate float64) (bool, error) {
			run, err := do(runSpec{Kind: l.Arrivals, Rate: rate, Concurrency: l.Concurrency})
			return run.Summary.SLOMet, err
		})
		rep.SearchRate = best
		return err
	default:
		_, err := do(runSpec{Kind: l.Kind, Rate: l.Rate, Concurrency: l.Concurrency, TimeScale: l.TimeScale})
		return err
	}
}

// sessionRate is the session start rate a closed-loop run sustained.
func sessionRate(run RunReport) float64 {
	if run.Summary.Duration <= 0 {
		return 0
	}
	sessions := map[string]bool{}
	for _, res := range run.Requests {
		sessions[res.Session] = true
	}
	return float64(len(sessions)) / run.Summary.Duration
}

// execute performs one basic run.
func (r *runner) execute(ctx context.Context, spec runSpec, sessions []Session, seed int64) (RunReport, error) {
	run := RunReport{Name: spec.name(), Kind: spec.Kind, Concurrency: spec.Concurrency, Seed: seed}
	if !spec.closed() {
		run.Rate = spec.Rate
	}
	total := 0
	for _, s := range sessions {
		total += len(s.Turns)
	}
	r.progress.begin(run.Name, total)
	start := r.clock.Now()
	var deadline time.Time
	if r.cfg.Load.MaxDuration > 0 {
		deadline = start.Add(time.Duration(r.cfg.Load.MaxDuration))
	}
	col := &collector{}
	var wg sync.WaitGroup
	var runErr error
	if spec.closed() {
		next := make(chan int)
		for range spec.streams() {
			wg.Go(func() {
				for i := range next {
					if !deadline.IsZero() && !r.clock.Now().Before(deadline) {
						continue // past MaxDuration: drain without sending
					}
					r.session(ctx, start, start, &sessions[i], i, col)
				}
			})
		}
	feed:
		for i := range sessions {
			select {
			case next <- i:
			case <-ctx.Done():
				runErr = ctx.Err()
				break feed
			}
		}
		close(next)
	} else {
		at := arrivals(spec, sessions, seed)
		var slots chan struct{}
		if spec.Concurrency > 0 {
			slots = make(chan struct{}, spec.Concurrency)
		}
		for i := range sessions {
			due := start.Add(at[i])
			if !deadline.IsZero() && !due.Before(deadline) && i >= r.cfg.Load.MinSessions {
				break
			}
			if err := r.clock.SleepUntil(ctx, due); err != nil {
				runErr = err
				break
			}
			if slots != nil {
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					runErr = ctx.Err()
				}
				if runErr != nil {
					break
				}
			}
			wg.Go(func() {
				r.session(ctx, start, due, &sessions[i], i, col)
				if slots != nil {
					<-slots
				}
			})
		}
	}
	wg.Wait()
	r.progress.end()
	run.Requests = col.sorted()
	var elapsed time.Duration
	if !col.last.IsZero() {
		elapsed = col.last.Sub(start)
	}
	run.Summary = summarize(run.Requests, elapsed, r.cfg.SLO)
	if runErr != nil {
		return run, fmt.Errorf("run %s: %w", run.Name, runErr)
	}
	return run, nil
}

// collector gathers results from concurrent sessions.
type collector struct {
	mu      sync.Mutex
	results []Result
	last    time.Time
}

func (c *collector) add(res Result, end time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.results = append(c.results, res)
	if end.After(c.last) {
		c.last = end
	}
}

// sorted returns the results ordered by send time, then session and turn.
func (c *collector) sorted() []Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.results)
	slices.SortStableFunc(out, func(a, b Result) int {
		if a.Sent != b.Sent {
			return int(a.Sent - b.Sent)
		}
		if a.Session != b.Session {
			return strings.Compare(a.Session, b.Session)
		}
		return a.Turn - b.Turn
	})
	return out
}

// session sends s's turns in order on client slot mod the number of
// clients, waiting each turn's think time; it stops at the first failed turn
// or when ctx is done.
func (r *runner) session(ctx context.Context, start, scheduled time.Time, s *Session, slot int, col *collector) {
	client := r.clients[slot%len(r.clients)]
	clientIdx := slot % len(r.clients)
	var conv conversation
	for t := range s.Turns {
		turn := &s.Turns[t]
		if t > 0 && turn.Think > 0 {
			if r.clock.SleepUntil(ctx, r.clock.Now().Add(turn.Think)) != nil {
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
		body, err := requestBody(&r.cfg.Workload, s, t, &conv)
		sent := r.clock.Now()
		var ex exchangeResult
		if err != nil {
			ex.Result = Result{Error: err.Error(), PromptTokens: -1, CompletionTokens: -1, CachedTokens: -1}
		} else {
			rctx, cancel := context.WithTimeout(ctx, time.Duration(r.cfg.Timeout))
			ex = send(rctx, client, r.clock, r.endpoint, r.cfg.Workload.API, r.cfg.Headers, body)
			cancel()
		}
		res := ex.Result
		res.Session, res.Turn, res.Group, res.Client = s.ID, t, s.Group, clientIdx
		res.Scheduled, res.Sent = scheduled.Sub(start), sent.Sub(start)
		col.add(res, sent.Add(res.E2E))
		r.progress.record(res.OK())
		if !res.OK() {
			return
		}
		conv.turns = append(conv.turns, r.exchange(s, t, &ex))
	}
}

// exchange returns what turn t of s leaves in the conversation.
func (r *runner) exchange(s *Session, t int, ex *exchangeResult) exchange {
	n := ex.CompletionTokens
	if n < 0 {
		n = s.Turns[t].MaxTokens
	}
	synth := genText(newRand(r.cfg.Seed, hashString("reply"), hashString(s.ID), uint64(t)), n)
	e := exchange{user: s.Turns[t].User, reply: ex.reply, ids: synth.IDs()}
	if r.cfg.History == HistorySynthetic {
		e.reply = synth.String()
	}
	return e
}
