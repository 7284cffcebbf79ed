package envoy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"

	"github.com/warmpath/warmpath/e2e/envoytest"
)

func bootstraps(t *testing.T) []string {
	t.Helper()
	ms, err := filepath.Glob("envoy*.yaml")
	if err != nil || len(ms) < 2 {
		t.Fatalf("bootstraps: %v %v", ms, err)
	}
	return ms
}

// eachBootstrap runs check, in parallel, on every bootstrap decoded
// strictly, as a subtest named after its file.
func eachBootstrap(t *testing.T, check func(t *testing.T, bs *bootstrapv3.Bootstrap)) {
	t.Helper()
	for _, p := range bootstraps(t) {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			bs, err := LoadBootstrap(p)
			if err != nil {
				t.Fatal(err)
			}
			check(t, bs)
		})
	}
}

func TestBootstrapsDecodeStrictly(t *testing.T) {
	t.Parallel()
	eachBootstrap(t, func(t *testing.T, bs *bootstrapv3.Bootstrap) {
		if len(bs.GetStaticResources().GetListeners()) == 0 {
			t.Fatal("no listener")
		}
	})
}

// failover is what lets one warmpath replica die without failing the
// requests after it: the ext_proc streams' retry policy and the warmpath
// cluster's health check and outlier detection.
type failover struct {
	retries []*corev3.RetryPolicy // one per ext_proc filter
	health  []*corev3.HealthCheck
	outlier *clusterv3.OutlierDetection
}

func failoverOf(t *testing.T, bs *bootstrapv3.Bootstrap) failover {
	t.Helper()
	var f failover
	for _, l := range bs.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, nf := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if !nf.GetTypedConfig().MessageIs(&hcm) {
					continue
				}
				if err := nf.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
					t.Fatalf("listener %s: %v", l.GetName(), err)
				}
				for _, hf := range hcm.GetHttpFilters() {
					var ep filterv3.ExternalProcessor
					if hf.GetTypedConfig().MessageIs(&ep) {
						if err := hf.GetTypedConfig().UnmarshalTo(&ep); err != nil {
							t.Fatal(err)
						}
						f.retries = append(f.retries, ep.GetGrpcService().GetRetryPolicy())
					}
				}
			}
		}
	}
	for _, c := range bs.GetStaticResources().GetClusters() {
		if c.GetName() == "warmpath" {
			f.health, f.outlier = c.GetHealthChecks(), c.GetOutlierDetection()
		}
	}
	return f
}

// referenceFailover is envoy.yaml's failover, the one
// e2e/replicas_test.go proves with a replica killed mid-run.
func referenceFailover(t *testing.T) failover {
	t.Helper()
	ref, err := LoadBootstrap("envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f := failoverOf(t, ref)
	if len(f.retries) != 1 || f.retries[0] == nil || f.outlier == nil || len(f.health) != 1 || f.health[0].GetGrpcHealthCheck() == nil {
		t.Fatalf("envoy.yaml: want a retried ext_proc stream and a health-checked, outlier-detected warmpath cluster, got %+v", f)
	}
	return f
}

// differs reports how f is not want's failover, nil when it is the same.
func (f failover) differs(want failover) error {
	var errs []error
	if len(f.retries) == 0 {
		errs = append(errs, errors.New("no ext_proc retry_policy"))
	}
	for i, r := range f.retries {
		if !proto.Equal(r, want.retries[0]) {
			errs = append(errs, fmt.Errorf("ext_proc filter %d: retry_policy %v, want envoy.yaml's %v", i, r, want.retries[0]))
		}
	}
	if len(f.health) != 1 || !proto.Equal(f.health[0], want.health[0]) {
		errs = append(errs, fmt.Errorf("warmpath health_checks %v, want envoy.yaml's %v", f.health, want.health))
	}
	if !proto.Equal(f.outlier, want.outlier) {
		errs = append(errs, fmt.Errorf("warmpath outlier_detection %v, want envoy.yaml's %v", f.outlier, want.outlier))
	}
	return errors.Join(errs...)
}

// Every bootstrap fails over between warmpath replicas as envoy.yaml does.
func TestBootstrapsFailOverAlike(t *testing.T) {
	t.Parallel()
	want := referenceFailover(t)
	eachBootstrap(t, func(t *testing.T, bs *bootstrapv3.Bootstrap) {
		if err := failoverOf(t, bs).differs(want); err != nil {
			t.Error(err)
		}
	})
}

func TestUnknownFieldIsRejected(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(b), "failure_mode_allow: false", "failure_mode_allow: false\n              failure_mode_alow: true", 1)
	p := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadBootstrap(p); err == nil || !strings.Contains(err.Error(), "failure_mode_alow") {
		t.Fatalf("want an error naming the unknown field, got %v", err)
	}
}

// TestRealEnvoyValidates runs the real binary's --mode validate on every
// bootstrap (skipped where no Envoy is installed, except in CI).
func TestRealEnvoyValidates(t *testing.T) {
	bin := envoytest.Binary(t)
	for _, p := range bootstraps(t) {
		t.Run(p, func(t *testing.T) { envoytest.Validate(t, bin, withTestTLS(t, p)) })
	}
}
