package extproc

import (
	"context"
	"net"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// streamSource names who opened an ext_proc stream, the source of the
// outcome the stream will report (scoring.Request.Source): under mutual
// TLS the identity of the client's verified certificate (its first URI
// SAN, as SPIFFE identities are, else its common name, else its first DNS
// SAN), else the client's IP
// address without the port, since one proxy opens several connections.
// It is "" when gRPC knows no peer (an in-process caller).
func streamSource(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		if chains := ti.State.VerifiedChains; len(chains) > 0 && len(chains[0]) > 0 {
			c := chains[0][0]
			switch {
			case len(c.URIs) > 0:
				return "cert:" + c.URIs[0].String()
			case c.Subject.CommonName != "":
				return "cert:" + c.Subject.CommonName
			case len(c.DNSNames) > 0:
				return "cert:" + c.DNSNames[0]
			}
		}
	}
	if p.Addr == nil {
		return ""
	}
	if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
		return "addr:" + host
	}
	return "addr:" + p.Addr.String()
}
