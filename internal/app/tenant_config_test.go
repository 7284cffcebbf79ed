package app

import (
	"strings"
	"testing"
)

func TestTenantAndTelemetryConfig(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, yaml, wantErr string }{
		{"defaults: no tenants", "", ""},
		{"attribute", "tenant: {trust: attribute, attribute: connection.uri_san_peer_certificate, trim_prefix: 'spiffe://x/'}\n", ""},
		{"jwt with default namespace", "tenant: {trust: jwt, metadata: {path: [jwt_payload, tenant]}, header: x-tenant, labels: true, allow: [acme]}\n", ""},
		{"header", "tenant: {trust: header, header: x-tenant}\ntelemetry: {capture_prompts: true}\n", ""},
		{"unknown trust", "tenant: {trust: cookie}\n", `tenant.trust: want attribute, jwt or header, got "cookie"`},
		{"attribute without expression", "tenant: {trust: attribute}\n", "tenant.attribute: required"},
		{"jwt without path", "tenant: {trust: jwt}\n", "tenant.metadata: namespace and path required"},
		{"header without name", "tenant: {trust: header}\n", "tenant.header: required"},
		{"upper-case header", "tenant: {trust: header, header: X-Tenant}\n", "tenant.header: want a lower-case header name"},
		{"labels without source", "tenant: {labels: true}\n", "tenant.labels: set without a tenant source"},
		{"allow without labels", "tenant: {trust: header, header: x-t, allow: [a]}\n", "tenant.allow: set without labels: true"},
		{"reserved allow value", "tenant: {trust: header, header: x-t, labels: true, allow: [other]}\n", `tenant.allow: "other" is reserved`},
		{"unknown telemetry key", "telemetry: {exporter: otlp}\n", "field exporter not found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := ParseConfig([]byte(tc.yaml))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if cfg.Tenant.Metadata.Namespace != "envoy.filters.http.jwt_authn" {
					t.Fatalf("metadata namespace default: %+v", cfg.Tenant)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
