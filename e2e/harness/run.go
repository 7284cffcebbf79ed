package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"time"

	"github.com/warmpath/warmpath/e2e/replay"
)

// SendLag is the q-quantile of how late the replayer sent a run's requests
// against their schedule, in seconds (simulated, in a converted report):
// the client side of the harness's fidelity. A closed loop (synchronous,
// concurrent, throughput) sends each request when a stream is free, on no
// schedule, and has no send lag: NaN, as for a run without requests.
func SendLag(run replay.RunReport, q float64) float64 {
	switch run.Kind {
	case replay.LoadSynchronous, replay.LoadConcurrent, replay.LoadThroughput:
		return math.NaN()
	}
	if len(run.Requests) == 0 {
		return math.NaN()
	}
	lags := make([]float64, len(run.Requests))
	for i, r := range run.Requests {
		lags[i] = (r.Sent - r.Scheduled).Seconds()
	}
	slices.Sort(lags)
	return lags[min(int(q*float64(len(lags))), len(lags)-1)]
}

// FellBehind reports whether the harness could not keep r's first run on
// schedule (the machine too busy): client send lag p90 over 1 s or mean
// engine step lag over 100 ms, simulated. Such a run says little about the
// policy.
func (r PolicyResult) FellBehind() bool {
	return (len(r.Report.Runs) > 0 && SendLag(r.Report.Runs[0], 0.9) > 1) || r.StepLag > 100*time.Millisecond
}

// PolicyResult is one policy's run of a workload.
type PolicyResult struct {
	// Policy is the run's label: the policy's Label, or else its Name.
	Policy string
	// Replicas is how many warmpath replicas routed, and SharedPeers
	// whether they shared their ledgers (Setup.Replicas, SharePeers).
	Replicas    int
	SharedPeers bool
	// Report is the replayer's report converted to simulated time (every
	// latency multiplied by the time scale, every rate divided by it).
	Report *replay.Report
	// Leaked is warmpath_assignments_in_flight after the run drained: it
	// must be 0.
	Leaked float64
	// Records are warmpath's decisions next to their outcomes, in wall
	// time, in decision order.
	Records []Record
	// LogDir holds every process's log of this run.
	LogDir string
	// StepLag is the simulators' mean engine step lag in simulated time:
	// how late, on average, a step started against its schedule because
	// the machine was busy (vllmsim_step_lag_seconds, times the time scale).
	// It is the harness's fidelity: every step effectively lasted this much
	// longer than the profile says.
	StepLag time.Duration
	// KVEvents is the number of KV-cache events warmpath's index applied
	// (warmpath_kvindex_events_total), summed over replicas; a run that
	// completed requests with a replica that applied none is an error.
	KVEvents float64
	// PeerBytesSent is the bytes of ledger frames the replicas sent one
	// another (warmpath_peer_bytes_total{direction="sent"}, summed over
	// replicas: a frame sent to two followers counts twice); 0 without
	// sharing.
	PeerBytesSent float64
}

// Options tune RunPolicies.
type Options struct {
	// Progress, when set, receives the replayer's progress lines and one
	// line per policy.
	Progress io.Writer
	// DrainTimeout bounds the wait for warmpath's in-flight assignments to
	// reach zero after the replayer finished. Default 15s.
	DrainTimeout time.Duration
}

// RunPolicies runs the replay workload rc once per policy, each on a fresh
// stack (new simulators with empty caches and the same seeds, a new
// warmpath, a new Envoy), with the same seed and arrivals. rc is written in
// simulated time (rates, SLO limits, think times, durations); the harness
// converts it to wall time with setup.TimeScale and converts the reports
// back. Logs go to logDir/<label>/ (Policy.Label, or else its Name) and are kept. It stops at the first
// policy whose stack fails to start or whose replay fails; results so far
// are returned with the error.
func RunPolicies(ctx context.Context, setup Setup, policies []Policy, rc replay.Config, logDir string, opt Options) ([]PolicyResult, error) {
	setup.setDefaults()
	if opt.DrainTimeout == 0 {
		opt.DrainTimeout = 15 * time.Second
	}
	var out []PolicyResult
	for _, p := range policies {
		// Let earlier stacks' garbage go before the run, so its collection
		// does not stall this run's simulators.
		runtime.GC()
		debug.FreeOSMemory()
		res, err := RunPolicy(ctx, setup, p, rc, filepath.Join(logDir, p.label()), opt)
		if res != nil {
			out = append(out, *res)
		}
		if err != nil {
			return out, fmt.Errorf("policy %s: %w", p.label(), err)
		}
	}
	return out, nil
}

// RunPolicy runs rc against one fresh stack for policy; see RunPolicies.
func RunPolicy(ctx context.Context, setup Setup, policy Policy, rc replay.Config, logDir string, opt Options) (*PolicyResult, error) {
	setup.setDefaults()
	if opt.DrainTimeout == 0 {
		opt.DrainTimeout = 15 * time.Second
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("log dir: %w", err)
	}
	st, err := Start(ctx, setup, policy, logDir)
	if err != nil {
		return nil, err
	}
	wall := ToWall(rc, setup.TimeScale)
	wall.Label, wall.BaseURL = policy.label(), st.URL
	var ropts []replay.Option
	if opt.Progress != nil {
		fmt.Fprintf(opt.Progress, "harness: policy %s: envoy %s, warmpath admin %s, logs %s\n", policy.label(), st.URL, st.Admin, logDir)
		ropts = append(ropts, replay.WithProgress(opt.Progress))
	}
	rep, runErr := replay.Run(ctx, wall, ropts...)
	leaked, idleErr := st.WaitIdle(ctx, opt.DrainTimeout)
	res := &PolicyResult{Policy: policy.label(), Replicas: setup.Replicas, SharedPeers: setup.SharePeers, Leaked: leaked, LogDir: logDir}
	if lag, err := st.StepLag(ctx); err == nil {
		res.StepLag = time.Duration(float64(lag) * setup.TimeScale)
	}
	snapErr := st.Snapshot(ctx)
	// Every scenario's requests store blocks; an index that saw no event
	// routed on speculation alone and the run measures the wrong thing.
	succeeded := 0
	if rep != nil {
		for _, r := range rep.Runs {
			succeeded += r.Summary.Succeeded
		}
	}
	var kvErr error
	if events, fewest, err := st.KVEvents(ctx); err != nil {
		kvErr = err
	} else if res.KVEvents = events; fewest == 0 && succeeded > 0 {
		kvErr = errors.New("warmpath applied no KV events: the simulators' events never reached its index")
	}
	var peerErr error
	res.PeerBytesSent, peerErr = st.PeerBytesSent(ctx)
	res.Records = st.Records()
	closeErr := st.Close()
	if rep != nil {
		res.Report = ToSim(rep, setup.TimeScale)
	}
	if err := errors.Join(runErr, idleErr, snapErr, kvErr, peerErr, closeErr); err != nil {
		return res, fmt.Errorf("%w (logs in %s)", err, logDir)
	}
	return res, nil
}

// ToWall converts a replay config written in simulated time to wall time
// for simulators running scale times faster: rates are multiplied by scale,
// durations (SLO limits, think times, time limits) divided by it.
func ToWall(c replay.Config, scale float64) replay.Config {
	div := func(d replay.Duration) replay.Duration { return replay.Duration(float64(d) / scale) }
	c.SLO = scaleSLO(c.SLO, 1/scale)
	c.Load.Rate *= scale
	c.Load.Rates = scaleFloats(c.Load.Rates, scale)
	c.Load.MinRate *= scale
	c.Load.MaxRate *= scale
	if c.Load.TimeScale != 0 {
		c.Load.TimeScale *= scale
	} else {
		c.Load.TimeScale = scale
	}
	c.Load.MaxDuration = div(c.Load.MaxDuration)
	for _, d := range []*replay.DurationDist{&c.Workload.Chat.Think, &c.Workload.Coding.Think} {
		d.Mean, d.Stdev, d.Min, d.Max = div(d.Mean), div(d.Stdev), div(d.Min), div(d.Max)
	}
	return c
}

func scaleFloats(xs []float64, k float64) []float64 {
	if xs == nil {
		return nil
	}
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = x * k
	}
	return out
}

func scaleSLO(s replay.SLO, k float64) replay.SLO {
	out := replay.SLO{Objectives: slices.Clone(s.Objectives)}
	for i := range out.Objectives {
		out.Objectives[i].Max = time.Duration(float64(out.Objectives[i].Max) * k)
	}
	return out
}

// ToSim returns a copy of a wall-time report in simulated time: every
// latency and offset multiplied by scale, every rate divided by it, and the
// load and SLO as the caller wrote them in simulated time. Quantiles and
// goodput counts are unchanged by a common factor, so the copy equals what
// the replayer would have measured against simulators at scale 1.
func ToSim(r *replay.Report, scale float64) *replay.Report {
	mul := func(d time.Duration) time.Duration { return time.Duration(float64(d) * scale) }
	out := *r
	out.SLO = scaleSLO(r.SLO, scale)
	out.Load.Rate /= scale
	out.Load.Rates = scaleFloats(r.Load.Rates, 1/scale)
	out.Load.MinRate /= scale
	out.Load.MaxRate /= scale
	out.Load.TimeScale /= scale
	out.Load.MaxDuration = replay.Duration(float64(r.Load.MaxDuration) * scale)
	out.PeakGoodput /= scale
	out.SearchRate /= scale
	out.Runs = make([]replay.RunReport, len(r.Runs))
	for i, run := range r.Runs {
		run.Rate /= scale
		s := run.Summary
		s.Duration *= scale
		s.RequestRate /= scale
		s.RequestsPerMinute /= scale
		s.Goodput /= scale
		s.TTFT, s.ITL, s.E2E = scaleStats(s.TTFT, scale), scaleStats(s.ITL, scale), scaleStats(s.E2E, scale)
		run.Summary = s
		reqs := make([]replay.Result, len(run.Requests))
		for j, q := range run.Requests {
			q.Scheduled, q.Sent, q.TTFT, q.ITL, q.E2E = mul(q.Scheduled), mul(q.Sent), mul(q.TTFT), mul(q.ITL), mul(q.E2E)
			reqs[j] = q
		}
		run.Requests = reqs
		out.Runs[i] = run
	}
	return &out
}

func scaleStats(s replay.Stats, k float64) replay.Stats {
	s.Mean, s.P50, s.P90, s.P95, s.P99, s.Max = s.Mean*k, s.P50*k, s.P90*k, s.P95*k, s.P99*k, s.Max*k
	return s
}
