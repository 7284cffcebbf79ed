package envoy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/internal/mtls/mtlstest"
)

// tlsPlaceholder is the directory the bootstraps name for TLS material.
const tlsPlaceholder = "/etc/warmpath/tls/"

// withTestTLS returns path itself, or, when the bootstrap names files under
// /etc/warmpath/tls/, a copy pointing at a generated self-signed server
// certificate and client CA so that Envoy can load it.
func withTestTLS(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), tlsPlaceholder) {
		return path
	}
	dir := t.TempDir()
	ca := mtlstest.NewCA(t, "warmpath-test")
	cert, key := ca.Issue(t, "server")
	for name, src := range map[string]string{"server.crt": cert, "server.key": key, "clients-ca.crt": ca.CertFile} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(out, []byte(strings.ReplaceAll(string(b), tlsPlaceholder, dir+"/")), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}
