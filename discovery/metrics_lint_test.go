package discovery

import (
	"testing"

	"github.com/warmpath/warmpath/internal/component"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/kubernetes/fake"
)

// TestMetricsShareOneRegistryAndLint builds every component against one
// registry, as the application does, and lints the exposition.
func TestMetricsShareOneRegistryAndLint(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	opt := component.Options{Registerer: reg}
	src, err := NewStatic("unused", lineLoader, 0, opt)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPool(src, HealthConfig{}, opt)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewScraper(p, ScrapeConfig{}, opt)
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGuard(p, s, GuardConfig{}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewKubernetes(fake.NewClientset(), nil, KubeConfig{Namespace: "a", LabelSelector: "x=y"}, opt); err != nil {
		t.Fatal(err)
	}
	p.Apply([]Worker{w("a", "h:1", "m")})
	g.CheckNow()
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("%s: %s", pr.Metric, pr.Text)
	}
	n, err := testutil.GatherAndCount(reg)
	if err != nil || n == 0 {
		t.Fatalf("GatherAndCount = %d, %v", n, err)
	}
	// A second component of the same kind on the same registry is an error, not a panic.
	if _, err := NewScraper(p, ScrapeConfig{}, opt); err == nil {
		t.Fatal("duplicate registration accepted")
	}
}
