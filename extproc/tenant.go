package extproc

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// TenantTrust names the one source a tenant identity is taken from.
type TenantTrust string

// Tenant sources. Only TrustAttribute and TrustJWT are facts Envoy
// established; TrustHeader believes whatever sent the header and is safe
// only when every request passes a proxy that sets or strips that header
// before Envoy.
const (
	TrustNone      TenantTrust = ""          // no tenant identity
	TrustAttribute TenantTrust = "attribute" // an Envoy request attribute, e.g. the mTLS peer's URI SAN
	TrustJWT       TenantTrust = "jwt"       // a claim jwt_authn verified, forwarded as metadata
	TrustHeader    TenantTrust = "header"    // a request header (trusted blindly)
)

// attributesNamespace is the key under which Envoy's ext_proc filter sends
// the request_attributes it evaluated.
const attributesNamespace = "envoy.filters.http.ext_proc"

// maxTenantLen bounds a tenant identity; longer values are rejected.
const maxTenantLen = 128

// TenantConfig says where the tenant identity comes from and how it is
// labelled on metrics: the tenant section of warmpath's configuration. The
// zero value has no tenants; DefaultTenantConfig adds jwt_authn's
// metadata namespace.
type TenantConfig struct {
	// Trust is "" (default: no tenants), "attribute" (an Envoy request
	// attribute such as the mTLS peer's URI SAN), "jwt" (a claim verified by
	// Envoy's jwt_authn and forwarded as metadata) or "header" (a request
	// header, believed blindly: WARNING, only safe when a proxy in front of
	// Envoy always sets or strips it).
	Trust TenantTrust `yaml:"trust"`
	// Attribute is the request attribute expression exactly as listed in the
	// ext_proc filter's request_attributes (trust: attribute), e.g.
	// "connection.uri_san_peer_certificate".
	Attribute string `yaml:"attribute"`
	// Metadata locates the claim in the forwarded dynamic metadata (trust:
	// jwt): namespace default envoy.filters.http.jwt_authn, path e.g.
	// [jwt_payload, tenant] for payload_in_metadata: jwt_payload.
	Metadata TenantMetadata `yaml:"metadata"`
	// TrimPrefix is removed from the front of the value (for instance a
	// SPIFFE trust-domain prefix); a value without it is rejected.
	TrimPrefix string `yaml:"trim_prefix"`
	// Header is the tenant header (required for trust: header). Under every
	// trust warmpath removes it from the upstream request; under attribute
	// and jwt a client-set copy is ignored and counted.
	Header string `yaml:"header"`
	// Labels adds a tenant label to the GenAI request metrics. Default false.
	Labels bool `yaml:"labels"`
	// Allow lists the tenants that get their own label value; every other
	// tenant is "other", requests without one "none".
	Allow []string `yaml:"allow"`
}

// TenantMetadata is a path into forwarded dynamic metadata.
type TenantMetadata struct {
	Namespace string   `yaml:"namespace"`
	Path      []string `yaml:"path"`
}

// DefaultTenantConfig returns no tenants, with jwt_authn's namespace ready
// for trust: jwt.
func DefaultTenantConfig() TenantConfig {
	return TenantConfig{Metadata: TenantMetadata{Namespace: "envoy.filters.http.jwt_authn"}}
}

// Validate reports every invalid field, joined.
func (c *TenantConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch c.Trust {
	case TrustNone:
	case TrustAttribute:
		if c.Attribute == "" {
			bad("attribute: required with trust: attribute")
		}
	case TrustJWT:
		if c.Metadata.Namespace == "" || len(c.Metadata.Path) == 0 {
			bad("metadata: namespace and path required with trust: jwt")
		}
	case TrustHeader:
		if c.Header == "" {
			bad("header: required with trust: header")
		}
	default:
		bad("trust: want attribute, jwt or header, got %q", c.Trust)
	}
	if c.Header != "" && !validHeaderName(c.Header) {
		bad("header: want a lower-case header name, got %q", c.Header)
	}
	if c.Labels && c.Trust == TrustNone {
		bad("labels: set without a tenant source (trust)")
	}
	if len(c.Allow) > 0 && !c.Labels {
		bad("allow: set without labels: true")
	}
	for _, a := range c.Allow {
		if a == tenantLabelOther || a == tenantLabelNone || a == "" {
			bad("allow: %q is reserved", a)
		}
	}
	return errors.Join(errs...)
}

// WithTenant takes tenant identities from c's source.
func WithTenant(c TenantConfig) Option { return func(s *Server) { s.tenant = c } }

// Tenant identity outcomes counted in warmpath_tenant_identity_total.
const (
	tenantOK            = "ok"
	tenantMissing       = "missing"
	tenantInvalid       = "invalid"
	tenantHeaderIgnored = "client_header_ignored"
	tenantLabelNone     = "none"
	tenantLabelOther    = "other"
)

// identify sets the request's Tenant from the configured trusted source of
// the first request message.
func (s *Server) identify(ex *exchange, r *extprocv3.ProcessingRequest) {
	c := &s.tenant
	if c.Trust == TrustNone {
		return
	}
	raw, present := "", false
	switch c.Trust {
	case TrustAttribute:
		v, ok := r.GetAttributes()[attributesNamespace].GetFields()[c.Attribute]
		raw, present = v.GetStringValue(), ok
	case TrustJWT:
		raw, present = metadataString(r, c.Metadata.Namespace, c.Metadata.Path)
	case TrustHeader:
		raw, present = headerCarrier(r.GetRequestHeaders().GetHeaders().GetHeaders()).Get(c.Header), true
	}
	if c.Trust != TrustHeader && c.Header != "" &&
		headerCarrier(r.GetRequestHeaders().GetHeaders().GetHeaders()).Get(c.Header) != "" {
		s.om.tenants.WithLabelValues(tenantHeaderIgnored).Inc()
	}
	if !present || raw == "" {
		s.om.tenants.WithLabelValues(tenantMissing).Inc()
		return
	}
	t, ok := strings.CutPrefix(raw, c.TrimPrefix)
	if !ok || !validTenant(t) {
		s.om.tenants.WithLabelValues(tenantInvalid).Inc()
		ex.log.Warn("tenant identity rejected", "source", string(c.Trust), "len", len(raw))
		return
	}
	s.om.tenants.WithLabelValues(tenantOK).Inc()
	ex.route.req.Tenant = t
}

// metadataString walks forwarded dynamic metadata to a string value.
func metadataString(r *extprocv3.ProcessingRequest, ns string, path []string) (string, bool) {
	st := r.GetMetadataContext().GetFilterMetadata()[ns]
	if st == nil || len(path) == 0 {
		return "", false
	}
	for _, k := range path[:len(path)-1] {
		st = st.GetFields()[k].GetStructValue()
		if st == nil {
			return "", false
		}
	}
	v, ok := st.GetFields()[path[len(path)-1]]
	return v.GetStringValue(), ok
}

// validTenant accepts 1 to 128 printable ASCII characters without spaces.
func validTenant(t string) bool {
	if t == "" || len(t) > maxTenantLen {
		return false
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] > '~' {
			return false
		}
	}
	return true
}

// tenantLabel maps a tenant to its metric label value: itself when
// allowlisted, "other" otherwise, "none" when there is no tenant.
func (c *TenantConfig) tenantLabel(t string) string {
	switch {
	case t == "":
		return tenantLabelNone
	case slices.Contains(c.Allow, t):
		return t
	}
	return tenantLabelOther
}

// stripTenantHeader removes the tenant header from the upstream request.
func (c *TenantConfig) stripTenantHeader(hm *extprocv3.HeaderMutation) {
	if c.Header != "" {
		hm.RemoveHeaders = append(hm.RemoveHeaders, c.Header)
	}
}
