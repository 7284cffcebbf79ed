package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestRealEnvoyRollingStop: two replicas behind one real Envoy (the shipped
// envoy/envoy.yaml: health checks every second), clients sending without a
// pause, one replica told to stop with SIGTERM. It turns NOT_SERVING, serves
// what Envoy still sends it for its drain delay, then stops accepting and
// exits: no client sees an error, and the other replica takes the rest.
func TestRealEnvoyRollingStop(t *testing.T) {
	t.Parallel()
	ws := []*simWorker{startSim(t, "w0", false), startSim(t, "w1", false)}
	a := startWarmpath(t, healthConfig("1h", "", ws...), "--drain-delay", "4s")
	b := startWarmpath(t, healthConfig("1h", "", ws...))
	e := startEnvoy(t, "envoy/envoy.yaml", a.ExtProc, b.ExtProc)
	url := "http://" + e.Listeners["llm_ingress"] + "/v1/completions"
	for _, r := range []*warmpathProc{a, b} {
		waitFor(t, "replica ready", func() bool { return r.readyz(t) == 200 })
	}
	// Both replicas in rotation before the stop.
	waitFor(t, "both replicas route", func() bool {
		send(t, "http://"+e.Listeners["llm_ingress"], 2)
		return a.metric(t, "warmpath_decisions_total") > 0 && b.metric(t, "warmpath_decisions_total") > 0
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sent, failed atomic.Int64
	var mu sync.Mutex
	var firstFailure string
	var wg sync.WaitGroup
	for range 2 { // two clients without pause: enough to hit the moment it stops accepting, light beside the other packages' tests
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(completion(4, false)))
				req.Header.Set("content-type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if ctx.Err() != nil {
					return
				}
				sent.Add(1)
				status := 0
				var body []byte
				if err == nil {
					body, _ = io.ReadAll(resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				if status != 200 {
					failed.Add(1)
					mu.Lock()
					if firstFailure == "" {
						firstFailure = strings.TrimSpace(string(body))
						if err != nil {
							firstFailure = err.Error()
						}
					}
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(time.Second)
	before := a.metric(t, "warmpath_decisions_total")
	stopped := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the stopped replica did not exit within 20 s")
	}
	exitedAfter := time.Since(stopped)
	time.Sleep(time.Second) // traffic goes on through b alone
	cancel()
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d requests failed around a replica's SIGTERM; first: %s", n, sent.Load(), firstFailure)
	}
	if exitedAfter < 4*time.Second {
		t.Errorf("the replica exited %v after SIGTERM, before its 4 s drain delay", exitedAfter)
	}
	if sent.Load() < 20 {
		t.Fatalf("only %d requests sent", sent.Load())
	}
	t.Logf("%d requests, none failed; the stopped replica had routed %v before SIGTERM and exited %v after it",
		sent.Load(), before, exitedAfter.Round(100*time.Millisecond))
}
