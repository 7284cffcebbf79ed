package app

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/internal/clocktest"
	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/kvindex"
	"github.com/warmpath/warmpath/peers"
	"github.com/warmpath/warmpath/scoring"
)

// fixedLoad reports the same engine gauges for every worker, scraped at
// the time held in at.
type fixedLoad struct {
	reports map[string]discovery.EngineLoad
	at      *time.Time
}

func (l fixedLoad) Load(worker string) (discovery.EngineLoad, bool) {
	r, ok := l.reports[worker]
	r.ScrapedAt = *l.at
	return r, ok
}

// BenchmarkDecisionRealIndex is one decision as warmpath serves it, with
// the production KV-cache index behind the production adapter: an
// 8K-token prompt (32 families of 4K shared tokens, each on a few of 16
// workers, plus a 4K tail), lookup, load reconciliation with a fresh
// scrape, TTFT prediction on 16 workers, the warmpath policy, the
// reservation and the speculative entry, and ending an older assignment
// (release and calibration), with 64 assignments in flight. The clock
// advances 1 ms per decision and the scrape is renewed every second, as a
// pool at 1,000 requests/s would see it.
// benchObjective runs the decision benchmark under another objective than
// the default: the objectives' decisions differ, and with them what the
// index holds, so comparing their cost needs the same one.
var benchObjective = flag.String("objective", "", "scoring.objective of the decision benchmark (default: the default)")

func BenchmarkDecisionRealIndex(b *testing.B) {
	ws := make([]discovery.Worker, 16)
	load := fixedLoad{reports: map[string]discovery.EngineLoad{}, at: new(time.Time)}
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range ws {
		ws[i] = discovery.Worker{Name: fmt.Sprintf("w%d", i), Address: fmt.Sprintf("10.0.0.%d:8000", i+1), Models: []string{"m"}}
		load.reports[ws[i].Name] = discovery.EngineLoad{EngineMetrics: discovery.EngineMetrics{
			Running: rng.IntN(8), Waiting: rng.IntN(3), HasKVCacheUsage: true, KVCacheUsage: 0.5 * rng.Float64()}}
	}
	prompts := make([][]uint32, 256)
	for i := range prompts {
		ids := make([]uint32, 8192)
		for j := range ids {
			ids[j] = uint32(i%32*100000 + j) // the family's shared 4K
			if j >= 4096 {
				ids[j] = uint32(5_000_000 + i*10000 + j)
			}
		}
		prompts[i] = ids
	}
	// newIndex returns the index every sub-benchmark starts from (the same
	// stores in the same order).
	newIndex := func() *kvindex.Index {
		ix, err := kvindex.New(kvindex.DefaultConfig(), component.Options{})
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(2, 2))
		for i, ids := range prompts {
			n := 256 + rng.IntN(256) // blocks stored: the shared half and some of the tail
			hashes := make([]uint64, n)
			for j := range hashes {
				hashes[j] = uint64(i)<<32 | uint64(j+1)
			}
			w := ws[rng.IntN(len(ws))].Name
			ix.Apply(kvindex.Source{Worker: w, Model: "m"}, []kvindex.Event{{
				Kind: kvindex.BlockStored, BlockHashes: hashes, TokenIDs: ids[:n*16], BlockSize: 16}})
		}
		return ix
	}
	ix := newIndex()
	clock := clocktest.New(time.Unix(1_000_000, 0))
	*load.at = clock.Now()
	newRouter := func(ix *kvindex.Index, src scoring.Sources, opts ...scoring.Option) *scoring.Router {
		src.Index, src.Load = ix, load
		cfg := scoring.DefaultConfig()
		if *benchObjective != "" {
			cfg.Objective = scoring.Objective(*benchObjective)
		}
		r, err := scoring.New(scoring.PolicyWarmpath, cfg, src,
			component.Options{Registerer: prometheus.NewRegistry(), Clock: clock.Now}, opts...)
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	ctx := context.Background()
	i := 0
	// picker returns one decision on r, its first token, and the end of
	// the one 64 before it, as the ext_proc layer reports them: the end
	// calibrates both the TTFT and the decode model.
	picker := func(r *scoring.Router) func() {
		ring := make([]*scoring.Decision, 64)
		pick := func() {
			d, err := r.Pick(ctx, &scoring.Request{Model: "m", TokenIDs: prompts[i%len(prompts)], Stream: true}, ws)
			if err != nil {
				b.Fatal(err)
			}
			r.FirstToken(d)
			slot := i % len(ring)
			if old := ring[slot]; old != nil {
				r.Done(old, scoring.Outcome{End: scoring.EndCompleted, TTFT: old.Chosen.PredictedTTFT * 11 / 10,
					Duration: time.Second, PromptTokens: old.PromptTokens, CachedTokens: old.Chosen.CachedTokens, CompletionTokens: 64})
			}
			ring[slot] = d
			i++
			clock.Advance(time.Millisecond)
			if i%1000 == 0 {
				*load.at = clock.Now()
			}
		}
		for range len(ring) {
			pick()
		}
		return pick
	}
	r := newRouter(ix, scoring.Sources{})
	pick := picker(r)
	// predict is the lookup and the prediction on every candidate, which
	// reserve nothing; pick is the whole decision path.
	b.Run("predict", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := processCPU(b)
		for b.Loop() {
			if _, err := r.Predict(ctx, &scoring.Request{Model: "m", TokenIDs: prompts[i%len(prompts)], Stream: true}, ws); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	})
	b.Run("pick", func(b *testing.B) { measurePicks(b, pick, nil) })
	// pick-shared is pick on a replica whose ledger a second replica follows
	// over loopback gRPC: the process's CPU counts the encoding, the
	// transport and the follower applying every change to its own router
	// and index. pick-alone is the same decisions on the same fresh index
	// without a peer, the figure to compare it with.
	b.Run("pick-alone", func(b *testing.B) {
		measurePicks(b, picker(newRouter(newIndex(), scoring.Sources{})), nil)
	})
	// pick-followed is the same with a follower that only receives (its
	// ledger and index discard): the decision's own cost of being shared,
	// transport included; pick-shared minus pick-followed is what the
	// follower spends applying a peer's decision.
	shared := func(apply bool) func(b *testing.B) {
		return func(b *testing.B) {
			ix, peerIx := newIndex(), newIndex()
			here := startMesh(b, clock.Now)
			there := startMesh(b, clock.Now, here.addr)
			router := newRouter(ix, scoring.Sources{Peers: here.mesh}, scoring.WithLedgerSink(here.mesh))
			follower := newRouter(peerIx, scoring.Sources{Peers: there.mesh})
			here.run(b, router, ix)
			var got atomic.Int64
			if apply {
				there.run(b, countingLedger{follower, &got}, peerIx)
			} else {
				there.run(b, countingLedger{nil, &got}, nopSpeculator{})
			}
			pick := picker(router)
			for got.Load() == 0 {
				pick() // until the follower is connected
				time.Sleep(time.Millisecond)
			}
			measurePicks(b, pick, here)
		}
	}
	b.Run("pick-followed", shared(false))
	b.Run("pick-shared", shared(true))
	// pick-followed-apart is pick-followed with the follower in a process
	// of its own (this test binary, as TestDecisionBenchFollower), as
	// another replica is: the process's CPU is the deciding replica's alone,
	// the encoding and sending included, and nothing of the follower's runs
	// beside the decisions.
	b.Run("pick-followed-apart", func(b *testing.B) {
		ix := newIndex()
		here := startMesh(b, clock.Now)
		router := newRouter(ix, scoring.Sources{Peers: here.mesh}, scoring.WithLedgerSink(here.mesh))
		here.run(b, router, ix)
		cmd := exec.Command(os.Args[0], "-test.run", "^TestDecisionBenchFollower$")
		cmd.Env = append(os.Environ(), followEnv+"="+here.addr)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			stdin.Close() // the follower exits when its stdin ends
			if err := cmd.Wait(); err != nil {
				b.Errorf("follower: %v\n%s", err, out.String())
			}
		})
		pick := picker(router)
		for here.sentBytes(b) == 0 {
			pick() // until the follower is connected
			time.Sleep(time.Millisecond)
		}
		measurePicks(b, pick, here)
	})
}

// measurePicks runs pick b.N times and reports the process's CPU per
// decision and, with a mesh, the peer bytes it sent per decision.
func measurePicks(b *testing.B, pick func(), mesh *benchMesh) {
	b.ReportAllocs()
	cpu0 := processCPU(b)
	var sent0 float64
	if mesh != nil {
		sent0 = mesh.sentBytes(b)
	}
	for b.Loop() {
		pick()
	}
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	if mesh != nil {
		b.ReportMetric((mesh.sentBytes(b)-sent0)/float64(b.N), "peer-B/op")
	}
}

// followEnv names the address TestDecisionBenchFollower follows.
const followEnv = "WARMPATH_BENCH_FOLLOW"

// TestDecisionBenchFollower is the follower process of
// BenchmarkDecisionRealIndex/pick-followed-apart: it follows the mesh at
// $WARMPATH_BENCH_FOLLOW, discarding what it receives, until its stdin
// ends. Without that variable it has nothing to do.
func TestDecisionBenchFollower(t *testing.T) {
	addr := os.Getenv(followEnv)
	if addr == "" {
		t.Skip("the follower process of BenchmarkDecisionRealIndex/pick-followed-apart")
	}
	var got atomic.Int64
	there := startMesh(t, time.Now, addr)
	there.run(t, countingLedger{nil, &got}, nopSpeculator{})
	_, _ = io.Copy(io.Discard, os.Stdin)
	if got.Load() == 0 {
		t.Error("the follower received nothing")
	}
}

// countingLedger counts the peer events it passes to r (nil: discards).
type countingLedger struct {
	r *scoring.Router
	n *atomic.Int64
}

func (l countingLedger) ApplyPeer(peer string, evs []scoring.PeerEvent) {
	l.n.Add(int64(len(evs)))
	if l.r != nil {
		l.r.ApplyPeer(peer, evs)
	}
}

func (l countingLedger) DropPeer(peer string) {
	if l.r != nil {
		l.r.DropPeer(peer)
	}
}

type nopSpeculator struct{}

func (nopSpeculator) SpeculateKeys(string, []uint64) {}

// benchMesh is a peers.Mesh served on a loopback :0 listener.
type benchMesh struct {
	mesh *peers.Mesh
	reg  *prometheus.Registry
	gs   *grpc.Server
	addr string
}

// startMesh serves a Mesh following static peers until the benchmark ends.
func startMesh(b testing.TB, now func() time.Time, static ...string) *benchMesh {
	b.Helper()
	tok := filepath.Join(b.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("a secret the benchmark's replicas share"), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg := peers.DefaultConfig()
	cfg.TokenFile, cfg.Static = tok, static
	bm := &benchMesh{reg: prometheus.NewRegistry(), gs: grpc.NewServer()}
	m, err := peers.New(cfg, component.Options{Registerer: bm.reg, Clock: now})
	if err != nil {
		b.Fatal(err)
	}
	bm.mesh = m
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	bm.addr = lis.Addr().String()
	m.SetAdvertise(bm.addr)
	m.Register(bm.gs)
	go func() { _ = bm.gs.Serve(lis) }()
	b.Cleanup(bm.gs.Stop)
	return bm
}

// run runs the mesh into ledger and spec until the benchmark ends.
func (bm *benchMesh) run(b testing.TB, ledger peers.Ledger, spec peers.Speculator) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = bm.mesh.Run(ctx, ledger, spec)
	}()
	b.Cleanup(func() {
		cancel()
		<-done
	})
}

// sentBytes is the mesh's warmpath_peer_bytes_total{direction="sent"}.
func (bm *benchMesh) sentBytes(b *testing.B) float64 {
	mfs, err := bm.reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "warmpath_peer_bytes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "direction" && l.GetValue() == "sent" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// processCPU returns the process's user+system CPU time in nanoseconds.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
