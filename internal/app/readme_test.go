package app

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/internal/component"
)

var updateREADME = flag.Bool("update-readme", false, "rewrite the metrics table in ../../README.md")

// recorder is a Registerer that keeps every collector registered through
// it, so a test can list them with their type.
type recorder struct {
	prometheus.Registerer
	cs []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	r.cs = append(r.cs, c)
	return r.Registerer.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// series is one row of the README's metrics table.
type series struct{ name, kind, labels, help string }

// kindsOf names the metric type of each series a collector exports, by
// name. Vectors with no child yet expose nothing, so the constructor's
// type decides; other collectors are asked, and a series they have nothing
// for yet is a counter when its name says so (_total), else a gauge.
func kindsOf(c prometheus.Collector) func(name string) string {
	switch c.(type) {
	case *prometheus.HistogramVec, prometheus.Histogram:
		return func(string) string { return "histogram" }
	case *prometheus.GaugeVec, prometheus.Gauge:
		return func(string) string { return "gauge" }
	case *prometheus.CounterVec, prometheus.Counter:
		return func(string) string { return "counter" }
	}
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	kinds := map[string]string{}
	for m := range ch {
		var pb dto.Metric
		d := descRE.FindStringSubmatch(m.Desc().String())
		if d == nil || m.Write(&pb) != nil {
			continue
		}
		switch {
		case pb.Histogram != nil:
			kinds[d[1]] = "histogram"
		case pb.Gauge != nil:
			kinds[d[1]] = "gauge"
		case pb.Counter != nil:
			kinds[d[1]] = "counter"
		}
	}
	return func(name string) string {
		if k, ok := kinds[name]; ok {
			return k
		}
		if strings.HasSuffix(name, "_total") {
			return "counter"
		}
		return "gauge"
	}
}

var descRE = regexp.MustCompile(`fqName: "([^"]+)", help: "((?:[^"\\]|\\.)*)", (?:unit: "[^"]*", )?constLabels: \{[^}]*\}, variableLabels: \{([^}]*)\}`)

// registered lists the series warmpath registers (without the Go runtime's
// and the process's), with static discovery from a file, peers on, and,
// beside it, what the Kubernetes source adds, sorted by name.
func registered(t *testing.T) []series {
	t.Helper()
	dir := t.TempDir()
	path, token := filepath.Join(dir, "warmpath.yaml"), filepath.Join(dir, "peer-token")
	yaml := "models: [{name: m}]\nworkers: [{name: w0, address: '127.0.0.1:1', models: [m]}]\npeers: {token_file: " + token + "}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(token, []byte("a secret shared by every replica"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{Registerer: prometheus.NewRegistry()}
	if _, err := assemble(t.Context(), cfg, embedOptions{}, rec, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	kube := discovery.KubeConfig{Namespace: "ns", LabelSelector: "app=vllm"}
	if _, err := discovery.NewKubernetes(fake.NewClientset(), nil, kube, component.Options{Registerer: rec}); err != nil {
		t.Fatal(err)
	}
	var out []series
	for _, c := range rec.cs {
		kind := kindsOf(c)
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := descRE.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read %s", d)
			}
			if strings.HasPrefix(m[1], "go_") || strings.HasPrefix(m[1], "process_") {
				continue
			}
			labels := strings.Fields(strings.ReplaceAll(m[3], ",", " "))
			for i, l := range labels {
				labels[i] = "`" + strings.Trim(l, `"`) + "`"
			}
			slices.Sort(labels)
			help := strings.ReplaceAll(strings.ReplaceAll(m[2], `\"`, `"`), "|", `\|`)
			out = append(out, series{name: m[1], kind: kind(m[1]), labels: strings.Join(labels, ", "), help: help})
		}
	}
	slices.SortFunc(out, func(a, b series) int { return cmp.Compare(a.name, b.name) })
	return out
}

// TestREADMEMetricsTable: the README's metrics table lists exactly the
// series a default warmpath registers, with their type, labels and help,
// so a renamed or removed series cannot outlive its documentation. Run
// `go test ./internal/app -run READMEMetrics -update-readme` to rewrite it.
func TestREADMEMetricsTable(t *testing.T) {
	t.Parallel()
	const path = "../../README.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const head = "| metric | type | labels | meaning |\n|---|---|---|---|\n"
	start := strings.Index(string(b), head)
	if start < 0 {
		t.Fatal("README has no metrics table")
	}
	start += len(head)
	end := start + strings.Index(string(b[start:]), "\n\n")
	var want strings.Builder
	for _, s := range registered(t) {
		fmt.Fprintf(&want, "| `%s` | %s | %s | %s |\n", s.name, s.kind, s.labels, s.help)
	}
	got := string(b[start:end]) + "\n"
	if *updateREADME {
		if err := os.WriteFile(path, []byte(string(b[:start])+strings.TrimSuffix(want.String(), "\n")+string(b[end:])), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got != want.String() {
		t.Errorf("README's metrics table differs from what warmpath registers; run with -update-readme. Want:\n%s", want.String())
	}
}
