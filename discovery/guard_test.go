package discovery

import (
	"encoding/json"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/warmpath/warmpath/internal/component"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// mapLoads is a LoadReader backed by a map.
type mapLoads map[string]EngineLoad

func (m mapLoads) Load(worker string) (EngineLoad, bool) {
	l, ok := m[worker]
	return l, ok
}

func withCache(bs int, prefix bool, algo string) EngineLoad {
	return EngineLoad{EngineMetrics: EngineMetrics{CacheConfig: &CacheConfig{BlockSize: bs, PrefixCaching: prefix, HashAlgo: algo}}}
}

func TestGuardChecks(t *testing.T) {
	t.Parallel()
	blockSizes := map[string]int{"qwen3": 16, "llama": 32}
	tests := []struct {
		name   string
		load   *EngineLoad
		events int // 0: no events seen
		models []string
		algo   string
		want   []string // checks
	}{
		{name: "all agree", load: new(withCache(16, true, "sha256")), events: 16, want: nil},
		{name: "not scraped yet", events: 0, want: nil},
		{name: "no cache config exposed", load: &EngineLoad{}, want: nil},
		{name: "engine block size differs from config", load: new(withCache(32, true, "sha256")), want: []string{CheckBlockSizeConfig}},
		{name: "events differ from engine", load: new(withCache(16, true, "sha256")), events: 32, want: []string{CheckBlockSizeEvents}},
		{name: "events differ from config when engine unknown", events: 64, want: []string{CheckBlockSizeEvents}},
		{name: "prefix caching off", load: new(withCache(16, false, "sha256")), want: []string{CheckPrefixCachingOff}},
		{name: "hash algo pinned and different", load: new(withCache(16, true, "xxhash")), algo: "sha256", want: []string{CheckHashAlgo}},
		{name: "hash algo not pinned", load: new(withCache(16, true, "xxhash")), want: nil},
		{name: "two models, one disagrees", load: new(withCache(16, true, "")), models: []string{"qwen3", "llama"}, want: []string{CheckBlockSizeConfig}},
		{name: "everything wrong", load: new(withCache(8, false, "sha256_cbor")), events: 32, algo: "sha256", want: []string{CheckBlockSizeConfig, CheckBlockSizeEvents, CheckHashAlgo, CheckPrefixCachingOff}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			models := tc.models
			if models == nil {
				models = []string{"qwen3"}
			}
			lister := &staticLister{}
			lister.set(Worker{Name: "w", Address: "h:1", Models: models}, Worker{Name: "fine", Address: "h:2", Models: []string{"qwen3"}})
			loads := mapLoads{"fine": withCache(16, true, "sha256")}
			if tc.load != nil {
				loads["w"] = *tc.load
			}
			reg := prometheus.NewRegistry()
			g, err := NewGuard(lister, loads, GuardConfig{
				BlockSize: func(m string) int { return blockSizes[m] },
				EventBlockSize: func(w string) int {
					if w == "w" {
						return tc.events
					}
					return 16
				},
				HashAlgo: tc.algo,
			}, component.Options{Registerer: reg})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range g.CheckNow() {
				if p.Worker != "w" {
					t.Errorf("problem on the healthy worker: %+v", p)
				}
				got = append(got, p.Check)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("checks = %v, want %v (%+v)", got, tc.want, g.Problems())
			}
			if n := testutil.CollectAndCount(g.gauge); n != len(tc.want) {
				t.Fatalf("mismatch series = %d, want %d", n, len(tc.want))
			}
		})
	}
}

func TestGuardLogsChanges(t *testing.T) {
	t.Parallel()
	lister := &staticLister{}
	lister.set(Worker{Name: "w", Address: "h:1", Models: []string{"qwen3"}})
	loads := mapLoads{"w": withCache(32, true, "")}
	var logs syncBuffer
	g, err := NewGuard(lister, loads, GuardConfig{BlockSize: func(string) int { return 16 }}, component.Options{Logger: testLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	g.CheckNow()
	g.CheckNow()
	if n := strings.Count(logs.String(), "disagrees with warmpath"); n != 1 {
		t.Fatalf("problem logged %d times, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "engine block_size 32, configured 16") {
		t.Fatalf("log does not name the problem:\n%s", logs.String())
	}
	loads["w"] = withCache(16, true, "")
	if ps := g.CheckNow(); len(ps) != 0 {
		t.Fatalf("problems after fix: %+v", ps)
	}
	if !strings.Contains(logs.String(), "problem cleared") {
		t.Fatalf("clearing not logged:\n%s", logs.String())
	}
}

func TestStatusView(t *testing.T) {
	t.Parallel()
	p, _, _ := newTestPool(t, HealthConfig{})
	p.Apply([]Worker{{Name: "a", Address: "h:1", Models: []string{"qwen3"}, KVEvents: "tcp://h:5557"}, w("b", "h:2", "qwen3")})
	p.ReportResult("b", 0, &dialError{syscall.ECONNREFUSED})
	lister := &staticLister{}
	lister.set(p.Workers()...)
	g, err := NewGuard(p, mapLoads{"a": withCache(32, true, "")}, GuardConfig{BlockSize: func(string) int { return 16 }}, component.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g.CheckNow()
	st := Status(p, nil, g)
	if len(st) != 2 || st[0].Name != "a" || len(st[0].Problems) != 1 || st[0].Health.Active != "unknown" || !st[0].Health.Usable {
		t.Fatalf("Status[0] = %+v", st)
	}
	if st[1].Health.Usable || st[1].Health.LastFailure == "" || st[1].DataParallelSize != 1 {
		t.Fatalf("Status[1] = %+v", st[1])
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"name":"a"`, `"kv_events":"tcp://h:5557"`, `"check":"block_size_config"`, `"usable":false`, `"ejected_until":`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s: %s", want, b)
		}
	}
}
