package extproc

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/telemetry"
)

// TestDashboardQueriesKnownMetrics checks that every warmpath_* and gen_ai_*
// series the Grafana dashboard queries is one the ext_proc server exports
// (kvevents' and kvindex's warmpath_kvevents_* and warmpath_kvindex_*
// series are matched by pattern there and not checked here).
func TestDashboardQueriesKnownMetrics(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../deploy/grafana/warmpath-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard is not valid JSON: %v", err)
	}
	known := map[string]bool{}
	descName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, sc := range []telemetry.Semconv{{}, {Latest: true}} {
		reg := prometheus.NewRegistry()
		if _, err := New(testConfig(), &fakePool{workers: testWorkers}, newFakePicker(), component.Options{Registerer: reg},
			WithTracing(telemetry.Disabled(sc), false)); err != nil {
			t.Fatal(err)
		}
		ch := make(chan *prometheus.Desc, 256)
		go func() { reg.Describe(ch); close(ch) }()
		for d := range ch {
			if m := descName.FindStringSubmatch(d.String()); m != nil {
				known[m[1]] = true
			}
		}
	}
	series := regexp.MustCompile(`\b((?:warmpath|gen_ai)_[a-z_]+)[{\[]`) // a metric, not a label
	suffix := regexp.MustCompile(`_(bucket|sum|count)$`)
	checked := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range series.FindAllStringSubmatch(tg.Expr, -1) {
				name := m[1]
				if strings.HasPrefix(name, "warmpath_kvevents_") || strings.HasPrefix(name, "warmpath_kvindex_") {
					continue
				}
				base := suffix.ReplaceAllString(name, "")
				if !known[name] && !known[base] {
					t.Errorf("panel %q queries %s, which no collector exports", p.Title, name)
				}
				checked++
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d series names found in the dashboard", checked)
	}
}
