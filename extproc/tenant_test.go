package extproc

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/structpb"
)

const sanAttr = "connection.uri_san_peer_certificate"

// tenantRequest is the first request message as Envoy would send it: the
// headers, the evaluated request_attributes and forwarded metadata.
func tenantRequest(attr map[string]any, md map[string]any, headers ...string) *extprocv3.ProcessingRequest {
	r := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(append([]string{":method", "POST", ":path", "/v1/chat/completions"}, headers...)...)}}}
	if attr != nil {
		st, _ := structpb.NewStruct(attr)
		r.Attributes = map[string]*structpb.Struct{"envoy.filters.http.ext_proc": st}
	}
	if md != nil {
		st, _ := structpb.NewStruct(md)
		r.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.filters.http.jwt_authn": st}}
	}
	return r
}

func TestTenantIdentity(t *testing.T) {
	t.Parallel()
	attrCfg := TenantConfig{Trust: TrustAttribute, Attribute: sanAttr, TrimPrefix: "spiffe://warmpath.test/tenant/", Header: "x-tenant"}
	jwtCfg := TenantConfig{Trust: TrustJWT, Metadata: TenantMetadata{Namespace: "envoy.filters.http.jwt_authn", Path: []string{"jwt_payload", "tenant"}}, Header: "x-tenant"}
	hdrCfg := TenantConfig{Trust: TrustHeader, Header: "x-tenant"}
	tests := []struct {
		name   string
		cfg    TenantConfig
		req    *extprocv3.ProcessingRequest
		want   string
		result string // the warmpath_tenant_identity_total result counted, "" for none
		forged bool   // client_header_ignored counted as well
	}{
		{name: "no source", cfg: TenantConfig{}, req: tenantRequest(nil, nil, "x-tenant", "acme"), want: ""},
		{name: "attribute", cfg: attrCfg, req: tenantRequest(map[string]any{sanAttr: "spiffe://warmpath.test/tenant/acme"}, nil), want: "acme", result: tenantOK},
		{name: "attribute ignores client header", cfg: attrCfg,
			req:  tenantRequest(map[string]any{sanAttr: "spiffe://warmpath.test/tenant/acme"}, nil, "x-tenant", "globex"),
			want: "acme", result: tenantOK, forged: true},
		{name: "attribute missing, header does not stand in", cfg: attrCfg, req: tenantRequest(nil, nil, "x-tenant", "globex"), want: "", result: tenantMissing, forged: true},
		{name: "attribute wrong prefix", cfg: attrCfg, req: tenantRequest(map[string]any{sanAttr: "spiffe://evil.test/tenant/acme"}, nil), want: "", result: tenantInvalid},
		{name: "jwt claim", cfg: jwtCfg, req: tenantRequest(nil, map[string]any{"jwt_payload": map[string]any{"tenant": "acme", "sub": "u"}}), want: "acme", result: tenantOK},
		{name: "jwt ignores client header", cfg: jwtCfg,
			req:  tenantRequest(nil, map[string]any{"jwt_payload": map[string]any{"tenant": "acme"}}, "x-tenant", "globex"),
			want: "acme", result: tenantOK, forged: true},
		{name: "jwt claim not a string", cfg: jwtCfg, req: tenantRequest(nil, map[string]any{"jwt_payload": map[string]any{"tenant": 7.0}}), want: "", result: tenantMissing},
		{name: "jwt path through a non-object", cfg: jwtCfg, req: tenantRequest(nil, map[string]any{"jwt_payload": "x"}), want: "", result: tenantMissing},
		{name: "header trust", cfg: hdrCfg, req: tenantRequest(nil, nil, "x-tenant", "acme"), want: "acme", result: tenantOK},
		{name: "header with spaces", cfg: hdrCfg, req: tenantRequest(nil, nil, "x-tenant", "ac me"), want: "", result: tenantInvalid},
		{name: "header too long", cfg: hdrCfg, req: tenantRequest(nil, nil, "x-tenant", strings.Repeat("a", 129)), want: "", result: tenantInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, testConfig(), WithTenant(tc.cfg))
			e := h.open(t, fullDuplex, fullDuplex)
			e.send(tc.req)
			e.requestBody(chatBody, true)
			r := e.recv()
			cr := r.GetRequestHeaders().GetResponse()
			if got := h.picker.lastRequest(t).Tenant; got != tc.want {
				t.Fatalf("tenant %q, want %q", got, tc.want)
			}
			removed := cr.GetHeaderMutation().GetRemoveHeaders()
			if tc.cfg.Header != "" && !slices.Equal(removed, []string{tc.cfg.Header}) {
				t.Fatalf("remove_headers %v, want the tenant header removed upstream", removed)
			}
			if tc.cfg.Header == "" && len(removed) != 0 {
				t.Fatalf("remove_headers %v", removed)
			}
			for _, res := range []string{tenantOK, tenantMissing, tenantInvalid} {
				want := 0.0
				if res == tc.result {
					want = 1
				}
				if got := testutil.ToFloat64(h.srv.om.tenants.WithLabelValues(res)); got != want {
					t.Errorf("tenant result %s = %v, want %v", res, got, want)
				}
			}
			forged := 0.0
			if tc.forged {
				forged = 1
			}
			if got := testutil.ToFloat64(h.srv.om.tenants.WithLabelValues(tenantHeaderIgnored)); got != forged {
				t.Errorf("client_header_ignored = %v, want %v", got, forged)
			}
		})
	}
}

func TestTenantLabel(t *testing.T) {
	t.Parallel()
	c := TenantConfig{Allow: []string{"acme"}}
	for in, want := range map[string]string{"acme": "acme", "globex": "other", "": "none"} {
		if got := c.tenantLabel(in); got != want {
			t.Errorf("tenantLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzTenantFromMetadata(f *testing.F) {
	f.Add("jwt_payload", "tenant", "acme")
	f.Add("", "", "")
	f.Add("a.b", "\x00", strings.Repeat("z", 200))
	f.Fuzz(func(t *testing.T, k1, k2, v string) {
		st, err := structpb.NewStruct(map[string]any{k1: map[string]any{k2: v}})
		if err != nil {
			return // not valid UTF-8: protobuf cannot carry it
		}
		r := &extprocv3.ProcessingRequest{MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"ns": st}}}
		got, ok := metadataString(r, "ns", []string{k1, k2})
		if !ok || got != v {
			t.Fatalf("metadataString = %q %v, want %q", got, ok, v)
		}
		if validTenant(v) && (len(v) > maxTenantLen || strings.ContainsAny(v, " \t\n")) {
			t.Fatalf("validTenant accepted %q", v)
		}
	})
}

// TestLocalReplyOfAnEarlierFilterPassesThrough: when jwt_authn (or any
// filter before ext_proc) rejects a request, real Envoy sends its local
// reply's response headers on a stream that never saw request headers.
func TestLocalReplyOfAnEarlierFilterPassesThrough(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig())
	e := h.open(t, fullDuplex, fullDuplex)
	e.responseHeaders("401", "text/plain", false)
	if e.recv().GetResponseHeaders() == nil {
		t.Fatal("want a response_headers reply")
	}
	e.responseBody("Jwt is missing", true)
	if sr := e.recv().GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse(); string(sr.GetBody()) != "Jwt is missing" || !sr.GetEndOfStream() {
		t.Fatalf("body echoed as %v", sr)
	}
	e.stream.CloseSend()
	if err := e.recvErr(); !errors.Is(err, io.EOF) {
		t.Fatalf("want a clean end, got %v", err)
	}
	if got := testutil.ToFloat64(h.srv.m.streamErrors.WithLabelValues("out_of_order")); got != 0 {
		t.Fatalf("out_of_order = %v", got)
	}
}
