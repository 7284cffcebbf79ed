package extproc

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpath/warmpath/scoring"
)

// TestSLOHeaders checks that a request's latency targets reach the picker
// when the configuration trusts them, and that a bad value is ignored,
// counted and loses nothing: the request is routed on the model's targets.
func TestSLOHeaders(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	tests := []struct {
		name    string
		trusted bool
		headers []string
		want    scoring.SLO
		result  string
	}{
		{name: "both targets", trusted: true, headers: []string{sloTTFTHeader, "250", sloTPOTHeader, "12.5"},
			want: scoring.SLO{TTFT: 250 * ms, TPOT: 12500 * time.Microsecond}, result: "ok"},
		{name: "not a number", trusted: true, headers: []string{sloTTFTHeader, "fast"}, result: "invalid"},
		{name: "zero", trusted: true, headers: []string{sloTPOTHeader, "0"}, result: "invalid"},
		{name: "negative", trusted: true, headers: []string{sloTTFTHeader, "-5"}, result: "invalid"},
		{name: "over an hour", trusted: true, headers: []string{sloTTFTHeader, "3600001"}, result: "invalid"},
		{name: "not a finite number", trusted: true, headers: []string{sloTTFTHeader, "NaN"}, result: "invalid"},
		{name: "untrusted", trusted: false, headers: []string{sloTTFTHeader, "250"}, result: "ignored"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.SLOHeaders = tt.trusted
			h := newHarness(t, cfg)
			e := h.open(t, fullDuplex, fullDuplex)
			e.requestHeaders("POST", "/v1/chat/completions", false, tt.headers...)
			e.requestBody(chatBody, true)
			r := e.recv()
			checkRouted(t, r.GetRequestHeaders().GetResponse(), r, "10.0.0.1:8000")
			if got := h.picker.lastRequest(t).SLO; got != tt.want {
				t.Errorf("targets %+v, want %+v", got, tt.want)
			}
			if got := testutil.ToFloat64(h.srv.m.sloHeaders.WithLabelValues(tt.result)); got != float64(len(tt.headers)/2) {
				t.Errorf("warmpath_slo_headers_total{result=%q} = %v, want %d", tt.result, got, len(tt.headers)/2)
			}
		})
	}
}
