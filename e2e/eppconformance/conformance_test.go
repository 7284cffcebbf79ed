package eppconformance

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/e2e/envoytest"
)

// TestWarmpath runs the whole suite against warmpath through a real Envoy:
// every case, required, optional and test hook alike, must pass.
func TestWarmpath(t *testing.T) {
	envoyBin := envoytest.Binary(t)
	// No case has a time limit of its own: the suite stops a little before
	// go test's deadline so that what ran is still reported.
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-time.Until(d)/10))
		defer cancel()
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "warmpath")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/warmpath/warmpath/cmd/warmpath").CombinedOutput(); err != nil {
		t.Fatalf("build warmpath: %v\n%s", err, out)
	}
	pool, err := StartPool([]string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var log envoytest.SyncBuffer
	wp, err := StartWarmpath(ctx, &log, bin, dir, pool, false)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	defer wp.Stop()
	shed, err := StartWarmpath(ctx, &log, bin, dir, pool, true)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	defer shed.Stop()
	res, err := Run(ctx, Target{Name: "warmpath", ExtProc: wp.Fields["extproc"], Shed: shed.Fields["extproc"]},
		Options{Pool: pool, Envoy: envoyBin, Dir: dir, Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(res.Cases) != len(Cases()) {
		t.Errorf("%d of %d cases ran", len(res.Cases), len(Cases()))
	}
	for _, c := range res.Cases {
		if c.Status != Pass {
			t.Errorf("%s: %s: %s", c.Case.ID, c.Status, c.Detail)
		}
	}
	// What warmpath itself counted of the cases above: each hint form, each
	// rejection, the fallback walk moved to the worker that served, the
	// shed request.
	for _, m := range []struct {
		admin, name, label string
	}{
		{wp.Fields["admin"], "warmpath_subset_hints_total", `form="list"`},
		{wp.Fields["admin"], "warmpath_subset_hints_total", `form="string"`},
		{wp.Fields["admin"], "warmpath_request_rejections_total", `reason="subset_empty"`},
		{wp.Fields["admin"], "warmpath_request_rejections_total", `reason="subset_none_eligible"`},
		{wp.Fields["admin"], "warmpath_served_endpoint_reports_total", `result="chosen"`},
		{wp.Fields["admin"], "warmpath_served_endpoint_reports_total", `result="fallback"`},
		{shed.Fields["admin"], "warmpath_request_rejections_total", `reason="shed"`},
	} {
		if v := metricSum(t, m.admin, m.name, m.label); v < 1 {
			t.Errorf("%s{%s} = %v, want at least 1", m.name, m.label, v)
		}
	}
	if v := metricSum(t, wp.Fields["admin"], "warmpath_served_endpoint_reports_total", `result="unknown"`); v != 0 {
		t.Errorf("served endpoints reported that were no candidate: %v", v)
	}
	if t.Failed() {
		var b strings.Builder
		_ = Markdown(&b, "warmpath", nil, res)
		t.Logf("%s\nlogs:\n%s", b.String(), log.String())
	}
}

// metricSum sums the samples of name whose labels contain label.
func metricSum(t *testing.T, admin, name, label string) float64 {
	t.Helper()
	body, err := httpGet("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, ln := range strings.Split(body, "\n") {
		if strings.HasPrefix(ln, name+"{") && strings.Contains(ln, label) {
			v, _ := strconv.ParseFloat(ln[strings.LastIndexByte(ln, ' ')+1:], 64)
			total += v
		}
	}
	return total
}
