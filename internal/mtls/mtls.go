// Package mtls builds the TLS configurations of warmpath's ext_proc port
// from PEM files: the server side, which demands and verifies a client
// certificate (Envoy's, or a peer replica's), and the client side a replica
// uses to follow its peers. The files are read again when they change, so a
// rotated Kubernetes Secret (cert-manager renews before expiry) takes
// effect on the next handshake without a restart. It knows nothing of
// gRPC or of what the connections carry.
package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Files names the PEM files of one identity and the authority it trusts.
type Files struct {
	// Cert and Key are this process's certificate (chain) and private key.
	Cert string `yaml:"cert_file"`
	Key  string `yaml:"key_file"`
	// ClientCA holds the certificates of the authorities whose
	// certificates are accepted from the other side: Envoy's client
	// certificate on the server, a peer's server certificate on the client.
	ClientCA string `yaml:"client_ca_file"`
}

// Enabled reports whether any file is named.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.ClientCA != "" }

// Validate reports whether the files are named together.
func (f Files) Validate() error {
	if f.Enabled() && (f.Cert == "" || f.Key == "" || f.ClientCA == "") {
		return errors.New("cert_file, key_file and client_ca_file are needed together (mutual TLS)")
	}
	return nil
}

// source reads the files and keeps what it read until one of them changes
// (its modification time or size), checked at most once per second.
type source struct {
	f   Files
	now func() time.Time
	log *slog.Logger

	mu      sync.Mutex
	checked time.Time
	stamp   [3]stamp
	cert    *tls.Certificate
	pool    *x509.CertPool
}

type stamp struct {
	mod  time.Time
	size int64
}

// load returns the current certificate and pool, reading the files again
// when they changed. A file that fails to load keeps the last good pair in
// use and is reported.
func (s *source) load() (*tls.Certificate, *x509.CertPool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cert, pool, err := s.reload()
	if err != nil && s.cert != nil {
		s.log.Error("tls files unreadable; the last good ones stay in use", "err", err)
	}
	return cert, pool, err
}

func (s *source) reload() (*tls.Certificate, *x509.CertPool, error) {
	now := s.now()
	if s.cert != nil && now.Sub(s.checked) < time.Second {
		return s.cert, s.pool, nil
	}
	s.checked = now
	var st [3]stamp
	for i, p := range []string{s.f.Cert, s.f.Key, s.f.ClientCA} {
		fi, err := os.Stat(p)
		if err != nil {
			return s.cert, s.pool, fmt.Errorf("tls: %w", err)
		}
		st[i] = stamp{fi.ModTime(), fi.Size()}
	}
	if s.cert != nil && st == s.stamp {
		return s.cert, s.pool, nil
	}
	cert, err := tls.LoadX509KeyPair(s.f.Cert, s.f.Key)
	if err != nil {
		return s.cert, s.pool, fmt.Errorf("tls: %w", err)
	}
	ca, err := os.ReadFile(s.f.ClientCA)
	if err != nil {
		return s.cert, s.pool, fmt.Errorf("tls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return s.cert, s.pool, fmt.Errorf("tls: %s holds no PEM certificate", s.f.ClientCA)
	}
	s.cert, s.pool, s.stamp = &cert, pool, st
	return s.cert, s.pool, nil
}

// Server returns the server configuration: TLS 1.2 or later, this
// process's certificate, and a client certificate required and verified
// against ClientCA. It fails when the files cannot be loaded now; a later
// change that cannot be loaded is logged and the last good files stay in
// use.
func Server(f Files, log *slog.Logger) (*tls.Config, error) {
	return serverWith(&source{f: f, now: time.Now, log: log})
}

func serverWith(src *source) (*tls.Config, error) {
	if _, _, err := src.load(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool, err := src.load()
			if cert == nil {
				return nil, err
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS12,
				NextProtos:   []string{"h2"},
				Certificates: []tls.Certificate{*cert},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    pool,
			}, nil
		},
	}, nil
}

// Client returns the configuration a replica dials its peers with: it
// presents this process's certificate and accepts a server certificate
// that chains to ClientCA. Peers are dialled by address (pod IPs change),
// so the chain is verified without a host name; the peers' shared token
// then proves the replica. It fails when the files cannot be loaded now.
func Client(f Files, log *slog.Logger) (*tls.Config, error) {
	src := &source{f: f, now: time.Now, log: log}
	if _, _, err := src.load(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _, err := src.load()
			if cert == nil {
				return nil, err
			}
			return cert, nil
		},
		// The chain is verified below, without the host name.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, pool, _ := src.load()
			if len(cs.PeerCertificates) == 0 || pool == nil {
				return errors.New("tls: the peer sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			return err
		},
	}, nil
}
