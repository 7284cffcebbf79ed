package envoy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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

func TestBootstrapsDecodeStrictly(t *testing.T) {
	t.Parallel()
	for _, p := range bootstraps(t) {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			bs, err := LoadBootstrap(p)
			if err != nil {
				t.Fatal(err)
			}
			if len(bs.GetStaticResources().GetListeners()) == 0 {
				t.Fatal("no listener")
			}
		})
	}
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
