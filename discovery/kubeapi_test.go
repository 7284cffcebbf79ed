//go:build kube

package discovery

// Kubernetes discovery against a real API server (etcd and kube-apiserver
// as processes, e2e/kubeapi), acting as deploy/'s service account under
// deploy/rbac.yaml's Role: what client-go's fakes accept and a real server
// rejects (RBAC, CRD schemas, strict field validation, pod validation,
// resource versions, a watch that breaks with 410 Gone) is tested here.
// Run by `go tool task e2e:kube`, which builds the binaries.

import (
	"bytes"
	"context"
	"flag"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/warmpath/warmpath/e2e/kubeapi"
)

// warmpathUser is the user deploy/rbac.yaml's RoleBinding names: the
// service account warmpath in namespace llm.
const warmpathUser = "system:serviceaccount:llm:warmpath"

// startAPI starts a cluster and one API server with deploy/rbac.yaml
// applied (and the InferencePool CRD when crd is set).
func startAPI(t *testing.T, crd bool, o kubeapi.Options) (*kubeapi.Cluster, *kubeapi.APIServer) {
	t.Helper()
	c := kubeapi.Start(t, "..")
	c.Token(warmpathUser, "system:serviceaccounts", "system:serviceaccounts:llm")
	s := c.StartAPIServer(o)
	if crd {
		apply(t, s, kubeapi.InferencePoolCRD(t))
	}
	rbac, err := os.ReadFile("../deploy/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	apply(t, s, rbac)
	return c, s
}

func apply(t *testing.T, s *kubeapi.APIServer, b []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := s.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
}

// realPod is a pod the API server accepts: it needs a container.
func realPod(name string, lbl map[string]string, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, Labels: lbl, Annotations: ann},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai"}}},
	}
}

// pods acts on the namespace's pods as the administrator, and as the
// kubelet would on their status.
type pods struct {
	cs kubernetes.Interface
}

func (p pods) create(t *testing.T, pod *corev1.Pod, ip string, ready bool) {
	t.Helper()
	if _, err := p.cs.CoreV1().Pods(testNS).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.status(t, pod.Name, ip, ready)
}

// status sets what a kubelet reports: running, the IP, Ready or not.
func (p pods) status(t *testing.T, name, ip string, ready bool) {
	t.Helper()
	p.update(t, name, true, func(pod *corev1.Pod) {
		cond := corev1.ConditionFalse
		if ready {
			cond = corev1.ConditionTrue
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.PodIP = ip
		pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: cond, LastTransitionTime: metav1.Now()}}
	})
}

// update reads, changes and writes a pod (its status when status is set),
// again on a conflict, as controllers do against a real server.
func (p pods) update(t *testing.T, name string, status bool, f func(*corev1.Pod)) {
	t.Helper()
	for range 10 {
		pod, err := p.cs.CoreV1().Pods(testNS).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f(pod)
		if status {
			_, err = p.cs.CoreV1().Pods(testNS).UpdateStatus(t.Context(), pod, metav1.UpdateOptions{})
		} else {
			_, err = p.cs.CoreV1().Pods(testNS).Update(t.Context(), pod, metav1.UpdateOptions{})
		}
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatalf("pod %s: conflicts on every try", name)
}

func (p pods) delete(t *testing.T, name string) {
	t.Helper()
	if err := p.cs.CoreV1().Pods(testNS).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

var vllm = map[string]string{"app": "vllm"}

func TestRealAPIServerPods(t *testing.T) {
	t.Parallel()
	_, s := startAPI(t, false, kubeapi.Options{})
	admin, _ := s.Admin()
	cs, dyn := s.Clients(warmpathUser)

	// deploy/rbac.yaml lets warmpath read pods and write nothing.
	if _, err := cs.CoreV1().Pods(testNS).Create(t.Context(), realPod("x", vllm, nil), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("warmpath's service account created a pod: %v; want Forbidden", err)
	}
	if _, err := cs.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("warmpath's service account listed another namespace's pods: %v; want Forbidden", err)
	}

	p := pods{admin}
	p.create(t, realPod("p0", vllm, nil), "10.1.0.1", true)
	p.create(t, realPod("p1", vllm, map[string]string{AnnotationHTTPPort: "8080", AnnotationKVEventsPort: "5557"}), "10.1.0.2", true)
	p.create(t, realPod("other", map[string]string{"app": "web"}, nil), "10.1.0.3", true)
	p.create(t, realPod("starting", vllm, nil), "10.1.0.4", false)

	e := runKube(t, KubeConfig{LabelSelector: "app=vllm"}, cs, dyn)
	p1 := kw("p1", "10.1.0.2:8080", func(w *Worker) { w.KVEvents = "tcp://10.1.0.2:5557" })
	e.expect(t, []Worker{kw("p0", "10.1.0.1:8000"), p1})

	p.status(t, "starting", "10.1.0.4", true) // became Ready
	e.expect(t, []Worker{kw("p0", "10.1.0.1:8000"), p1, kw("starting", "10.1.0.4:8000")})

	p.update(t, "other", false, func(pod *corev1.Pod) { pod.Labels = vllm }) // now selected
	p.update(t, "p0", false, func(pod *corev1.Pod) { pod.Labels = map[string]string{"app": "web"} })
	e.expect(t, []Worker{kw("other", "10.1.0.3:8000"), p1, kw("starting", "10.1.0.4:8000")})

	p.update(t, "p1", false, func(pod *corev1.Pod) { pod.Annotations[AnnotationHTTPPort] = "9000" })
	p1.Address = "10.1.0.2:9000"
	e.expect(t, []Worker{kw("other", "10.1.0.3:8000"), p1, kw("starting", "10.1.0.4:8000")})

	p.status(t, "other", "10.1.0.3", false) // failed its readiness probe
	e.expect(t, []Worker{p1, kw("starting", "10.1.0.4:8000")})

	// Terminating: a finalizer keeps the deleted pod, with its
	// deletionTimestamp set, until it is removed.
	p.update(t, "starting", false, func(pod *corev1.Pod) { pod.Finalizers = []string{"example.com/hold"} })
	p.delete(t, "starting")
	e.expect(t, []Worker{p1})
	if pod, err := admin.CoreV1().Pods(testNS).Get(t.Context(), "starting", metav1.GetOptions{}); err != nil || pod.DeletionTimestamp == nil {
		t.Fatalf("the held pod: %v, %v; want it terminating", pod, err)
	}
	p.update(t, "starting", false, func(pod *corev1.Pod) { pod.Finalizers = nil })

	p.delete(t, "p1")
	e.expect(t, []Worker{})
}

func TestRealAPIServerInferencePool(t *testing.T) {
	t.Parallel()
	_, s := startAPI(t, true, kubeapi.Options{})
	admin, adminDyn := s.Admin()
	cs, dyn := s.Clients(warmpathUser)
	p := pods{admin}
	p.create(t, realPod("p0", vllm, nil), "10.2.0.1", true)
	p.create(t, realPod("p1", map[string]string{"app": "vllm", "tier": "big"}, nil), "10.2.0.2", true)

	pools := adminDyn.Resource(InferencePoolGVR).Namespace(testNS)
	pool := newInferencePool("pool", map[string]any{"app": "vllm"}, 8000)
	if err := unstructured.SetNestedMap(pool.Object, map[string]any{"name": "warmpath", "port": map[string]any{"number": int64(9002)}}, "spec", "endpointPickerRef"); err != nil {
		t.Fatal(err)
	}
	if _, err := pools.Create(t.Context(), pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// What the fakes accept and the CRD's schema refuses.
	for name, mutate := range map[string]func(*unstructured.Unstructured){
		"nine target ports": func(u *unstructured.Unstructured) {
			var tps []any
			for i := range 9 {
				tps = append(tps, map[string]any{"number": int64(8000 + i)})
			}
			_ = unstructured.SetNestedSlice(u.Object, tps, "spec", "targetPorts")
		},
		"an unknown appProtocol": func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "grpc", "spec", "appProtocol")
		},
		"a port number out of range": func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"number": int64(70000)}}, "spec", "targetPorts")
		},
	} {
		bad := pool.DeepCopy()
		bad.SetName("bad")
		mutate(bad)
		if _, err := pools.Create(t.Context(), bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("a pool with %s: %v; want Invalid", name, err)
		}
	}

	e := runKube(t, KubeConfig{InferencePool: "pool"}, cs, dyn)
	e.expect(t, []Worker{kw("p0", "10.2.0.1:8000"), kw("p1", "10.2.0.2:8000")})

	updatePool := func(f func(u *unstructured.Unstructured)) {
		t.Helper()
		for range 10 {
			u, err := pools.Get(t.Context(), "pool", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			f(u)
			if _, err = pools.Update(t.Context(), u, metav1.UpdateOptions{}); err == nil {
				return
			} else if !apierrors.IsConflict(err) {
				t.Fatal(err)
			}
		}
		t.Fatal("pool: conflicts on every try")
	}
	// Two target ports: each port of each pod is a worker (data-parallel ranks).
	updatePool(func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"number": int64(8000)}, map[string]any{"number": int64(8001)}}, "spec", "targetPorts")
	})
	e.expect(t, []Worker{kw("p0-8000", "10.2.0.1:8000"), kw("p0-8001", "10.2.0.1:8001"), kw("p1-8000", "10.2.0.2:8000"), kw("p1-8001", "10.2.0.2:8001")})

	// A narrower selector and HTTP/2 cleartext.
	h2c := func(w *Worker) { w.Protocol = ProtocolH2C }
	updatePool(func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedStringMap(u.Object, map[string]string{"tier": "big"}, "spec", "selector", "matchLabels")
		_ = unstructured.SetNestedField(u.Object, "kubernetes.io/h2c", "spec", "appProtocol")
	})
	e.expect(t, []Worker{kw("p1-8000", "10.2.0.2:8000", h2c), kw("p1-8001", "10.2.0.2:8001", h2c)})

	// The pool deleted: no workers.
	if err := pools.Delete(t.Context(), "pool", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.expect(t, []Worker{})
}

// TestRealAPIServerWatchGone breaks discovery's watch the way a real
// cluster does: its API server goes away while another one on the same
// etcd changes the pods and compacts etcd past discovery's resource
// version. When its server is back, the watch from that version is
// refused with 410 Gone, client-go lists again, and the worker set follows
// every change made while it was away.
func TestRealAPIServerWatchGone(t *testing.T) {
	// Not parallel: it captures client-go's log (klog's global logger).
	var mu sync.Mutex
	var logs bytes.Buffer
	klog.SetLogger(funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 6}))
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	if err := fs.Set("v", "6"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = fs.Set("v", "0")
		klog.ClearLogger()
	})

	c, s := startAPI(t, false, kubeapi.Options{})
	other := c.StartAPIServer(kubeapi.Options{CompactionInterval: time.Second})
	admin, _ := other.Admin()
	cs, dyn := s.Clients(warmpathUser)
	p := pods{admin}
	p.create(t, realPod("p0", vllm, nil), "10.3.0.1", true)
	p.create(t, realPod("p1", vllm, nil), "10.3.0.2", true)

	e := runKube(t, KubeConfig{LabelSelector: "app=vllm"}, cs, dyn)
	e.expect(t, []Worker{kw("p0", "10.3.0.1:8000"), kw("p1", "10.3.0.2:8000")})

	stopped := time.Now()
	s.Stop()
	t.Logf("API server stopped in %v", time.Since(stopped))
	p.delete(t, "p0")
	p.create(t, realPod("p2", vllm, nil), "10.3.0.3", true)
	p.status(t, "p1", "10.3.0.2", false)
	// Enough writes and compactions that the old revision is gone.
	for i := range 3 {
		p.update(t, "p2", false, func(pod *corev1.Pod) {
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations["round"] = string(rune('a' + i))
		})
		time.Sleep(1200 * time.Millisecond)
	}
	s.Restart()
	e.expect(t, []Worker{kw("p2", "10.3.0.3:8000")})

	mu.Lock()
	defer mu.Unlock()
	if testing.Verbose() {
		for _, ln := range strings.Split(logs.String(), "\n") {
			if strings.Contains(ln, "too old resource version") || strings.Contains(ln, "Gone") {
				t.Logf("client-go: %.300s", ln)
			}
		}
	}
	if !strings.Contains(logs.String(), "too old resource version") && !strings.Contains(logs.String(), "Gone") {
		t.Errorf("client-go never reported the watch gone (410): the test did not break the watch; its log:\n%s", logs.String())
	}
}
