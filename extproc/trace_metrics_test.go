package extproc

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/warmpath/warmpath/internal/clocktest"
	"github.com/warmpath/warmpath/scoring"
	"github.com/warmpath/warmpath/telemetry"
)

var update = flag.Bool("update", false, "rewrite the golden exposition files in testdata/")

// observeMetricNames are the series this branch adds, compared against the
// golden files.
var observeMetricNames = []string{
	"warmpath_decisions_total", "warmpath_tokenize_path_total",
	"warmpath_predicted_ttft_seconds", "warmpath_ttft_prediction_error_seconds", "warmpath_ttft_prediction_relative_error",
	"warmpath_cached_tokens_total", "warmpath_prompt_tokens_total", "warmpath_tenant_identity_total",
	"gen_ai_server_time_to_first_token_seconds", "gen_ai_server_request_duration_seconds",
	"gen_ai_server_time_per_output_token_seconds", "gen_ai_client_token_usage",
	"gen_ai_client_inference_usage_input_tokens_total", "gen_ai_client_inference_usage_output_tokens_total",
	"gen_ai_client_inference_usage_cache_read_input_tokens_total",
}

// jwtRequestHeaders sends request headers with forwarded jwt_authn metadata.
func jwtRequestHeaders(e *envoy, tenant string) {
	e.t.Helper()
	md := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: headerMap(":method", "POST", ":path", "/v1/chat/completions", "x-tenant", "forged")}},
	}
	if tenant != "" {
		payload, _ := structpb.NewStruct(map[string]any{"jwt_payload": map[string]any{"tenant": tenant, "sub": "u1"}})
		md.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.filters.http.jwt_authn": payload}}
	}
	e.send(md)
}

func TestMetricsExpositionGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		semconv telemetry.Semconv
		tenant  TenantConfig
	}{
		{name: "v1.41", semconv: telemetry.Semconv{}},
		{name: "latest-tenants", semconv: telemetry.Semconv{Latest: true}, tenant: TenantConfig{
			Trust: TrustJWT, Metadata: TenantMetadata{Namespace: "envoy.filters.http.jwt_authn", Path: []string{"jwt_payload", "tenant"}},
			Header: "x-tenant", Labels: true, Allow: []string{"acme"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The test moves the clock by hand between messages: at(d) sets
			// it to t0+d, and every request replays the same offsets.
			t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
			clk := clocktest.New(t0)
			at := func(d time.Duration) { clk.Set(t0.Add(d)) }
			p := newDecisionPicker(scoring.ModeApproximate, "none")
			tr := newTracedAt(t, p, tc.semconv, clk.Now, WithTenant(tc.tenant))
			// Three requests: tenants acme, globex (not allowlisted) and none.
			for _, tenant := range []string{"acme", "globex", ""} {
				at(0)
				e := tr.open(t)
				jwtRequestHeaders(e, tenant)
				e.requestBody(chatBody, true)
				routeHeaders(t, e)
				at(50 * time.Millisecond)
				e.responseHeaders("200", "text/event-stream", false)
				e.recv()
				chunks := strings.SplitAfter(openAIStream, "\n\n")
				for i, c := range chunks {
					switch i {
					case 2:
						at(100 * time.Millisecond) // first content token
					case 3:
						at(200 * time.Millisecond) // last token
					case 4:
						at(300 * time.Millisecond)
					}
					e.responseBody(c, i == len(chunks)-1)
					e.recv()
				}
				p.wait(t)
				e.stream.CloseSend()
				e.recvErr()
			}
			tr.spansEnded(t, 6)
			golden := filepath.Join("testdata", "observe_metrics_"+tc.name+".golden")
			if *update {
				var buf bytes.Buffer
				mfs, err := tr.reg.Gather()
				if err != nil {
					t.Fatal(err)
				}
				for _, mf := range mfs {
					for _, n := range observeMetricNames {
						if mf.GetName() == n {
							if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
				if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			f, err := os.Open(golden)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := testutil.GatherAndCompare(tr.reg, f, observeMetricNames...); err != nil {
				t.Fatal(err)
			}
		})
	}
}
