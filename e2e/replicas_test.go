package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// replicaConfig is one warmpath replica over the workers, sharing its
// ledger through the token in tokenFile with the replicas at static.
func replicaConfig(tokenFile string, static []string, ws ...*simWorker) string {
	quoted := make([]string, len(static))
	for i, a := range static {
		quoted[i] = strconv.Quote(a)
	}
	return healthConfig("1h", fmt.Sprintf("peers: {token_file: %s, static: [%s], heartbeat: 50ms, stale_after: 300ms, expire_after: 2s}\n",
		tokenFile, strings.Join(quoted, ", ")), ws...)
}

// TestRealEnvoyReplicaKilledMidRun: two replicas behind one real Envoy share
// their ledgers (one knows the other's address; the other learns it). One
// is killed with SIGKILL while streams are open on both: only streams it
// served may fail, every request after the kill succeeds through the
// other, and the survivor drops the dead replica's assignments within
// expire_after. Before the kill, what each replica's streamed outcomes
// taught its calibration reaches the other's.
func TestRealEnvoyReplicaKilledMidRun(t *testing.T) {
	t.Parallel()
	ws := []*simWorker{startSim(t, "w0", false), startSim(t, "w1", false), startSim(t, "w2", false)}
	token := filepath.Join(t.TempDir(), "peer-token")
	if err := os.WriteFile(token, []byte("a shared secret for this test's replicas\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startWarmpath(t, replicaConfig(token, nil, ws...))
	b := startWarmpath(t, replicaConfig(token, []string{a.ExtProc}, ws...))
	e := startEnvoy(t, "envoy/envoy.yaml", a.ExtProc, b.ExtProc)
	url := "http://" + e.Listeners["llm_ingress"]
	for _, r := range []*warmpathProc{a, b} {
		waitFor(t, "replica ready", func() bool { return r.readyz(t) == 200 })
	}
	// Both replicas in rotation before the streams open: Envoy's health
	// check passing a replica is not yet routing to it (all six streams
	// once landed on one).
	waitFor(t, "both replicas route", func() bool {
		send(t, url, 2)
		return a.metric(t, "warmpath_decisions_total") > 0 && b.metric(t, "warmpath_decisions_total") > 0
	})
	waitFor(t, "each replica follows the other", func() bool {
		return a.metric(t, "warmpath_peers", `state="connected"`) == 1 && b.metric(t, "warmpath_peers", `state="connected"`) == 1
	})
	waitFor(t, "each replica fits the other's lessons", func() bool {
		resp := post(t, t.Context(), url+"/v1/completions", completion(8, true))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return a.metric(t, "warmpath_scoring_peer_lessons_total") > 0 && b.metric(t, "warmpath_scoring_peer_lessons_total") > 0
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	streams := openStreams(ctx, url, 6)
	onA, onB := a.metric(t, "warmpath_assignments_in_flight"), b.metric(t, "warmpath_assignments_in_flight")
	if onA+onB != 6 || onA == 0 || onB == 0 {
		t.Fatalf("in flight on the replicas: %v and %v, want 6 spread over both", onA, onB)
	}
	waitFor(t, "each replica holds the other's assignments", func() bool {
		return b.metric(t, "warmpath_scoring_peer_assignments_in_flight") == onA &&
			a.metric(t, "warmpath_scoring_peer_assignments_in_flight") == onB
	})

	a.kill()
	// The streams a served end with it (Envoy fails them closed); b's go on.
	deadline := time.After(10 * time.Second)
	for cut := 0; cut < int(onA); {
		cut = 0
		for _, s := range streams {
			if s.ended() {
				cut++
			}
		}
		select {
		case <-deadline:
			t.Fatalf("%d of a's %v streams ended 10 s after the kill", cut, onA)
		case <-time.After(20 * time.Millisecond):
		}
	}
	alive := 0
	for _, s := range streams {
		if !s.ended() {
			alive++
		}
	}
	if alive != int(onB) {
		t.Fatalf("%d streams alive after the kill, want b's %v", alive, onB)
	}

	// Every request after the kill is routed by b.
	for i := range 20 {
		if r := send(t, url, 4); r.status != 200 {
			t.Fatalf("request %d after the kill: status %d: %s", i, r.status, r.body)
		}
	}
	if n := b.metric(t, "warmpath_peers", `state="stale"`) + b.metric(t, "warmpath_peers", `state="down"`); n != 1 {
		t.Fatalf("b sees %v peers stale or down, want the dead one", n)
	}
	waitFor(t, "b drops the dead replica's assignments", func() bool {
		return b.metric(t, "warmpath_scoring_peer_assignments_in_flight") == 0
	})
	if n := b.metric(t, "warmpath_peer_expirations_total"); n != 1 {
		t.Errorf("expirations %v, want 1", n)
	}
	cancel()
	for _, s := range streams {
		<-s.done
	}
	waitFor(t, "b's assignments released", func() bool { return b.metric(t, "warmpath_assignments_in_flight") == 0 })
}
