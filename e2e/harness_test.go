package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/warmpath/warmpath/e2e/envoytest"
	"github.com/warmpath/warmpath/envoy"
)

// warmpathBin is built once by TestMain.
var warmpathBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "warmpath-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	warmpathBin = filepath.Join(dir, "warmpath")
	out, err := exec.Command("go", "build", "-o", warmpathBin, "github.com/warmpath/warmpath/cmd/warmpath").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build warmpath: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// warmpathProc is a running warmpath process.
type warmpathProc struct {
	ExtProc, Admin string
	cmd            *exec.Cmd
	exited         chan struct{}
	log            *envoytest.SyncBuffer
}

// logs returns what the process has logged so far.
func (p *warmpathProc) logs() string { return p.log.String() }

// kill ends the process with SIGKILL, as a node failure would, and waits
// for it.
func (p *warmpathProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// startWarmpath runs the warmpath binary with the config YAML (listen
// addresses are forced to :0) until the test ends; its log is printed only
// if the test fails.
func startWarmpath(t testing.TB, config string, flags ...string) *warmpathProc {
	t.Helper()
	path := filepath.Join(t.TempDir(), "warmpath.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return runWarmpath(t, []string{warmpathBin}, path, flags...)
}

// runWarmpath runs `serve` with command (the binary, or a command that
// runs one, such as a chroot into an image) on the config file at path,
// as command sees it; otherwise as startWarmpath.
func runWarmpath(t testing.TB, command []string, path string, flags ...string) *warmpathProc {
	t.Helper()
	// No drain delay unless a test asks for one (flags come last and win):
	// every test's warmpath stops at its end.
	args := append([]string{"serve", "--config", path, "--extproc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--drain-delay", "0s"}, flags...)
	cmd := exec.Command(command[0], append(command[1:], args...)...)
	log := &envoytest.SyncBuffer{}
	cmd.Stderr = log
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("warmpath log:\n%s", log.String())
		}
	})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "warmpath ready ") {
				ready <- sc.Text()
			}
		}
	}()
	select {
	case line := <-ready:
		p := &warmpathProc{cmd: cmd, exited: exited, log: log}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "extproc="); ok {
				p.ExtProc = v
			}
			if v, ok := strings.CutPrefix(f, "admin="); ok {
				p.Admin = v
			}
		}
		return p
	case <-exited:
		t.Fatalf("warmpath exited before ready:\n%s", log.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("warmpath not ready within 30s:\n%s", log.String())
	}
	return nil
}

// metric returns the value of the first sample of name whose labels contain
// every given label pair ("k=\"v\""), or 0.
func (p *warmpathProc) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	total := 0.0
	for _, ln := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(ln, name+"{") && !strings.HasPrefix(ln, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(ln, l)
		}
		if ok {
			v, _ := strconv.ParseFloat(ln[strings.LastIndexByte(ln, ' ')+1:], 64)
			total += v
		}
	}
	return total
}

// waitFor polls cond every 20 ms for up to 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startEnvoy runs the bootstrap file (relative to the repo root) with its
// listener and admin on :0 and the warmpath cluster balancing over the
// extproc addresses (one per warmpath replica).
func startEnvoy(t testing.TB, file string, extprocs ...string) *envoytest.Envoy {
	t.Helper()
	return startEnvoyWith(t, file, nil, extprocs...)
}

// startEnvoyWith is startEnvoy with every cluster passed to edit (nil:
// unchanged), the warmpath cluster after its endpoints are set.
func startEnvoyWith(t testing.TB, file string, edit func(*clusterv3.Cluster), extprocs ...string) *envoytest.Envoy {
	t.Helper()
	bs, err := envoy.LoadBootstrap(filepath.Join(envoytest.RepoRoot(t), file))
	if err != nil {
		t.Fatal(err)
	}
	bs.Admin.Address.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 0}
	for _, l := range bs.StaticResources.Listeners {
		l.Address.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 0}
	}
	for _, c := range bs.StaticResources.Clusters {
		if c.Name == "warmpath" {
			setEndpoints(c, extprocs...)
		}
		if edit != nil {
			edit(c)
		}
	}
	b, err := envoy.MarshalBootstrap(bs)
	if err != nil {
		t.Fatal(err)
	}
	return envoytest.Start(t, b)
}

func setEndpoint(c *clusterv3.Cluster, host string, port int) {
	setEndpoints(c, net.JoinHostPort(host, strconv.Itoa(port)))
}

// setEndpoints makes addrs (host:port) the cluster's only endpoints.
func setEndpoints(c *clusterv3.Cluster, addrs ...string) {
	var eps []*endpointv3.LbEndpoint
	for _, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		pn, _ := strconv.Atoi(port)
		eps = append(eps, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(pn)}}}}}}})
	}
	c.LoadAssignment.Endpoints[0].LbEndpoints = eps
}
