//go:build kube

package chartest_test

import (
	"context"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/e2e/kubeapi"
)

// TestChartOnARealAPIServer creates what the chart renders (for the
// defaults, InferencePool mode and the monitoring values) on a real API
// server with strict field validation, as `helm install` would send it.
// The ServiceMonitor is left out: the Prometheus Operator's CRD is not
// installed. Run by `go tool task e2e:kube`.
func TestChartOnARealAPIServer(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"defaults.yaml", "inferencepool.yaml", "monitoring.yaml"} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			rendered, err := render(ctx, loadChart(t), readValues(t, filepath.Join("testdata", file)))
			if err != nil {
				t.Fatal(err)
			}
			var docs []string
			for _, name := range slices.Sorted(func(yield func(string) bool) {
				for k := range rendered {
					if !yield(k) {
						return
					}
				}
			}) {
				if path.Ext(name) != ".yaml" {
					continue // NOTES.txt
				}
				for _, doc := range strings.Split(rendered[name], "\n---\n") {
					if strings.TrimSpace(doc) == "" || strings.Contains(doc, "\nkind: ServiceMonitor\n") {
						continue
					}
					docs = append(docs, doc)
				}
			}
			if len(docs) == 0 {
				t.Fatal("nothing rendered")
			}
			s := kubeapi.Start(t, "../../..").StartAPIServer(kubeapi.Options{})
			if err := s.Apply(ctx, []byte(strings.Join(docs, "\n---\n"))); err != nil {
				t.Fatal(err)
			}
		})
	}
}
