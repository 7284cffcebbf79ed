package eppconformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Target is the endpoint picker under test.
type Target struct {
	// Name labels its column in the report.
	Name string
	// ExtProc is the host:port of its ext_proc gRPC service (plaintext).
	ExtProc string
	// Health lists where its gRPC health services are (a service passes
	// when one of them answers SERVING); empty means ExtProc.
	Health []string
	// Shed, when set, is the ext_proc address of the same picker
	// configured to shed every request, for reject/429-body.
	Shed string
	// Notes are printed under the report's table for this target: how it
	// was run.
	Notes []string
	// Why says, by case ID, why this picker fails a case where its runner
	// knows (from the picker's source or the data plane's log); the report
	// prints it after the failure's detail. The suite itself only sees the
	// symptom.
	Why map[string]string
}

func (t *Target) healthAddrs() []string {
	if len(t.Health) > 0 {
		return t.Health
	}
	return []string{t.ExtProc}
}

// Options is what Run needs besides the target.
type Options struct {
	// Pool is the set of backends the picker picks from (it must be
	// configured with exactly Pool.Endpoints).
	Pool *Pool
	// Envoy is the Envoy binary, Dir a working directory for it and Log
	// where its output goes.
	Envoy string
	Dir   string
	Log   io.Writer
	// DataPlane is the processing mode of the data plane's main listeners
	// (default FullDuplex); the FULL_DUPLEX_STREAMED and BUFFERED cases
	// keep their own.
	DataPlane DataPlane
	// Only, when not nil, selects the cases to run by ID.
	Only func(id string) bool
	// CaseTimeout, when positive, bounds each case; zero leaves only the
	// deadline of Run's context.
	CaseTimeout time.Duration
}

// Status is a case's result.
type Status string

// Results.
const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip"
)

// CaseResult is one case run against one target.
type CaseResult struct {
	Case   Case
	Status Status
	// Detail says why it failed or was skipped.
	Detail  string
	Elapsed time.Duration
}

// Result is the suite run against one target.
type Result struct {
	Target Target
	Cases  []CaseResult
}

// Failed returns the cases of level that failed.
func (r *Result) Failed(levels ...Level) []CaseResult {
	var out []CaseResult
	for _, c := range r.Cases {
		if c.Status == Fail && (len(levels) == 0 || contains(levels, c.Case.Level)) {
			out = append(out, c)
		}
	}
	return out
}

func contains(ls []Level, l Level) bool {
	for _, x := range ls {
		if x == l {
			return true
		}
	}
	return false
}

// env is what the cases share: the target, the pool, the data plane and
// clients of both.
type env struct {
	target Target
	pool   *Pool
	dp     *dataPlane
	http   *http.Client
	h2c    *http.Client
	conn   *grpc.ClientConn
	// walked is what fallback/walk saw, for served/after-retry.
	walked *walk
}

func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
}

// Run starts the data plane in front of the target and the pool, runs the
// cases in order and stops it. It fails only when the data plane cannot be
// started; every case's own failure is in the Result.
func Run(ctx context.Context, t Target, o Options) (*Result, error) {
	cfg, err := bootstrap(t.ExtProc, t.Shed, o.Pool, o.DataPlane)
	if err != nil {
		return nil, err
	}
	dp, err := startDataPlane(ctx, o.Envoy, o.Dir, cfg, o.Log)
	if err != nil {
		return nil, err
	}
	defer dp.stop()
	conn, err := dial(t.ExtProc)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var h2 http.Protocols
	h2.SetUnencryptedHTTP2(true)
	e := &env{
		target: t, pool: o.Pool, dp: dp, conn: conn,
		http: &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}},
		h2c:  &http.Client{Transport: &http.Transport{DisableCompression: true, Protocols: &h2}},
	}
	defer e.http.CloseIdleConnections()
	defer e.h2c.CloseIdleConnections()
	res := &Result{Target: t}
	for _, c := range cases {
		if o.Only != nil && !o.Only(c.ID) {
			continue
		}
		var cctx context.Context
		var cancel context.CancelFunc
		if o.CaseTimeout > 0 {
			cctx, cancel = context.WithTimeout(ctx, o.CaseTimeout)
		} else {
			cctx, cancel = context.WithCancel(ctx)
		}
		start := time.Now()
		before := dp.extprocStats()
		err := c.run(e, cctx)
		cancel()
		cr := CaseResult{Case: c, Status: Pass, Elapsed: time.Since(start)}
		var skip *errSkip
		switch {
		case errors.As(err, &skip):
			cr.Status, cr.Detail = Skip, skip.why
		case err != nil:
			cr.Status, cr.Detail = Fail, oneLine(err.Error())+envoySaw(before, dp.extprocStats())
		}
		res.Cases = append(res.Cases, cr)
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
	}
	return res, nil
}

// envoySaw names the ext_proc failure counters that moved during a case:
// what Envoy itself held against the picker.
func envoySaw(before, after map[string]int) string {
	var out []string
	for _, k := range []string{"spurious_msgs_received", "message_timeouts", "streams_failed", "rejected_header_mutations",
		"failure_mode_allowed", "clear_route_cache_ignored"} {
		if d := after[k] - before[k]; d > 0 {
			out = append(out, fmt.Sprintf("%s +%d", k, d))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return " (Envoy ext_proc: " + strings.Join(out, ", ") + ")"
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	return s
}

// Markdown renders results side by side: one row per case, one column per
// target, then why each failure or skip happened.
func Markdown(w io.Writer, title string, intro []string, results ...*Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", title)
	for _, p := range intro {
		fmt.Fprintf(&b, "%s\n\n", p)
	}
	b.WriteString("| case | level | checks |")
	for _, r := range results {
		fmt.Fprintf(&b, " %s |", r.Target.Name)
	}
	b.WriteString("\n|---|---|---|")
	for range results {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	byID := make([]map[string]CaseResult, len(results))
	for i, r := range results {
		byID[i] = map[string]CaseResult{}
		for _, c := range r.Cases {
			byID[i][c.Case.ID] = c
		}
	}
	for _, c := range cases {
		ran := false
		for i := range results {
			_, ok := byID[i][c.ID]
			ran = ran || ok
		}
		if !ran {
			continue
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |", c.ID, c.Level, c.Checks)
		for i := range results {
			cr, ok := byID[i][c.ID]
			switch {
			case !ok:
				b.WriteString(" — |")
			case cr.Status == Pass:
				b.WriteString(" pass |")
			default:
				fmt.Fprintf(&b, " **%s** |", cr.Status)
			}
		}
		b.WriteString("\n")
	}
	for _, r := range results {
		fmt.Fprintf(&b, "\n## %s\n\n", r.Target.Name)
		for _, n := range r.Target.Notes {
			fmt.Fprintf(&b, "%s\n\n", n)
		}
		pass, n := 0, 0
		for _, c := range r.Cases {
			n++
			if c.Status == Pass {
				pass++
			}
		}
		fmt.Fprintf(&b, "%d of %d cases pass.\n", pass, n)
		for _, c := range r.Cases {
			if c.Status != Pass {
				fmt.Fprintf(&b, "\n- `%s` (%s): %s", c.Case.ID, c.Status, c.Detail)
				if why := r.Target.Why[c.Case.ID]; why != "" && c.Status == Fail {
					fmt.Fprintf(&b, "\n  Why: %s", why)
				}
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
