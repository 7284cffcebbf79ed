package discovery

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/internal/component"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

const testNS = "llm"

type podOpt func(*corev1.Pod)

func withLabels(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

func withAnnotations(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Annotations = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func unready(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }

func inNamespace(ns string) podOpt { return func(p *corev1.Pod) { p.Namespace = ns } }

func newPod(name, ip string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, Labels: map[string]string{"app": "vllm"}},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			PodIP:      ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func newInferencePool(name string, matchLabels map[string]any, ports ...int64) *unstructured.Unstructured {
	tps := []any{}
	for _, p := range ports {
		tps = append(tps, map[string]any{"number": p})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1",
		"kind":       "InferencePool",
		"metadata":   map[string]any{"name": name, "namespace": testNS},
		"spec": map[string]any{
			"selector":    map[string]any{"matchLabels": matchLabels},
			"targetPorts": tps,
		},
	}}
}

func kw(name, addr string, mods ...func(*Worker)) Worker {
	w := Worker{Name: name, Address: addr, Models: []string{"qwen3"}}
	for _, m := range mods {
		m(&w)
	}
	return w
}

// kubeEnv is a Kubernetes source running on clients: client-go's fakes
// here, a real API server in kubeapi_test.go.
type kubeEnv struct {
	cs  kubernetes.Interface
	dyn dynamic.Interface
	k   *Kubernetes
	u   *Updates
}

func startKube(t *testing.T, cfg KubeConfig, pods []runtime.Object, pools ...runtime.Object) *kubeEnv {
	t.Helper()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{InferencePoolGVR: "InferencePoolList"}, pools...)
	return runKube(t, cfg, fake.NewClientset(pods...), dyn)
}

// runKube runs a Kubernetes source on cs and dyn until the test ends.
func runKube(t *testing.T, cfg KubeConfig, cs kubernetes.Interface, dyn dynamic.Interface) *kubeEnv {
	t.Helper()
	cfg.Namespace = testNS
	if cfg.Defaults.Models == nil {
		cfg.Defaults.Models = []string{"qwen3"}
	}
	e := &kubeEnv{cs: cs, dyn: dyn, u: NewUpdates()}
	k, err := NewKubernetes(e.cs, e.dyn, cfg, component.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.k = k
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx, e.u) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	return e
}

// expect waits until the newest published set equals want. The timeout
// only guards against a hang; it measures nothing.
func (e *kubeEnv) expect(t *testing.T, want []Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var last []Worker
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("worker set never became\n %+v\nlast published\n %+v", want, last)
		case <-e.u.Ready():
			ws, ok := e.u.Take()
			if !ok {
				continue
			}
			last = ws
			if reflect.DeepEqual(ws, want) {
				return
			}
		}
	}
}

func (e *kubeEnv) pods() podClient { return podClient{e} }

type podClient struct{ e *kubeEnv }

func (c podClient) get(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := c.e.cs.CoreV1().Pods(testNS).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (c podClient) update(t *testing.T, name string, f func(*corev1.Pod)) {
	t.Helper()
	p := c.get(t, name)
	f(p)
	if _, err := c.e.cs.CoreV1().Pods(testNS).Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (c podClient) updateStatus(t *testing.T, name string, f func(*corev1.Pod)) {
	t.Helper()
	p := c.get(t, name)
	f(p)
	if _, err := c.e.cs.CoreV1().Pods(testNS).UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestKubernetesPods(t *testing.T) {
	t.Parallel()
	base := func() []runtime.Object {
		return []runtime.Object{
			newPod("a", "10.0.0.1"),
			newPod("b", "10.0.0.2", unready),
			newPod("other", "10.0.0.3", withLabels("app", "web")),
			newPod("elsewhere", "10.0.0.4", inNamespace("default")),
			newPod("noip", ""),
		}
	}
	a := kw("a", "10.0.0.1:8000")
	b := kw("b", "10.0.0.2:8000")
	tests := []struct {
		name   string
		change func(t *testing.T, e *kubeEnv)
		want   []Worker
	}{
		{
			name: "pod becomes ready",
			change: func(t *testing.T, e *kubeEnv) {
				e.pods().updateStatus(t, "b", func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionTrue })
			},
			want: []Worker{a, b},
		},
		{
			name: "pod becomes unready",
			change: func(t *testing.T, e *kubeEnv) {
				e.pods().updateStatus(t, "a", unready)
			},
			want: []Worker{},
		},
		{
			name: "pod gets an IP",
			change: func(t *testing.T, e *kubeEnv) {
				e.pods().updateStatus(t, "noip", func(p *corev1.Pod) { p.Status.PodIP = "10.0.0.9" })
			},
			want: []Worker{a, kw("noip", "10.0.0.9:8000")},
		},
		{
			name: "pod IP changes",
			change: func(t *testing.T, e *kubeEnv) {
				e.pods().updateStatus(t, "a", func(p *corev1.Pod) { p.Status.PodIP = "10.0.1.1" })
			},
			want: []Worker{kw("a", "10.0.1.1:8000")},
		},
		{
			name: "pod relabelled out of the selector",
			change: func(t *testing.T, e *kubeEnv) {
				e.pods().update(t, "a", withLabels("app", "retired"))
			},
			want: []Worker{},
		},
		{
			name: "pod relabelled into the selector",
			change: func(t *testing.T, e *kubeEnv) {
				e.pods().update(t, "other", withLabels("app", "vllm"))
			},
			want: []Worker{a, kw("other", "10.0.0.3:8000")},
		},
		{
			name: "pod deleted",
			change: func(t *testing.T, e *kubeEnv) {
				if err := e.cs.CoreV1().Pods(testNS).Delete(t.Context(), "a", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			want: []Worker{},
		},
		{
			name: "pod terminating",
			change: func(t *testing.T, e *kubeEnv) {
				e.pods().update(t, "a", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)} })
			},
			want: []Worker{},
		},
		{
			name: "pod added ready",
			change: func(t *testing.T, e *kubeEnv) {
				if _, err := e.cs.CoreV1().Pods(testNS).Create(t.Context(), newPod("c", "fd00::3"), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			want: []Worker{a, kw("c", "[fd00::3]:8000")},
		},
		{
			name: "annotations override defaults",
			change: func(t *testing.T, e *kubeEnv) {
				e.pods().update(t, "a", withAnnotations(
					AnnotationHTTPPort, "9000",
					AnnotationKVEventsPort, "5557",
					AnnotationKVReplayPort, "5558",
					AnnotationDataParallelSize, "2",
					AnnotationModels, "llama, qwen3,llama",
				))
			},
			want: []Worker{{
				Name: "a", Address: "10.0.0.1:9000", Models: []string{"llama", "qwen3"},
				KVEvents: "tcp://10.0.0.1:5557", KVReplay: "tcp://10.0.0.1:5558", DataParallelSize: 2,
			}},
		},
		{
			name: "annotation turns default KV events off",
			change: func(t *testing.T, e *kubeEnv) {
				e.pods().update(t, "a", withAnnotations(AnnotationKVEventsPort, "0"))
			},
			want: []Worker{kw("a", "10.0.0.1:8000", func(w *Worker) { w.KVReplay = "tcp://10.0.0.1:5558" })},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := KubeConfig{LabelSelector: "app=vllm"}
			first := []Worker{a}
			if strings.HasPrefix(tc.name, "annotation turns") {
				cfg.Defaults = PodDefaults{KVEventsPort: 5557, KVReplayPort: 5558}
				first = []Worker{kw("a", "10.0.0.1:8000", func(w *Worker) {
					w.KVEvents, w.KVReplay = "tcp://10.0.0.1:5557", "tcp://10.0.0.1:5558"
				})}
			}
			e := startKube(t, cfg, base())
			e.expect(t, first)
			if !e.k.Synced() {
				t.Fatal("first set published before Synced")
			}
			tc.change(t, e)
			e.expect(t, tc.want)
		})
	}
}

func TestKubernetesBadAnnotations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		ann    []string
		reason string
	}{
		{name: "port not a number", ann: []string{AnnotationHTTPPort, "http"}, reason: "bad_annotation"},
		{name: "port out of range", ann: []string{AnnotationKVEventsPort, "70000"}, reason: "bad_annotation"},
		{name: "http port zero", ann: []string{AnnotationHTTPPort, "0"}, reason: "bad_annotation"},
		{name: "rank count zero", ann: []string{AnnotationDataParallelSize, "0"}, reason: "bad_annotation"},
		{name: "no models", ann: []string{AnnotationModels, " , "}, reason: "no_models"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := startKube(t, KubeConfig{LabelSelector: "app=vllm"}, []runtime.Object{
				newPod("good", "10.0.0.1"),
				newPod("bad", "10.0.0.2", withAnnotations(tc.ann...)),
			})
			e.expect(t, []Worker{kw("good", "10.0.0.1:8000")})
			if got := testutil.ToFloat64(e.k.skipped.WithLabelValues(tc.reason)); got < 1 {
				t.Fatalf("skipped{%s} = %v, want ≥ 1", tc.reason, got)
			}
			// Fixing the annotation brings the pod in.
			e.pods().update(t, "bad", withAnnotations())
			e.expect(t, []Worker{kw("bad", "10.0.0.2:8000"), kw("good", "10.0.0.1:8000")})
		})
	}
}

func TestKubernetesInferencePool(t *testing.T) {
	t.Parallel()
	pods := func() []runtime.Object {
		return []runtime.Object{
			newPod("p1", "10.0.0.1", withLabels("pool", "qwen", "app", "vllm")),
			newPod("p2", "10.0.0.2", withLabels("pool", "qwen", "app", "vllm"), withAnnotations(AnnotationKVEventsPort, "5557")),
			newPod("p3", "10.0.0.3", withLabels("pool", "llama", "app", "vllm")),
		}
	}
	poolRes := func(e *kubeEnv) interface {
		Update(context.Context, *unstructured.Unstructured, metav1.UpdateOptions, ...string) (*unstructured.Unstructured, error)
	} {
		return e.dyn.Resource(InferencePoolGVR).Namespace(testNS)
	}
	tests := []struct {
		name    string
		cfg     KubeConfig
		pools   []runtime.Object
		first   []Worker
		change  func(t *testing.T, e *kubeEnv)
		want    []Worker
		badPool bool
	}{
		{
			name:  "target ports change",
			pools: []runtime.Object{newInferencePool("qwen", map[string]any{"pool": "qwen"}, 8000)},
			first: []Worker{kw("p1", "10.0.0.1:8000"), kw("p2", "10.0.0.2:8000", func(w *Worker) { w.KVEvents = "tcp://10.0.0.2:5557" })},
			change: func(t *testing.T, e *kubeEnv) {
				if _, err := poolRes(e).Update(t.Context(), newInferencePool("qwen", map[string]any{"pool": "qwen"}, 8000, 8001), metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			want: []Worker{
				kw("p1-8000", "10.0.0.1:8000"), kw("p1-8001", "10.0.0.1:8001"),
				kw("p2-8000", "10.0.0.2:8000", func(w *Worker) { w.KVEvents = "tcp://10.0.0.2:5557" }),
				kw("p2-8001", "10.0.0.2:8001", func(w *Worker) { w.KVEvents = "tcp://10.0.0.2:5558" }),
			},
		},
		{
			name:  "selector changes",
			pools: []runtime.Object{newInferencePool("qwen", map[string]any{"pool": "qwen"}, 8000)},
			first: []Worker{kw("p1", "10.0.0.1:8000"), kw("p2", "10.0.0.2:8000", func(w *Worker) { w.KVEvents = "tcp://10.0.0.2:5557" })},
			change: func(t *testing.T, e *kubeEnv) {
				if _, err := poolRes(e).Update(t.Context(), newInferencePool("qwen", map[string]any{"pool": "llama"}, 8000), metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			want: []Worker{kw("p3", "10.0.0.3:8000")},
		},
		{
			name:  "pool deleted",
			pools: []runtime.Object{newInferencePool("qwen", map[string]any{"pool": "qwen"}, 8000)},
			first: []Worker{kw("p1", "10.0.0.1:8000"), kw("p2", "10.0.0.2:8000", func(w *Worker) { w.KVEvents = "tcp://10.0.0.2:5557" })},
			change: func(t *testing.T, e *kubeEnv) {
				if err := e.dyn.Resource(InferencePoolGVR).Namespace(testNS).Delete(t.Context(), "qwen", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			want:    []Worker{},
			badPool: true,
		},
		{
			name:  "pool created later",
			first: []Worker{},
			change: func(t *testing.T, e *kubeEnv) {
				if _, err := e.dyn.Resource(InferencePoolGVR).Namespace(testNS).Create(t.Context(), newInferencePool("qwen", map[string]any{"pool": "llama"}, 8080), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			want:    []Worker{kw("p3", "10.0.0.3:8080")},
			badPool: true,
		},
		{
			name:  "label selector and pool both apply",
			cfg:   KubeConfig{LabelSelector: "app=vllm"},
			pools: []runtime.Object{newInferencePool("qwen", map[string]any{"pool": "qwen"}, 8000)},
			first: []Worker{kw("p1", "10.0.0.1:8000"), kw("p2", "10.0.0.2:8000", func(w *Worker) { w.KVEvents = "tcp://10.0.0.2:5557" })},
			change: func(t *testing.T, e *kubeEnv) {
				e.pods().update(t, "p1", withLabels("pool", "qwen", "app", "other"))
			},
			want: []Worker{kw("p2", "10.0.0.2:8000", func(w *Worker) { w.KVEvents = "tcp://10.0.0.2:5557" })},
		},
		{
			name:  "data-parallel ranks as target ports, some inactive, over h2c",
			pools: []runtime.Object{newInferencePool("qwen", map[string]any{"pool": "qwen"}, 8000)},
			first: []Worker{kw("p1", "10.0.0.1:8000"), kw("p2", "10.0.0.2:8000", func(w *Worker) { w.KVEvents = "tcp://10.0.0.2:5557" })},
			change: func(t *testing.T, e *kubeEnv) {
				e.pods().update(t, "p1", withAnnotations(AnnotationActivePorts, "8001, 8002, 9999"))
				e.pods().update(t, "p2", withAnnotations(AnnotationKVEventsPort, "5557", AnnotationActivePorts, "9999"))
				pool := newInferencePool("qwen", map[string]any{"pool": "qwen"}, 8000, 8001, 8002)
				pool.Object["spec"].(map[string]any)["appProtocol"] = "kubernetes.io/h2c"
				if _, err := poolRes(e).Update(t.Context(), pool, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			want: []Worker{
				kw("p1-8001", "10.0.0.1:8001", func(w *Worker) { w.Protocol = ProtocolH2C }),
				kw("p1-8002", "10.0.0.1:8002", func(w *Worker) { w.Protocol = ProtocolH2C }),
			},
		},
		{
			name:  "invalid pool yields no workers",
			pools: []runtime.Object{newInferencePool("qwen", map[string]any{"pool": "qwen"})},
			first: []Worker{},
			change: func(t *testing.T, e *kubeEnv) {
				if _, err := poolRes(e).Update(t.Context(), newInferencePool("qwen", map[string]any{"pool": "qwen"}, 8000), metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			want:    []Worker{kw("p1", "10.0.0.1:8000"), kw("p2", "10.0.0.2:8000", func(w *Worker) { w.KVEvents = "tcp://10.0.0.2:5557" })},
			badPool: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := tc.cfg
			cfg.InferencePool = "qwen"
			e := startKube(t, cfg, pods(), tc.pools...)
			e.expect(t, tc.first)
			tc.change(t, e)
			e.expect(t, tc.want)
			if got := testutil.ToFloat64(e.k.skipped.WithLabelValues("bad_pool")) > 0; got != tc.badPool {
				t.Errorf("bad_pool counted = %v, want %v", got, tc.badPool)
			}
		})
	}
}

func TestParseInferencePool(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		spec    map[string]any
		want    []int
		proto   [3]string // appProtocol, Worker.Protocol, failureMode; zero: the defaults
		wantErr string
	}{
		{name: "h2c, fail open", spec: map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"a": "b"}},
			"targetPorts": []any{map[string]any{"number": int64(8000)}, map[string]any{"number": int64(8001)}},
			"appProtocol": "kubernetes.io/h2c", "endpointPickerRef": map[string]any{"name": "warmpath", "failureMode": "FailOpen"}},
			want: []int{8000, 8001}, proto: [3]string{"kubernetes.io/h2c", ProtocolH2C, "FailOpen"}},
		{name: "explicit http, fail close", spec: map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"a": "b"}},
			"targetPorts": []any{map[string]any{"number": int64(8000)}}, "appProtocol": "http",
			"endpointPickerRef": map[string]any{"name": "warmpath", "failureMode": "FailClose"}}, want: []int{8000}},
		{name: "unknown app protocol", spec: map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"a": "b"}},
			"targetPorts": []any{map[string]any{"number": int64(8000)}}, "appProtocol": "grpc"}, wantErr: "appProtocol"},
		{name: "unknown failure mode", spec: map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"a": "b"}},
			"targetPorts": []any{map[string]any{"number": int64(8000)}}, "endpointPickerRef": map[string]any{"failureMode": "Retry"}}, wantErr: "failureMode"},
		{name: "float ports from JSON", spec: map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"a": "b"}}, "targetPorts": []any{map[string]any{"number": 8000.0}, map[string]any{"number": int64(8000)}}}, want: []int{8000}},
		{name: "no selector", spec: map[string]any{"targetPorts": []any{map[string]any{"number": int64(1)}}}, wantErr: "matchLabels"},
		{name: "bad label value", spec: map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"a": "b c"}}, "targetPorts": []any{map[string]any{"number": int64(1)}}}, wantErr: "selector"},
		{name: "port zero", spec: map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"a": "b"}}, "targetPorts": []any{map[string]any{"number": int64(0)}}}, wantErr: "not a port"},
		{name: "port not an object", spec: map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"a": "b"}}, "targetPorts": []any{"8000"}}, wantErr: "not an object"},
		{name: "fractional port", spec: map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"a": "b"}}, "targetPorts": []any{map[string]any{"number": 80.5}}}, wantErr: "not a port"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "p"}, "spec": tc.spec}}
			spec, err := parseInferencePool(u)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(spec.ports, tc.want) {
				t.Fatalf("ports = %v, %v; want %v", spec.ports, err, tc.want)
			}
			want := [3]string{"http", "", "FailClose"}
			if tc.proto != [3]string{} {
				want = tc.proto
			}
			if got := [3]string{spec.appProtocol, spec.protocol, spec.failureMode}; got != want {
				t.Fatalf("app protocol, worker protocol, failure mode = %q, want %q", got, want)
			}
		})
	}
}

func TestKubeConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     KubeConfig
		wantErr string
	}{
		{name: "good", cfg: KubeConfig{Namespace: "a", LabelSelector: "app=vllm"}},
		{name: "pool only", cfg: KubeConfig{Namespace: "a", InferencePool: "p"}},
		{name: "no namespace", cfg: KubeConfig{LabelSelector: "app=vllm"}, wantErr: "namespace is required"},
		{name: "bad selector", cfg: KubeConfig{Namespace: "a", LabelSelector: "app in (a"}, wantErr: "label selector"},
		{name: "nothing selects", cfg: KubeConfig{Namespace: "a"}, wantErr: "a label selector or an InferencePool"},
		{name: "bad port", cfg: KubeConfig{Namespace: "a", LabelSelector: "x", Defaults: PodDefaults{HTTPPort: 70000}}, wantErr: "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate = %v, want %q", err, tc.wantErr)
			}
		})
	}
	if _, err := NewKubernetes(fake.NewClientset(), nil, KubeConfig{Namespace: "a", InferencePool: "p"}, component.Options{}); err == nil {
		t.Fatal("InferencePool without a dynamic client accepted")
	}
}

func TestKubeClientsFromKubeconfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "config")
	if err := os.WriteFile(good, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: secret}
contexts:
- name: x
  context: {cluster: c, user: u, namespace: llm}
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cs, dyn, err := KubeClients(good)
	if err != nil || cs == nil || dyn == nil {
		t.Fatalf("KubeClients(good) = %v, %v, %v", cs, dyn, err)
	}
	if _, _, err := KubeClients(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("KubeClients with a missing kubeconfig succeeded")
	}
}
