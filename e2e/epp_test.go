package e2e

import (
	"fmt"
	"io"
	"testing"
)

// TestRealEnvoyOriginalDstTakesOneEndpoint pins why extproc.fallbacks
// defaults to 0: the Endpoint Picker protocol lets the destination be an
// ip:port,ip:port list, but Envoy's ORIGINAL_DST cluster (envoy/envoy.yaml,
// and the Inference Extension's own raw-Envoy test configuration) reads the
// header as one address, so a list finds no host. Fallbacks need a proxy
// that walks the list (the override_host load balancer,
// envoy/envoy-override-host.yaml; package eppconformance tests that).
func TestRealEnvoyOriginalDstTakesOneEndpoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fallbacks int
		want      int
	}{
		{fallbacks: 0, want: 200},
		{fallbacks: 1, want: 503},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("fallbacks %d", tt.fallbacks), func(t *testing.T) {
			t.Parallel()
			ups := []*upstream{newUpstream(t, "w0"), newUpstream(t, "w1")}
			wp := startWarmpath(t, fmt.Sprintf(`policy: round-robin
models:
  - name: qwen3
workers:
  - {name: w0, address: %q, models: [qwen3]}
  - {name: w1, address: %q, models: [qwen3]}
extproc:
  fallbacks: %d
  drain_timeout: 2s
`, ups[0].addr(), ups[1].addr(), tt.fallbacks))
			e := startEnvoy(t, "envoy/envoy.yaml", wp.ExtProc)
			resp := post(t, t.Context(), "http://"+e.Listeners["llm_ingress"]+"/v1/chat/completions", chatReq)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, b)
			}
		})
	}
}
