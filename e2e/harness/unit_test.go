package harness

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/e2e/replay"
	"github.com/warmpath/warmpath/envoy"
	"github.com/warmpath/warmpath/internal/app"
	"github.com/warmpath/warmpath/scoring"
)

func TestSumMetric(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		text    string
		want    float64
		wantErr bool
	}{
		{"labelled samples are summed", "# HELP x\nwarmpath_assignments_in_flight{worker=\"w0\"} 2\nwarmpath_assignments_in_flight{worker=\"w1\"} 3\n", 5, false},
		{"unlabelled sample", "warmpath_assignments_in_flight 4\n", 4, false},
		{"other metrics with the same prefix are ignored", "warmpath_assignments_in_flight_total 9\nwarmpath_assignments_in_flightx 1\n", 0, false},
		{"absent metric is zero", "go_goroutines 12\n", 0, false},
		{"label values may hold braces", "warmpath_assignments_in_flight{worker=\"a}b\"} 1\n", 1, false},
		{"no value is an error", "warmpath_assignments_in_flight{worker=\"w0\"}\n", 0, true},
		{"labels pick samples", "warmpath_assignments_in_flight{worker=\"w0\",state=\"x\"} 2\nwarmpath_assignments_in_flight{worker=\"w1\"} 3\n" +
			"warmpath_assignments_in_flight{worker=\"w0\",substate=\"x\"} 5\n", 2, false},
		{"bad number is an error", "warmpath_assignments_in_flight{worker=\"w0\"} many\n", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var labels []string
			if strings.HasPrefix(tc.name, "labels") {
				labels = []string{`worker="w0"`, `state="x"`}
			}
			got, err := sumMetric(strings.NewReader(tc.text), "warmpath_assignments_in_flight", labels...)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestToWallScalesSimulatedTime(t *testing.T) {
	t.Parallel()
	slo, err := replay.ParseSLO("ttft:p90<=8s")
	if err != nil {
		t.Fatal(err)
	}
	c := replay.Config{SLO: slo, Load: replay.LoadConfig{Kind: replay.LoadPoisson, Rate: 0.5, Rates: []float64{0.25, 1},
		MinRate: 0.1, MaxRate: 2, MaxDuration: replay.Duration(10 * time.Minute)}}
	c.Workload.Chat.Think = replay.DurationDist{Mean: replay.Duration(20 * time.Second)}
	w := ToWall(c, 20)
	tests := []struct {
		name      string
		got, want float64
	}{
		{"slo limit", w.SLO.Objectives[0].Max.Seconds(), 0.4},
		{"rate", w.Load.Rate, 10},
		{"sweep rates", w.Load.Rates[1], 20},
		{"search bounds", w.Load.MaxRate, 40},
		{"max duration", time.Duration(w.Load.MaxDuration).Seconds(), 30},
		{"think time", time.Duration(w.Workload.Chat.Think.Mean).Seconds(), 1},
		{"trace time scale", w.Load.TimeScale, 20},
		{"input slo untouched", c.SLO.Objectives[0].Max.Seconds(), 8},
		{"input rates untouched", c.Load.Rates[1], 1},
	}
	for _, tc := range tests {
		if math.Abs(tc.got-tc.want) > 1e-9 {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestToSimUndoesToWall(t *testing.T) {
	t.Parallel()
	slo, _ := replay.ParseSLO("ttft:p90<=8s")
	wallCfg := ToWall(replay.Config{SLO: slo, Load: replay.LoadConfig{Kind: replay.LoadPoisson, Rate: 0.5}}, 10)
	rep := &replay.Report{SLO: wallCfg.SLO, Load: wallCfg.Load, PeakGoodput: 600, Runs: []replay.RunReport{{
		Rate: 5,
		Summary: replay.Summary{Duration: 30, RequestsPerMinute: 600, RequestRate: 10, Goodput: 9,
			TTFT: replay.Stats{P50: 0.05, P90: 0.3}, E2E: replay.Stats{P50: 1}},
		Requests: []replay.Result{{TTFT: 50 * time.Millisecond, E2E: time.Second, Sent: 2 * time.Second}},
	}}}
	s := ToSim(rep, 10)
	run := s.Runs[0]
	tests := []struct {
		name      string
		got, want float64
	}{
		{"slo back in simulated time", s.SLO.Objectives[0].Max.Seconds(), 8},
		{"load rate", s.Load.Rate, 0.5},
		{"run rate", run.Rate, 0.5},
		{"peak goodput", s.PeakGoodput, 60},
		{"duration", run.Summary.Duration, 300},
		{"requests per minute", run.Summary.RequestsPerMinute, 60},
		{"goodput", run.Summary.Goodput, 0.9},
		{"ttft p50", run.Summary.TTFT.P50, 0.5},
		{"ttft p90", run.Summary.TTFT.P90, 3},
		{"request ttft", run.Requests[0].TTFT.Seconds(), 0.5},
		{"request sent", run.Requests[0].Sent.Seconds(), 20},
		{"wall report untouched", rep.Runs[0].Requests[0].TTFT.Seconds(), 0.05},
	}
	for _, tc := range tests {
		if math.Abs(tc.got-tc.want) > 1e-9 {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestMeasureAccuracy(t *testing.T) {
	t.Parallel()
	rec := func(seq int, pred, got time.Duration, pc, gc int, end scoring.End) Record {
		return Record{Seq: seq, PredictedTTFT: pred, PredictedCached: pc,
			Outcome: scoring.Outcome{End: end, TTFT: got, CachedTokens: gc}}
	}
	ms := time.Millisecond
	tests := []struct {
		name      string
		rs        []Record
		warmup    int
		wantN     int
		wantMed   float64
		wantExact float64
	}{
		{"warm-up and unfinished requests are left out", []Record{
			rec(0, 10*ms, 100*ms, 0, 5, scoring.EndCompleted), // warm-up
			rec(1, 110*ms, 100*ms, 16, 16, scoring.EndCompleted),
			rec(2, 90*ms, 100*ms, 32, 16, scoring.EndCompleted),
			rec(3, 500*ms, 100*ms, 0, 0, scoring.EndAborted),
		}, 1, 2, 10, 0.5},
		{"no prediction counts for cached tokens only", []Record{
			rec(0, 0, 100*ms, 0, 0, scoring.EndCompleted),
			rec(1, 0, 100*ms, 0, 16, scoring.EndCompleted),
		}, 0, 0, math.NaN(), 0.5},
		{"unreported cached tokens are not judged", []Record{
			rec(0, 150*ms, 100*ms, 0, -1, scoring.EndCompleted),
		}, 0, 1, 50, math.NaN()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := MeasureAccuracy(tc.rs, tc.warmup)
			if a.TTFTSamples != tc.wantN || !sameFloat(a.MedianAPE, tc.wantMed) || !sameFloat(a.CachedExact, tc.wantExact) {
				t.Fatalf("got %+v, want %d samples, median %v, exact %v", a, tc.wantN, tc.wantMed, tc.wantExact)
			}
		})
	}
}

// TestMeasureAccuracyDrain checks that TPOT counts the responses that
// ended by the last decision and counts the others apart, while TTFT
// counts both.
func TestMeasureAccuracyDrain(t *testing.T) {
	t.Parallel()
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	ms := time.Millisecond
	// Each response: 11 tokens, 100 ms of decode (10 ms per token); the
	// prediction is 11 ms (10% over) under load, 20 ms (100% over) for the
	// ones that decode after the last decision, alone.
	rec := func(seq, decided, ended int, tpot time.Duration) Record {
		return Record{Seq: seq, PredictedTTFT: 110 * ms, Decided: at(decided), Ended: at(ended),
			Chosen:  scoring.Candidate{PredictedTPOT: tpot},
			Outcome: scoring.Outcome{End: scoring.EndCompleted, TTFT: 100 * ms, Decode: 100 * ms, CompletionTokens: 11, CachedTokens: -1}}
	}
	rs := []Record{
		rec(0, 1, 3, 11*ms),
		rec(1, 2, 4, 11*ms),
		rec(2, 5, 5, 11*ms), // ends at the last decision: under load
		rec(3, 4, 6, 20*ms),
		rec(4, 5, 7, 20*ms), // the last decision
	}
	a := MeasureAccuracy(rs, 0)
	if a.TTFTSamples != 5 || a.TPOTSamples != 3 || a.TPOTDrained != 2 {
		t.Fatalf("samples: TTFT %d, TPOT %d, drained %d; want 5, 3, 2", a.TTFTSamples, a.TPOTSamples, a.TPOTDrained)
	}
	if !sameFloat(a.TPOTMedianAPE, 10) || !sameFloat(a.TPOTP90APE, 10) || !sameFloat(a.TPOTAllMedianAPE, 10) || !sameFloat(a.TPOTAllP90APE, 100) {
		t.Fatalf("TPOT error %v / %v, with the drained %v / %v; want 10 / 10, 10 / 100",
			a.TPOTMedianAPE, a.TPOTP90APE, a.TPOTAllMedianAPE, a.TPOTAllP90APE)
	}
	// Records without times (older decision logs) count whole.
	for i := range rs {
		rs[i].Decided, rs[i].Ended = time.Time{}, time.Time{}
	}
	if a := MeasureAccuracy(rs, 0); a.TPOTSamples != 5 || a.TPOTDrained != 0 {
		t.Fatalf("untimed records: TPOT %d, drained %d; want 5, 0", a.TPOTSamples, a.TPOTDrained)
	}
}

// TestPoolAccuracy checks that pooled runs keep their own warm-up and
// last decision, and that keep selects the records counted.
func TestPoolAccuracy(t *testing.T) {
	t.Parallel()
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	ms := time.Millisecond
	rec := func(seq, decided, ended int, ttft time.Duration, ahead int) Record {
		return Record{Seq: seq, PredictedTTFT: 100 * ms, Decided: at(decided), Ended: at(ended),
			Chosen:  scoring.Candidate{PredictedTPOT: 11 * ms, WorkAhead: ahead},
			Outcome: scoring.Outcome{End: scoring.EndCompleted, TTFT: ttft, Decode: 100 * ms, CompletionTokens: 11, CachedTokens: -1}}
	}
	// Two runs of three decisions; the first of each is its warm-up. The
	// second run's clock is far behind the first's: its last decision (at
	// 3) must not be taken from the first run (at 103), or its response
	// ending at 9 would count as under load.
	a := []Record{rec(0, 100, 101, 50*ms, 0), rec(1, 102, 103, 80*ms, 0), rec(2, 103, 104, 125*ms, 4000)}
	b := []Record{rec(0, 1, 2, 50*ms, 0), rec(1, 2, 3, 200*ms, 2000), rec(2, 3, 9, 100*ms, 0)}
	p := PoolAccuracy([][]Record{a, b}, 1, nil)
	// TTFT errors: +25%, −20%, −50%, 0%.
	if p.TTFTSamples != 4 || !sameFloat(p.MedianAPE, 22.5) || !sameFloat(p.MedianBias, -10) {
		t.Errorf("pooled TTFT: %d samples, median %v, bias %v; want 4, 22.5, −10", p.TTFTSamples, p.MedianAPE, p.MedianBias)
	}
	if p.TPOTSamples != 2 || p.TPOTDrained != 2 {
		t.Errorf("pooled TPOT: %d under load, %d drained; want 2, 2", p.TPOTSamples, p.TPOTDrained)
	}
	queued := PoolAccuracy([][]Record{a, b}, 1, func(r Record) bool { return r.Chosen.WorkAhead > 500 })
	// Of the two queued requests: −20% and −50%.
	if queued.TTFTSamples != 2 || !sameFloat(queued.MedianAPE, 35) {
		t.Errorf("queued: %d samples, median %v; want 2, 35", queued.TTFTSamples, queued.MedianAPE)
	}
	// Printed, so that NaN fields compare equal.
	if one, pooled := fmt.Sprintf("%+v", MeasureAccuracy(a, 1)), fmt.Sprintf("%+v", PoolAccuracy([][]Record{a}, 1, nil)); one != pooled {
		t.Errorf("one run pooled: %s; measured alone: %s", pooled, one)
	}
}

func sameFloat(a, b float64) bool {
	return (math.IsNaN(a) && math.IsNaN(b)) || math.Abs(a-b) < 1e-9
}

// fakePicker picks the first worker and counts the calls it received.
type fakePicker struct {
	picks, dones, firsts int
	err                  error
}

func (f *fakePicker) Pick(_ context.Context, req *scoring.Request, ws scoring.Workers) (*scoring.Decision, error) {
	if f.err != nil {
		return nil, f.err
	}
	f.picks++
	return &scoring.Decision{Worker: ws[0].Name, PromptTokens: len(req.TokenIDs),
		Chosen: scoring.Candidate{PredictedTTFT: time.Duration(f.picks) * time.Millisecond, CachedTokens: 16}}, nil
}

func (f *fakePicker) Done(*scoring.Decision, scoring.Outcome) { f.dones++ }
func (f *fakePicker) FirstToken(*scoring.Decision)            { f.firsts++ }

func TestRecorder(t *testing.T) {
	t.Parallel()
	inner := &fakePicker{}
	r := NewRecorder(inner)
	clock := time.Unix(1000, 0)
	r.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	ws := scoring.Workers{{Name: "w0"}}
	var ds []*scoring.Decision
	for range 3 {
		d, err := r.Pick(t.Context(), &scoring.Request{TokenIDs: []uint32{1, 2}}, ws)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	r.FirstToken(ds[0])
	// End out of order; records come back in decision order.
	r.Done(ds[2], scoring.Outcome{End: scoring.EndCompleted, TTFT: 3 * time.Millisecond})
	r.Done(ds[0], scoring.Outcome{End: scoring.EndAborted})
	if r.Pending() != 1 {
		t.Fatalf("pending %d, want 1", r.Pending())
	}
	got := r.Records()
	if len(got) != 2 || got[0].Seq != 0 || got[1].Seq != 2 || got[1].PredictedTTFT != 3*time.Millisecond ||
		got[1].PredictedCached != 16 || got[1].PromptTokens != 2 || got[0].Outcome.End != scoring.EndAborted {
		t.Fatalf("records %+v", got)
	}
	// Decisions at 1001–1003 s; ds[2] ended at 1004 s, ds[0] at 1005 s.
	if !got[0].Decided.Equal(time.Unix(1001, 0)) || !got[0].Ended.Equal(time.Unix(1005, 0)) ||
		!got[1].Decided.Equal(time.Unix(1003, 0)) || !got[1].Ended.Equal(time.Unix(1004, 0)) {
		t.Fatalf("times %v–%v and %v–%v", got[0].Decided, got[0].Ended, got[1].Decided, got[1].Ended)
	}
	if inner.dones != 2 || inner.firsts != 1 {
		t.Fatalf("inner saw %d dones and %d first tokens", inner.dones, inner.firsts)
	}
	inner.err = errors.New("no workers")
	if _, err := r.Pick(t.Context(), &scoring.Request{}, ws); err == nil || r.Pending() != 1 {
		t.Fatalf("error not passed on (err %v, pending %d)", err, r.Pending())
	}
}

func TestSetupValidate(t *testing.T) {
	t.Parallel()
	ok := Setup{Workers: []WorkerSpec{{Name: "w0", Profile: "test"}}, TimeScale: 1, EnvoyBin: "envoy", Bootstrap: "b.yaml"}
	tests := []struct {
		name   string
		mutate func(*Setup)
		want   string
	}{
		{"valid", func(*Setup) {}, ""},
		{"no workers", func(s *Setup) { s.Workers = nil }, "no workers"},
		{"repeated name", func(s *Setup) { s.Workers = append(s.Workers, s.Workers[0]) }, "repeated"},
		{"unknown profile", func(s *Setup) { s.Workers = []WorkerSpec{{Name: "w0", Profile: "h200"}} }, "unknown profile"},
		{"bad time scale", func(s *Setup) { s.TimeScale = -1 }, "time scale"},
		{"no envoy", func(s *Setup) { s.EnvoyBin = "" }, "envoy"},
		{"negative replicas", func(s *Setup) { s.Replicas = -1 }, "replicas"},
		{"sharing alone", func(s *Setup) { s.Replicas, s.SharePeers = 1, true }, "at least 2 replicas"},
		{"sharing replicas", func(s *Setup) { s.Replicas, s.SharePeers = 2, true }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := ok
			s.Workers = append([]WorkerSpec(nil), ok.Workers...)
			tc.mutate(&s)
			err := s.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestSendLag(t *testing.T) {
	t.Parallel()
	run := replay.RunReport{}
	for i := range 10 {
		run.Requests = append(run.Requests, replay.Result{Scheduled: time.Second, Sent: time.Second + time.Duration(i)*time.Millisecond})
	}
	tests := []struct {
		name string
		q    float64
		want float64
	}{
		{"median", 0.5, 0.005},
		{"p90", 0.9, 0.009},
		{"max", 1, 0.009},
	}
	for _, tc := range tests {
		if got := SendLag(run, tc.q); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	// A closed loop's requests go when a stream is free: no schedule.
	run.Kind = replay.LoadConcurrent
	run.Requests[9].Sent = time.Hour
	if got := SendLag(run, 0.9); !math.IsNaN(got) {
		t.Errorf("closed loop: send lag %v, want NaN", got)
	}
	if (PolicyResult{Report: &replay.Report{Runs: []replay.RunReport{run}}}).FellBehind() {
		t.Error("a closed loop fell behind a schedule it does not have")
	}
}

func TestFellBehind(t *testing.T) {
	t.Parallel()
	late := func(d time.Duration) *replay.Report {
		run := replay.RunReport{}
		for range 10 {
			run.Requests = append(run.Requests, replay.Result{Scheduled: time.Second, Sent: time.Second + d})
		}
		return &replay.Report{Runs: []replay.RunReport{run}}
	}
	tests := []struct {
		name string
		r    PolicyResult
		want bool
	}{
		{"on time", PolicyResult{Report: late(10 * time.Millisecond), StepLag: 5 * time.Millisecond}, false},
		{"sent late", PolicyResult{Report: late(2 * time.Second)}, true},
		{"steps late", PolicyResult{Report: late(0), StepLag: 150 * time.Millisecond}, true},
		{"no run", PolicyResult{Report: &replay.Report{}}, false},
	}
	for _, tc := range tests {
		if got := tc.r.FellBehind(); got != tc.want {
			t.Errorf("%s: FellBehind %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRecordersShareSequence: a stack's replicas number their decisions
// from one sequence, so their merged records read in decision order and
// say which replica decided.
func TestRecordersShareSequence(t *testing.T) {
	t.Parallel()
	seq := new(atomic.Int64)
	a, b := newReplicaRecorder(&fakePicker{}, 0, seq), newReplicaRecorder(&fakePicker{}, 1, seq)
	ws := scoring.Workers{{Name: "w0"}}
	deciders := []*Recorder{a, b, b, a}
	var ds []*scoring.Decision
	for _, r := range deciders {
		d, err := r.Pick(t.Context(), &scoring.Request{}, ws)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	for i := len(ds) - 1; i >= 0; i-- { // they end last first
		deciders[i].Done(ds[i], scoring.Outcome{End: scoring.EndCompleted})
	}
	got := mergeRecords(a, b)
	var replicas []int
	for i, r := range got {
		if r.Seq != i {
			t.Fatalf("record %d has seq %d: %+v", i, r.Seq, got)
		}
		replicas = append(replicas, r.Replica)
	}
	if !slices.Equal(replicas, []int{0, 1, 1, 0}) {
		t.Fatalf("replicas in decision order %v, want [0 1 1 0]", replicas)
	}
}

func TestReplicaName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		i, n int
		want string
	}{{0, 1, "warmpath"}, {0, 2, "warmpath-0"}, {3, 4, "warmpath-3"}} {
		if got := replicaName(tc.i, tc.n); got != tc.want {
			t.Errorf("replicaName(%d, %d) = %q, want %q", tc.i, tc.n, got, tc.want)
		}
	}
}

// TestReplicaConfig: with a token every replica shares its ledger with the
// earlier ones, and its configuration owns its slices; without, it is the
// base configuration.
func TestReplicaConfig(t *testing.T) {
	t.Parallel()
	token := filepath.Join(t.TempDir(), "peer-token")
	if err := writeToken(token); err != nil {
		t.Fatal(err)
	}
	base := app.DefaultConfig()
	base.Workers = []discovery.Worker{{Name: "w0"}}
	earlier := []string{"127.0.0.1:1001", "127.0.0.1:1002"}
	cfg := replicaConfig(base, token, earlier)
	if cfg.Peers.TokenFile != token || !slices.Equal(cfg.Peers.Static, earlier) || !cfg.Peers.Enabled() {
		t.Fatalf("peers %+v", cfg.Peers)
	}
	if err := cfg.Peers.Validate(); err != nil {
		t.Fatalf("peers section invalid: %v", err)
	}
	earlier[0] = "changed:1"
	cfg.Workers[0].Name = "mine"
	if cfg.Peers.Static[0] != "127.0.0.1:1001" || base.Workers[0].Name != "w0" {
		t.Fatal("replica configuration shares slices with its inputs")
	}
	if alone := replicaConfig(base, "", nil); alone.Peers.Enabled() || len(alone.Peers.Static) != 0 {
		t.Fatalf("no token, peers %+v", alone.Peers)
	}
}

// TestPointWarmpath: the bootstrap's warmpath cluster gets one endpoint per
// replica, each keeping the committed endpoint's other settings.
func TestPointWarmpath(t *testing.T) {
	t.Parallel()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bs, err := envoy.LoadBootstrap(filepath.Join(root, "envoy/envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	addrs := []string{"127.0.0.1:4001", "127.0.0.1:4002", "[::1]:4003"}
	if err := pointWarmpath(bs, addrs); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range bs.StaticResources.Clusters {
		if c.Name == "warmpath" {
			for _, ep := range c.LoadAssignment.Endpoints[0].LbEndpoints {
				sa := ep.GetEndpoint().Address.GetSocketAddress()
				got = append(got, net.JoinHostPort(sa.Address, strconv.Itoa(int(sa.GetPortValue()))))
			}
		}
	}
	if !slices.Equal(got, addrs) {
		t.Fatalf("endpoints %v, want %v", got, addrs)
	}
	if err := pointWarmpath(bs, []string{"no-port"}); err == nil {
		t.Fatal("an address without a port was accepted")
	}
}

func TestUnhealthyHosts(t *testing.T) {
	t.Parallel()
	text := "warmpath::observability_name::warmpath\n" +
		"warmpath::127.0.0.1:4001::health_flags::healthy\n" +
		"warmpath::127.0.0.1:4002::health_flags::/failed_active_hc\n" +
		"other::127.0.0.1:4003::health_flags::healthy\n"
	got, err := unhealthyHosts(strings.NewReader(text), "warmpath", []string{"127.0.0.1:4001", "127.0.0.1:4002", "127.0.0.1:4003"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"127.0.0.1:4002", "127.0.0.1:4003"}) {
		t.Fatalf("unhealthy %v, want the failed one and the unlisted one", got)
	}
}

func TestObjectivePolicies(t *testing.T) {
	t.Parallel()
	ps := Policies("warmpath", "warmpath-ttft", "warmpath-slo", "oracle")
	if ps[0].Config != nil || ps[0].Label != "" || ps[3].Picker == nil {
		t.Fatalf("plain policies changed: %+v", ps)
	}
	for i, obj := range []scoring.Objective{scoring.ObjectiveTTFT, scoring.ObjectiveSLO} {
		p := ps[i+1]
		if p.Name != scoring.PolicyWarmpath || p.Label != "warmpath-"+string(obj) || p.Config == nil {
			t.Fatalf("%s: %+v", obj, p)
		}
		cfg := app.DefaultConfig()
		p.Config(&cfg, 5)
		if cfg.Scoring.Objective != obj {
			t.Errorf("%s: objective %q", p.Label, cfg.Scoring.Objective)
		}
	}
	p := WithTargets(ps[2], scoring.SLO{TTFT: 2 * time.Second, TPOT: 50 * time.Millisecond})
	cfg := app.DefaultConfig()
	p.Config(&cfg, 5)
	if cfg.Scoring.Objective != scoring.ObjectiveSLO || cfg.Scoring.DefaultSLO != (scoring.SLO{TTFT: 400 * time.Millisecond, TPOT: 10 * time.Millisecond}) {
		t.Errorf("targets at time scale 5: %+v, objective %q", cfg.Scoring.DefaultSLO, cfg.Scoring.Objective)
	}
	for _, n := range []string{"warmpath-fastest", "warmpath-", "fastest"} {
		if IsPolicy(n) {
			t.Errorf("IsPolicy(%q)", n)
		}
	}
}
