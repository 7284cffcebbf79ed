package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/warmpath/warmpath/e2e/envoytest"
	"github.com/warmpath/warmpath/envoy"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate whose URI SAN names a tenant, all made for this test.
type testPKI struct {
	dir    string
	pool   *x509.CertPool
	client tls.Certificate
}

func newTestPKI(t *testing.T, clientSAN string) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir(), pool: x509.NewCertPool()}
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "warmpath test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p.pool.AddCert(ca)
	issue := func(serial int64, tmpl *x509.Certificate) ([]byte, *ecdsa.PrivateKey) {
		key := newKey(t)
		tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = big.NewInt(serial), time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	srvDER, srvKey := issue(2, &x509.Certificate{Subject: pkix.Name{CommonName: "envoy"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	san, err := url.Parse(clientSAN)
	if err != nil {
		t.Fatal(err)
	}
	cliDER, cliKey := issue(3, &x509.Certificate{Subject: pkix.Name{CommonName: "client"},
		URIs: []*url.URL{san}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(p.dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("clients-ca.crt", "CERTIFICATE", caDER)
	write("server.crt", "CERTIFICATE", srvDER)
	write("server.key", "PRIVATE KEY", pkcs8(t, srvKey))
	p.client = tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}
	return p
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pkcs8(t *testing.T, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	b, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var b64 = base64.RawURLEncoding

// jwks is the public JSON Web Key Set of k.
func jwks(t *testing.T, k *ecdsa.PrivateKey) string {
	t.Helper()
	pub, err := k.PublicKey.ECDH()
	if err != nil {
		t.Fatal(err)
	}
	xy := pub.Bytes()[1:] // uncompressed point: 0x04 || X || Y
	return fmt.Sprintf(`{"keys":[{"kty":"EC","crv":"P-256","alg":"ES256","kid":"k1","use":"sig","x":%q,"y":%q}]}`,
		b64.EncodeToString(xy[:32]), b64.EncodeToString(xy[32:]))
}

// signJWT returns an ES256 JWT with the given claims.
func signJWT(t *testing.T, k *ecdsa.PrivateKey, claims map[string]any) string {
	t.Helper()
	body, _ := json.Marshal(claims)
	in := b64.EncodeToString([]byte(`{"alg":"ES256","typ":"JWT","kid":"k1"}`)) + "." + b64.EncodeToString(body)
	sum := sha256.Sum256([]byte(in))
	r, s, err := ecdsa.Sign(rand.Reader, k, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return in + "." + b64.EncodeToString(sig)
}

var inlineJWKS = regexp.MustCompile(`inline_string: '[^']*'`)

// startIdentityEnvoy runs envoy/envoy-mtls-jwt.yaml with the test's TLS
// files and JWKS, listeners on :0 and the warmpath cluster at extproc.
func startIdentityEnvoy(t *testing.T, pki *testPKI, keys, extproc string) *envoytest.Envoy {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(envoytest.RepoRoot(t), "envoy/envoy-mtls-jwt.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	y := strings.ReplaceAll(string(src), "/etc/warmpath/tls/", pki.dir+"/")
	y = inlineJWKS.ReplaceAllLiteralString(y, "inline_string: '"+keys+"'")
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	bs, err := envoy.LoadBootstrap(path)
	if err != nil {
		t.Fatal(err)
	}
	bs.Admin.Address.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 0}
	for _, l := range bs.StaticResources.Listeners {
		l.Address.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 0}
	}
	host, port, _ := strings.Cut(extproc, ":")
	pn, _ := strconv.Atoi(port)
	for _, c := range bs.StaticResources.Clusters {
		if c.Name == "warmpath" {
			setEndpoint(c, host, pn)
		}
	}
	b, err := envoy.MarshalBootstrap(bs)
	if err != nil {
		t.Fatal(err)
	}
	return envoytest.Start(t, b)
}

const tenantLabels = `  header: x-tenant
  labels: true
  allow: [acme, globex]
`

// checkTenant asserts that exactly the requests so far were counted for
// tenant acme, none for the client's forged globex, and that the upstream
// never saw the tenant header.
func checkTenant(t *testing.T, wp *warmpathProc, up *headerUpstream, n float64) {
	t.Helper()
	waitFor(t, "the request metrics", func() bool {
		return wp.metric(t, "gen_ai_server_request_duration_seconds_count", `tenant="acme"`) == n
	})
	if got := wp.metric(t, "gen_ai_server_request_duration_seconds_count", `tenant="globex"`); got != 0 {
		t.Fatalf("%v requests counted for the forged tenant", got)
	}
	if got := wp.metric(t, "warmpath_tenant_identity_total", `result="client_header_ignored"`); got != n {
		t.Fatalf("client_header_ignored = %v, want %v", got, n)
	}
	if h := up.last(t); h.Get("x-tenant") != "" {
		t.Fatalf("upstream received x-tenant %q", h.Get("x-tenant"))
	}
}

func TestTenantFromClientCertificate(t *testing.T) {
	pki := newTestPKI(t, "spiffe://warmpath.test/tenant/acme")
	up := newHeaderUpstream(t)
	wp := startWarmpath(t, fmt.Sprintf(`policy: round-robin
models: [{name: qwen3}]
workers: [{name: w0, address: %q, models: [qwen3]}]
tenant:
  trust: attribute
  attribute: connection.uri_san_peer_certificate
  trim_prefix: spiffe://warmpath.test/tenant/
`+tenantLabels, up.addr()))
	e := startIdentityEnvoy(t, pki, jwks(t, newKey(t)), wp.ExtProc)
	base := "https://" + e.Listeners["llm_mtls"]
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}}}

	req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/v1/chat/completions", strings.NewReader(chatReq))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-tenant", "globex") // a client claiming another tenant
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	checkTenant(t, wp, up, 1)

	// Without a client certificate the TLS handshake fails.
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool}}}
	if resp, err := anon.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(chatReq)); err == nil {
		resp.Body.Close()
		t.Fatalf("request without a client certificate got status %d", resp.StatusCode)
	}
}

func TestTenantFromVerifiedJWT(t *testing.T) {
	key := newKey(t)
	up := newHeaderUpstream(t)
	wp := startWarmpath(t, fmt.Sprintf(`policy: round-robin
models: [{name: qwen3}]
workers: [{name: w0, address: %q, models: [qwen3]}]
tenant:
  trust: jwt
  metadata: {path: [jwt_payload, tenant]}
`+tenantLabels, up.addr()))
	e := startIdentityEnvoy(t, newTestPKI(t, "spiffe://unused"), jwks(t, key), wp.ExtProc)
	url := "http://" + e.Listeners["llm_jwt"] + "/v1/chat/completions"
	claims := map[string]any{"iss": "https://idp.warmpath.example", "aud": "warmpath", "sub": "u1",
		"tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()}

	tests := []struct {
		name   string
		token  string
		status int
	}{
		{"no token", "", 401},
		{"token from another key", signJWT(t, newKey(t), claims), 401},
		{"verified token", signJWT(t, key, claims), 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hdr := []string{"x-tenant", "globex"}
			if tc.token != "" {
				hdr = append(hdr, "authorization", "Bearer "+tc.token)
			}
			resp := post(t, t.Context(), url, chatReq, hdr...)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
		})
	}
	checkTenant(t, wp, up, 1)
}
