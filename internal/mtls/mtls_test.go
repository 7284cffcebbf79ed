package mtls

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/warmpath/warmpath/internal/mtls/mtlstest"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// handshake serves one TLS connection with srv on loopback and dials it
// with cli, returning the client's and the server's handshake errors.
func handshake(t *testing.T, srv, cli *tls.Config) (client, server error) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		c, err := lis.Accept()
		if err != nil {
			server = err
			return
		}
		defer c.Close()
		tc := tls.Server(c, srv)
		server = tc.Handshake()
		if server == nil {
			_, _ = tc.Read(make([]byte, 1)) // until the client's close, so its own checks finish
		}
	})
	c, err := tls.Dial("tcp", lis.Addr().String(), cli)
	if err == nil {
		_, err = c.Write([]byte("x")) // TLS 1.3: the server's verdict on the client arrives after the handshake
		if err == nil {
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, err = c.Read(make([]byte, 1))
			if ne, ok := errors.AsType[net.Error](err); (ok && ne.Timeout()) || errors.Is(err, io.EOF) {
				err = nil // the server read the byte and closed: accepted
			}
		}
		c.Close()
	}
	wg.Wait()
	return err, server
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	ca, other := mtlstest.NewCA(t, "warmpath"), mtlstest.NewCA(t, "stranger")
	serverCert, serverKey := ca.Issue(t, "server")
	envoyCert, envoyKey := ca.Issue(t, "envoy")
	strangerCert, strangerKey := other.Issue(t, "stranger")
	srv, err := Server(Files{Cert: serverCert, Key: serverKey, ClientCA: ca.CertFile}, discard)
	if err != nil {
		t.Fatal(err)
	}
	peer, err := Client(Files{Cert: envoyCert, Key: envoyKey, ClientCA: ca.CertFile}, discard)
	if err != nil {
		t.Fatal(err)
	}
	if c, s := handshake(t, srv, peer); c != nil || s != nil {
		t.Fatalf("a client with a certificate of the CA: client %v, server %v", c, s)
	}
	noCert := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}
	if _, s := handshake(t, srv, noCert); s == nil {
		t.Error("a client without a certificate was accepted")
	}
	stranger, err := Client(Files{Cert: strangerCert, Key: strangerKey, ClientCA: ca.CertFile}, discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, s := handshake(t, srv, stranger); s == nil {
		t.Error("a client certificate of another CA was accepted")
	}
	// A client that trusts only the other CA refuses warmpath's server.
	wary, err := Client(Files{Cert: envoyCert, Key: envoyKey, ClientCA: other.CertFile}, discard)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := handshake(t, srv, wary); c == nil {
		t.Error("a server certificate of an untrusted CA was accepted by the client")
	}
}

// TestReload rotates the server's files to another CA's: after the check
// interval the new ones serve, and a broken file keeps the last good ones.
func TestReload(t *testing.T) {
	t.Parallel()
	ca, next := mtlstest.NewCA(t, "warmpath"), mtlstest.NewCA(t, "renewed")
	cert, key := ca.Issue(t, "server")
	dir := t.TempDir()
	files := Files{Cert: dir + "/tls.crt", Key: dir + "/tls.key", ClientCA: dir + "/ca.crt"}
	install := func(cert, key, caFile string) {
		for src, dst := range map[string]string{cert: files.Cert, key: files.Key, caFile: files.ClientCA} {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	install(cert, key, ca.CertFile)
	now := time.Unix(1000, 0)
	src := &source{f: files, now: func() time.Time { return now }, log: discard}
	srv, err := serverWith(src)
	if err != nil {
		t.Fatal(err)
	}
	oldCert, oldKey := ca.Issue(t, "envoy")
	newCert, newKey := next.Issue(t, "envoy")
	oldClient, _ := Client(Files{Cert: oldCert, Key: oldKey, ClientCA: ca.CertFile}, discard)
	newClient, _ := Client(Files{Cert: newCert, Key: newKey, ClientCA: next.CertFile}, discard)
	if c, s := handshake(t, srv, oldClient); c != nil || s != nil {
		t.Fatalf("before the rotation: %v, %v", c, s)
	}
	rotated, rotatedKey := next.Issue(t, "server")
	install(rotated, rotatedKey, next.CertFile)
	// Distinct sizes or times: the files differ in both here.
	if c, s := handshake(t, srv, oldClient); c != nil || s != nil {
		t.Fatalf("within the check interval the old files still serve: %v, %v", c, s)
	}
	now = now.Add(2 * time.Second)
	if c, s := handshake(t, srv, newClient); c != nil || s != nil {
		t.Fatalf("after the rotation, the renewed client: %v, %v", c, s)
	}
	if _, s := handshake(t, srv, oldClient); s == nil {
		t.Error("after the rotation, a client of the old CA was accepted")
	}
	if err := os.WriteFile(files.Key, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second)
	if c, s := handshake(t, srv, newClient); c != nil || s != nil {
		t.Fatalf("a broken key file must keep the last good pair: %v, %v", c, s)
	}
}
