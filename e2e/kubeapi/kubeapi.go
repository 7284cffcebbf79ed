// Package kubeapi runs a real Kubernetes API server for tests, the way
// controller-runtime's envtest does: etcd and kube-apiserver as processes
// on loopback, built from the module proxy by `go tool task e2e:kube`
// (the module in tools/ pins them) into bin/kube, or found in
// $WARMPATH_KUBE_BIN. No kubelet, scheduler or controller runs: tests set
// pod status themselves, as a kubelet would.
//
// The server authorises with RBAC and authenticates static tokens: Admin
// is in system:masters; User returns a client for any user name, so that
// a test can act as system:serviceaccount:NS:NAME and meet the RBAC its
// manifests grant.
package kubeapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
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
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// ErrNoBinaries is returned by Binaries when etcd or kube-apiserver is
// missing.
var ErrNoBinaries = errors.New("no etcd and kube-apiserver: run `go tool task e2e:kube` (builds them into bin/kube) or set WARMPATH_KUBE_BIN")

// Binaries returns the paths of etcd and kube-apiserver: in
// $WARMPATH_KUBE_BIN, else in root/bin/kube.
func Binaries(root string) (etcd, apiserver string, err error) {
	dir := os.Getenv("WARMPATH_KUBE_BIN")
	if dir == "" {
		dir = filepath.Join(root, "bin", "kube")
	}
	etcd, apiserver = filepath.Join(dir, "etcd"), filepath.Join(dir, "kube-apiserver")
	for _, p := range []string{etcd, apiserver} {
		if _, err := os.Stat(p); err != nil {
			return "", "", fmt.Errorf("%w (%w)", ErrNoBinaries, err)
		}
	}
	return etcd, apiserver, nil
}

// Etcd is an etcd process serving one test's API servers.
type Etcd struct {
	URL string
	cmd *process
}

// Cluster is etcd and the API servers started on it.
type Cluster struct {
	t         testing.TB
	apiserver string
	dir       string
	Etcd      *Etcd
	// key signs service-account tokens; tokens holds the static tokens,
	// one per user, that every API server of the cluster accepts.
	key    string
	mu     sync.Mutex
	tokens map[string]string // user → token
	tokenf string
}

// Options tune an API server.
type Options struct {
	// CompactionInterval is how often the API server compacts etcd;
	// 0 keeps kube-apiserver's default (5 minutes). A short one lets a
	// test make an old resource version "too old" (410 Gone).
	CompactionInterval time.Duration
	// Port is the secure port; 0 picks a free one.
	Port int
}

// Start starts etcd for a cluster whose API servers (StartAPIServer) share
// it; everything stops when the test ends. root is the repository root.
func Start(t testing.TB, root string) *Cluster {
	t.Helper()
	etcdBin, apiBin, err := Binaries(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := &Cluster{t: t, apiserver: apiBin, dir: dir, tokens: map[string]string{}}
	c.tokenf = filepath.Join(dir, "tokens.csv")
	c.key = filepath.Join(dir, "sa.key")
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.key, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), 0o600); err != nil {
		t.Fatal(err)
	}
	c.Token("admin", "system:masters")
	client, peer := freePort(t), freePort(t)
	url := "http://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	cmd, err := launch(t, etcdBin, filepath.Join(dir, "etcd.log"),
		"--name", "default", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", url, "--advertise-client-urls", url,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL, "--unsafe-no-fsync", "--log-level", "warn")
	if err != nil {
		t.Fatal(err)
	}
	c.Etcd = &Etcd{URL: url, cmd: cmd}
	waitFor(t, "etcd healthy", 30*time.Second, cmd, func() bool {
		resp, err := http.Get(url + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && bytes.Contains(b, []byte(`"health":"true"`))
	})
	return c
}

// Token registers user (in groups) in the token file the API servers read
// at start, so for those started after this call, and returns its bearer
// token (the same on a second call).
func (c *Cluster) Token(user string, groups ...string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if tok, ok := c.tokens[user]; ok {
		return tok
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	c.tokens[user] = tok
	line := fmt.Sprintf("%s,%s,%s,%q\n", tok, user, user, strings.Join(groups, ","))
	f, err := os.OpenFile(c.tokenf, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err == nil {
		_, err = f.WriteString(line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		c.t.Fatal(err)
	}
	return tok
}

// APIServer is one kube-apiserver process.
type APIServer struct {
	c    *Cluster
	URL  string
	Port int
	opts Options
	cmd  *process
	log  string
}

// StartAPIServer starts a kube-apiserver on the cluster's etcd and waits
// until it is ready. Users must be registered (Token) before.
func (c *Cluster) StartAPIServer(o Options) *APIServer {
	c.t.Helper()
	if o.Port == 0 {
		o.Port = freePort(c.t)
	}
	s := &APIServer{c: c, Port: o.Port, URL: "https://127.0.0.1:" + strconv.Itoa(o.Port), opts: o}
	s.start()
	return s
}

func (s *APIServer) start() {
	t := s.c.t
	t.Helper()
	certs := filepath.Join(s.c.dir, "certs-"+strconv.Itoa(s.Port))
	args := []string{
		"--etcd-servers", s.c.Etcd.URL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(s.Port), "--cert-dir", certs,
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", s.c.key, "--service-account-signing-key-file", s.c.key,
		"--token-auth-file", s.c.tokenf,
		"--authorization-mode", "RBAC",
		// No kubelet runs, and the address is loopback.
		"--endpoint-reconciler-type", "none",
		// No controller manager creates service accounts' tokens here.
		"--disable-admission-plugins", "ServiceAccount",
	}
	if s.opts.CompactionInterval > 0 {
		args = append(args, "--etcd-compaction-interval", s.opts.CompactionInterval.String())
	}
	s.log = filepath.Join(s.c.dir, "kube-apiserver-"+strconv.Itoa(s.Port)+".log")
	cmd, err := launch(t, s.c.apiserver, s.log, args...)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = cmd
	admin := s.c.Token("admin", "system:masters")
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // the test server's certificate is self-signed
	waitFor(t, "kube-apiserver ready", 90*time.Second, cmd, func() bool {
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := hc.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// Stop shuts the API server down as a rolling restart does: SIGTERM, on
// which it ends its watches (clients then watch again from where they
// were, rather than list), and SIGKILL 3 s later, since it may wait
// longer for its own controllers. etcd and its data stay.
func (s *APIServer) Stop() { s.cmd.terminate(3 * time.Second) }

// Restart starts the API server again on the same port.
func (s *APIServer) Restart() { s.start() }

// Config returns a client configuration for user (registered with Token).
func (s *APIServer) Config(user string) *rest.Config {
	s.c.mu.Lock()
	tok, ok := s.c.tokens[user]
	s.c.mu.Unlock()
	if !ok {
		s.c.t.Fatalf("kubeapi: user %q has no token", user)
	}
	return &rest.Config{Host: s.URL, BearerToken: tok, TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS: 200, Burst: 400, Timeout: 30 * time.Second}
}

// Admin returns clients acting as a cluster administrator.
func (s *APIServer) Admin() (kubernetes.Interface, dynamic.Interface) { return s.Clients("admin") }

// Clients returns a clientset and a dynamic client acting as user.
func (s *APIServer) Clients(user string) (kubernetes.Interface, dynamic.Interface) {
	cfg := s.Config(user)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		s.c.t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		s.c.t.Fatal(err)
	}
	return cs, dyn
}

// Apply creates every object of the YAML documents in b as the
// administrator, in order (a namespace a later object needs is created if
// missing). CustomResourceDefinitions are waited for until established.
func (s *APIServer) Apply(ctx context.Context, b []byte) error {
	cfg := s.Config("admin")
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	_, dyn := s.Admin()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk, u.GetName(), err)
		}
		ri := dynamic.ResourceInterface(dyn.Resource(m.Resource))
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			if err := s.ensureNamespace(ctx, u.GetNamespace()); err != nil {
				return err
			}
			ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		if _, err := ri.Create(ctx, &u, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			return fmt.Errorf("create %s %s/%s: %w", gvk.Kind, u.GetNamespace(), u.GetName(), err)
		}
		if gvk.Kind == "CustomResourceDefinition" {
			if err := s.established(ctx, dyn, u.GetName()); err != nil {
				return err
			}
			mapper.Reset()
		}
	}
}

func (s *APIServer) ensureNamespace(ctx context.Context, ns string) error {
	if ns == "" {
		return nil
	}
	cs, _ := s.Admin()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// established waits until the CRD name is established and served.
func (s *APIServer) established(ctx context.Context, dyn dynamic.Interface, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		u, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("CRD %s not established after 30 s", name)
}

// GIE is the Gateway API Inference Extension release whose InferencePool
// CRD InferencePoolCRD installs (the version e2e/eppconformance/lwepp
// pins).
const GIE = "sigs.k8s.io/gateway-api-inference-extension@v1.6.0"

// InferencePoolCRD returns the InferencePool CRD of GIE from the module
// cache, downloading the module from the proxy when needed.
func InferencePoolCRD(t testing.TB) []byte {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", GIE).Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", GIE, err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go mod download %s: no directory in %s", GIE, out)
	}
	b, err := os.ReadFile(filepath.Join(m.Dir, "config/crd/bases/inference.networking.k8s.io_inferencepools.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// process is a started command whose output goes to a log file.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
	err  error
}

func launch(t testing.TB, bin, log string, args ...string) (*process, error) {
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{}), log: log}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			if b, err := os.ReadFile(log); err == nil {
				t.Logf("%s log (last 4 KiB):\n%s", filepath.Base(bin), tail(b, 4096))
			}
		}
	})
	return p, nil
}

// terminate sends SIGTERM and waits up to grace before killing.
func (p *process) terminate(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.stop()
	}
}

// stop kills the process and waits for it.
func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// waitFor polls ok until it holds, failing the test after d or when p
// exits first.
func waitFor(t testing.TB, what string, d time.Duration, p *process, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		select {
		case <-p.done:
			b, _ := os.ReadFile(p.log)
			t.Fatalf("%s: the process exited (%v):\n%s", what, p.err, tail(b, 4096))
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(p.log)
			t.Fatalf("%s: not after %v:\n%s", what, d, tail(b, 4096))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freePort returns a loopback TCP port nothing listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
