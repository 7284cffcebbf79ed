package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/warmpath/warmpath/internal/component"
)

// Pod annotations that override PodDefaults for one pod.
const (
	// AnnotationHTTPPort is the port of the pod's OpenAI-compatible HTTP
	// server. Ignored when an InferencePool supplies target ports.
	AnnotationHTTPPort = "warmpath.io/http-port"
	// AnnotationKVEventsPort is the ZMQ PUB port of data-parallel rank 0;
	// "0" turns KV events off for the pod.
	AnnotationKVEventsPort = "warmpath.io/kv-events-port"
	// AnnotationKVReplayPort is the ZMQ ROUTER replay port of rank 0; "0"
	// turns replay off.
	AnnotationKVReplayPort = "warmpath.io/kv-replay-port"
	// AnnotationDataParallelSize is the number of data-parallel ranks
	// behind the pod's HTTP port.
	AnnotationDataParallelSize = "warmpath.io/data-parallel-size"
	// AnnotationModels is a comma-separated list of served model names.
	AnnotationModels = "warmpath.io/models"
	// AnnotationActivePorts is the Inference Extension's own annotation:
	// the comma-separated target ports of the pod that serve (the others
	// are ranks not started, or drained). Without it every target port
	// serves.
	AnnotationActivePorts = "inference.networking.k8s.io/active-ports"
)

// InferencePoolGVR names the Gateway API Inference Extension InferencePool
// resource (v1) that the Kubernetes source can read its membership from.
var InferencePoolGVR = schema.GroupVersionResource{
	Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools",
}

// PodDefaults are the per-pod settings used when a pod has no annotation
// overriding them.
type PodDefaults struct {
	// HTTPPort is the vLLM HTTP port. Default 8000.
	HTTPPort int `yaml:"http_port"`
	// KVEventsPort and KVReplayPort are the ZMQ ports of rank 0; zero
	// means the pod publishes no events, or offers no replay.
	KVEventsPort int `yaml:"kv_events_port"`
	KVReplayPort int `yaml:"kv_replay_port"`
	// DataParallelSize is the number of ranks; zero means one.
	DataParallelSize int `yaml:"data_parallel_size"`
	// Models are the served model names.
	Models []string `yaml:"models"`
}

// KubeConfig selects the pods of a Kubernetes source: the
// discovery.kubernetes section of warmpath's configuration, which turns the
// source on when Namespace is set.
type KubeConfig struct {
	// Namespace holds the pods (and the InferencePool). Required.
	Namespace string `yaml:"namespace"`
	// LabelSelector selects pods (Kubernetes selector syntax). With
	// InferencePool set both must match. Empty selects every pod, which
	// only makes sense with InferencePool.
	LabelSelector string `yaml:"label_selector"`
	// InferencePool, when set, names an InferencePool (v1) in Namespace
	// whose spec.selector.matchLabels selects the pods and whose
	// spec.targetPorts are the HTTP ports: each port of each pod (a
	// data-parallel rank, say) is a worker, named "pod" for a single port
	// and "pod-port" otherwise, unless the pod's
	// inference.networking.k8s.io/active-ports annotation leaves it out.
	// spec.appProtocol kubernetes.io/h2c makes the workers HTTP/2
	// cleartext (Worker.Protocol); spec.endpointPickerRef.failureMode is
	// reported (warmpath_discovery_inference_pool_info) and, when FailOpen,
	// logged: the gateway then forwards requests without warmpath whenever
	// it cannot reach it, and warmpath sees their load only in scrapes.
	InferencePool string `yaml:"inference_pool"`
	// Kubeconfig is a kubeconfig path; empty tries $KUBECONFIG,
	// ~/.kube/config, then in-cluster credentials (see KubeClients).
	Kubeconfig string `yaml:"kubeconfig"`
	// Defaults are the per-pod settings that annotations override
	// (deploy/README.md lists the warmpath.io/* annotations).
	Defaults PodDefaults `yaml:"defaults"`
}

// Validate reports configuration errors.
func (c KubeConfig) Validate() error {
	var errs []error
	if c.Namespace == "" {
		errs = append(errs, errors.New("namespace is required"))
	}
	if _, err := labels.Parse(c.LabelSelector); err != nil {
		errs = append(errs, fmt.Errorf("label selector: %w", err))
	}
	if c.LabelSelector == "" && c.InferencePool == "" {
		errs = append(errs, errors.New("a label selector or an InferencePool is required"))
	}
	if c.Defaults.HTTPPort < 0 || c.Defaults.HTTPPort > 65535 {
		errs = append(errs, fmt.Errorf("http port %d out of range", c.Defaults.HTTPPort))
	}
	return errors.Join(errs...)
}

// Kubernetes is a Source that follows the vLLM pods of one namespace
// through client-go informers. A pod is a worker while it is Ready, has an
// IP, is not terminating and matches the selector (and the InferencePool's
// selector, when one is configured). Events are coalesced with a one-slot
// trigger and the set is rebuilt from the informer cache, so a burst of
// pod changes costs one rebuild.
type Kubernetes struct {
	cs     kubernetes.Interface
	dyn    dynamic.Interface
	cfg    KubeConfig
	sel    labels.Selector
	log    *slog.Logger
	synced atomic.Bool

	skipped  *prometheus.CounterVec
	poolInfo *prometheus.GaugeVec
	// logged remembers the last problem logged per pod, so each is logged
	// once per change. Only the rebuild goroutine touches it.
	logged map[string]string
}

// NewKubernetes returns a Kubernetes source. dyn is needed only with
// cfg.InferencePool. Options: WithLogger, WithRegisterer.
func NewKubernetes(cs kubernetes.Interface, dyn dynamic.Interface, cfg KubeConfig, co component.Options) (*Kubernetes, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kubernetes discovery: %w", err)
	}
	if cfg.InferencePool != "" && dyn == nil {
		return nil, errors.New("kubernetes discovery: InferencePool needs a dynamic client")
	}
	if cfg.Defaults.HTTPPort == 0 {
		cfg.Defaults.HTTPPort = 8000
	}
	sel, _ := labels.Parse(cfg.LabelSelector)
	k := &Kubernetes{
		cs: cs, dyn: dyn, cfg: cfg, sel: sel, log: co.Log(),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_discovery_pods_skipped_total",
			Help: "Ready, matching pods left out of the worker set, by reason (bad_annotation, no_models, bad_pool, no_active_ports).",
		}, []string{"reason"}),
		poolInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warmpath_discovery_inference_pool_info",
			Help: "The InferencePool followed (1 while usable): its appProtocol and endpointPickerRef.failureMode.",
		}, []string{"app_protocol", "failure_mode"}),
		logged: map[string]string{},
	}
	for _, r := range []string{"bad_annotation", "no_models", "bad_pool", "no_active_ports"} {
		k.skipped.WithLabelValues(r)
	}
	if err := co.Register("kubernetes discovery", k.skipped, k.poolInfo); err != nil {
		return nil, fmt.Errorf("kubernetes discovery: %w", err)
	}
	return k, nil
}

// KubeClients builds clients from the kubeconfig file at path or, when path
// is empty, from $KUBECONFIG, ~/.kube/config or the in-cluster service
// account, in that order.
func KubeClients(path string) (kubernetes.Interface, dynamic.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes clientset: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes dynamic client: %w", err)
	}
	return cs, dyn, nil
}

// Synced reports whether the informer caches have synced and the first set
// was published.
func (k *Kubernetes) Synced() bool { return k.synced.Load() }

// Run starts the informers, publishes the first set once their caches have
// synced, and then a new set after every relevant change, until ctx is
// done. It returns nil on cancellation.
func (k *Kubernetes) Run(ctx context.Context, out *Updates) error {
	ctx, cancel := context.WithCancel(ctx)
	trigger := make(chan struct{}, 1)
	kick := func() {
		select {
		case trigger <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kick() },
		UpdateFunc: func(any, any) { kick() },
		DeleteFunc: func(any) { kick() },
	}
	factory := informers.NewSharedInformerFactoryWithOptions(k.cs, 0,
		informers.WithNamespace(k.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = k.cfg.LabelSelector }),
		informers.WithTransform(stripManagedFields))
	defer factory.Shutdown()
	podInf := factory.Core().V1().Pods().Informer()
	if _, err := podInf.AddEventHandler(handler); err != nil {
		cancel()
		return fmt.Errorf("kubernetes discovery: pod handler: %w", err)
	}
	syncs := []cache.InformerSynced{podInf.HasSynced}
	var poolStore cache.Store
	if k.cfg.InferencePool != "" {
		dfactory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(k.dyn, 0, k.cfg.Namespace, nil)
		defer dfactory.Shutdown()
		poolInf := dfactory.ForResource(InferencePoolGVR).Informer()
		if _, err := poolInf.AddEventHandler(handler); err != nil {
			cancel()
			return fmt.Errorf("kubernetes discovery: inferencepool handler: %w", err)
		}
		poolStore = poolInf.GetStore()
		syncs = append(syncs, poolInf.HasSynced)
		dfactory.Start(ctx.Done())
	}
	defer cancel() // runs before the Shutdowns above, which wait for the informers
	factory.Start(ctx.Done())
	k.log.Info("discovery: waiting for kubernetes caches", "namespace", k.cfg.Namespace,
		"selector", k.cfg.LabelSelector, "inferencepool", k.cfg.InferencePool)
	if !cache.WaitForCacheSync(ctx.Done(), syncs...) {
		return nil // cancelled before the caches synced
	}
	var last []Worker
	first := true
	for {
		ws := k.build(podInf.GetStore(), poolStore)
		if first {
			k.synced.Store(true)
			k.log.Info("discovery: kubernetes caches synced", "namespace", k.cfg.Namespace, "workers", len(ws))
		}
		if first || !reflect.DeepEqual(ws, last) {
			out.Publish(ws)
			last = ws
		}
		first = false
		select {
		case <-ctx.Done():
			return nil
		case <-trigger:
		}
	}
}

func stripManagedFields(obj any) (any, error) {
	if a, ok := obj.(metav1.ObjectMetaAccessor); ok {
		a.GetObjectMeta().SetManagedFields(nil)
	}
	return obj, nil
}

// build derives the worker set from the informer caches.
func (k *Kubernetes) build(pods, pools cache.Store) []Worker {
	sel := k.sel
	var spec poolSpec // no ports: the pod's own HTTP port
	if pools != nil {
		var err error
		key := "inferencepool/" + k.cfg.InferencePool
		if spec, err = k.pool(pools); err != nil {
			k.skipped.WithLabelValues("bad_pool").Inc()
			k.poolInfo.Reset()
			k.logOnce(key, err.Error(), "discovery: InferencePool unusable, no workers", "err", err)
			return []Worker{}
		}
		k.poolInfo.Reset()
		k.poolInfo.WithLabelValues(spec.appProtocol, spec.failureMode).Set(1)
		if spec.failureMode == "FailOpen" {
			k.logOnce(key, "FailOpen", "discovery: the InferencePool's endpointPickerRef.failureMode is FailOpen: "+
				"while the gateway cannot reach warmpath it forwards requests by itself, whose load warmpath sees only in scrapes",
				"inferencepool", k.cfg.InferencePool)
		} else {
			delete(k.logged, key)
		}
		reqs, _ := spec.sel.Requirements()
		sel = sel.Add(reqs...)
	}
	var ws []Worker
	seen := map[string]bool{}
	for _, obj := range pods.List() {
		pod, ok := obj.(*corev1.Pod)
		if !ok || !podUsable(pod, sel) {
			continue
		}
		key := pod.Namespace + "/" + pod.Name
		seen[key] = true
		pw, reason, err := k.podWorkers(pod, spec)
		if err != nil {
			k.skipped.WithLabelValues(reason).Inc()
			k.logOnce(key, pod.ResourceVersion+err.Error(), "discovery: pod left out of the worker set", "pod", key, "err", err)
			continue
		}
		delete(k.logged, key)
		ws = append(ws, pw...)
	}
	for key := range k.logged {
		if !seen[key] && !strings.HasPrefix(key, "inferencepool/") {
			delete(k.logged, key)
		}
	}
	slices.SortFunc(ws, func(a, b Worker) int { return strings.Compare(a.Name, b.Name) })
	if ws == nil {
		ws = []Worker{}
	}
	return ws
}

func (k *Kubernetes) logOnce(key, what, msg string, args ...any) {
	if k.logged[key] == what {
		return
	}
	k.logged[key] = what
	k.log.Warn(msg, args...)
}

// podUsable reports whether pod may serve: Ready, with an IP, not
// terminating, and matching sel. Fake and real watches alike may deliver
// pods that no longer match, so the selector is checked here again.
func podUsable(pod *corev1.Pod, sel labels.Selector) bool {
	if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" || !sel.Matches(labels.Set(pod.Labels)) {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podWorkers turns one usable pod into its workers: one per HTTP port (the
// pool's active target ports, or the pod's own port). With several ports,
// server i (the i-th target port) publishes KV events on the annotated
// ports plus i × data-parallel size, so the ranks of different servers do
// not collide. reason labels the skip counter when err is not nil.
func (k *Kubernetes) podWorkers(pod *corev1.Pod, spec poolSpec) (ws []Worker, reason string, err error) {
	ports := spec.ports
	d := k.cfg.Defaults
	ann := pod.Annotations
	var errs []error
	port := func(key string, def int) int {
		v, ok := ann[key]
		if !ok {
			return def
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 || n > 65535 {
			errs = append(errs, fmt.Errorf("annotation %s=%q: not a port", key, v))
			return def
		}
		return n
	}
	httpPort := port(AnnotationHTTPPort, d.HTTPPort)
	kvPort := port(AnnotationKVEventsPort, d.KVEventsPort)
	replayPort := port(AnnotationKVReplayPort, d.KVReplayPort)
	dp := d.DataParallelSize
	if v, ok := ann[AnnotationDataParallelSize]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > 1024 {
			errs = append(errs, fmt.Errorf("annotation %s=%q: not a rank count", AnnotationDataParallelSize, v))
		} else {
			dp = n
		}
	}
	models := d.Models
	if v, ok := ann[AnnotationModels]; ok {
		models = nil
		for m := range strings.SplitSeq(v, ",") {
			if m = strings.TrimSpace(m); m != "" && !slices.Contains(models, m) {
				models = append(models, m)
			}
		}
	}
	if len(errs) > 0 {
		return nil, "bad_annotation", errors.Join(errs...)
	}
	if httpPort == 0 && ports == nil {
		return nil, "bad_annotation", fmt.Errorf("annotation %s: port 0", AnnotationHTTPPort)
	}
	if len(models) == 0 {
		return nil, "no_models", fmt.Errorf("no served model names: set %s or a default", AnnotationModels)
	}
	if ports == nil {
		ports = []int{httpPort}
	}
	active := activePorts(ann, ports)
	if len(active) == 0 {
		return nil, "no_active_ports", fmt.Errorf("annotation %s=%q names none of the target ports %v", AnnotationActivePorts, ann[AnnotationActivePorts], ports)
	}
	ranks := max(dp, 1)
	for i, p := range ports {
		if !active[p] {
			continue
		}
		w := Worker{
			Name:             pod.Name,
			Address:          net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(p)),
			Models:           slices.Clone(models),
			DataParallelSize: dp,
			Protocol:         spec.protocol,
		}
		if len(ports) > 1 {
			w.Name = pod.Name + "-" + strconv.Itoa(p)
		}
		if kvPort > 0 {
			w.KVEvents = "tcp://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(kvPort+i*ranks))
		}
		if replayPort > 0 {
			w.KVReplay = "tcp://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(replayPort+i*ranks))
		}
		ws = append(ws, w)
	}
	return ws, "", nil
}

// activePorts returns which of ports the pod's active-ports annotation
// names (all of them without one); entries that are not target ports are
// ignored, as the Inference Extension's own picker ignores them.
func activePorts(ann map[string]string, ports []int) map[int]bool {
	out := make(map[int]bool, len(ports))
	v, ok := ann[AnnotationActivePorts]
	for _, p := range ports {
		out[p] = !ok
	}
	if !ok {
		return out
	}
	for e := range strings.SplitSeq(v, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(e)); err == nil {
			if _, target := out[n]; target {
				out[n] = true
			}
		}
	}
	for p, on := range out {
		if !on {
			delete(out, p)
		}
	}
	return out
}

// poolSpec is what warmpath reads of an InferencePool.
type poolSpec struct {
	sel   labels.Selector
	ports []int
	// appProtocol is spec.appProtocol ("http" when unset) and protocol the
	// matching Worker.Protocol; failureMode is
	// spec.endpointPickerRef.failureMode ("FailClose" when unset).
	appProtocol, protocol, failureMode string
}

// pool reads the configured InferencePool.
func (k *Kubernetes) pool(store cache.Store) (poolSpec, error) {
	obj, ok, err := store.GetByKey(k.cfg.Namespace + "/" + k.cfg.InferencePool)
	if err != nil {
		return poolSpec{}, fmt.Errorf("inferencepool %s: %w", k.cfg.InferencePool, err)
	}
	if !ok {
		return poolSpec{}, fmt.Errorf("inferencepool %s/%s not found", k.cfg.Namespace, k.cfg.InferencePool)
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return poolSpec{}, fmt.Errorf("inferencepool %s: unexpected object %T", k.cfg.InferencePool, obj)
	}
	return parseInferencePool(u)
}

// parseInferencePool reads spec.selector.matchLabels, spec.targetPorts,
// spec.appProtocol and spec.endpointPickerRef.failureMode of an
// InferencePool (v1), with the API's defaults and enums.
func parseInferencePool(u *unstructured.Unstructured) (poolSpec, error) {
	name := u.GetName()
	ml, found, err := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
	if err != nil || !found || len(ml) == 0 {
		return poolSpec{}, fmt.Errorf("inferencepool %s: spec.selector.matchLabels missing or empty", name)
	}
	spec := poolSpec{appProtocol: "http", failureMode: "FailClose"}
	if spec.sel, err = labels.ValidatedSelectorFromSet(ml); err != nil {
		return poolSpec{}, fmt.Errorf("inferencepool %s: selector: %w", name, err)
	}
	tps, found, err := unstructured.NestedSlice(u.Object, "spec", "targetPorts")
	if err != nil || !found || len(tps) == 0 {
		return poolSpec{}, fmt.Errorf("inferencepool %s: spec.targetPorts missing or empty", name)
	}
	for i, tp := range tps {
		m, ok := tp.(map[string]any)
		if !ok {
			return poolSpec{}, fmt.Errorf("inferencepool %s: targetPorts[%d] is not an object", name, i)
		}
		n, ok := toInt(m["number"])
		if !ok || n < 1 || n > 65535 {
			return poolSpec{}, fmt.Errorf("inferencepool %s: targetPorts[%d].number %v is not a port", name, i, m["number"])
		}
		if !slices.Contains(spec.ports, n) {
			spec.ports = append(spec.ports, n)
		}
	}
	switch ap, _, _ := unstructured.NestedString(u.Object, "spec", "appProtocol"); ap {
	case "", "http":
	case "kubernetes.io/h2c":
		spec.appProtocol, spec.protocol = ap, ProtocolH2C
	default:
		return poolSpec{}, fmt.Errorf("inferencepool %s: spec.appProtocol %q: want http or kubernetes.io/h2c", name, ap)
	}
	switch fm, _, _ := unstructured.NestedString(u.Object, "spec", "endpointPickerRef", "failureMode"); fm {
	case "":
	case "FailOpen", "FailClose":
		spec.failureMode = fm
	default:
		return poolSpec{}, fmt.Errorf("inferencepool %s: spec.endpointPickerRef.failureMode %q: want FailOpen or FailClose", name, fm)
	}
	return spec, nil
}

func toInt(v any) (int, bool) {
	switch n := v.(type) {
	case int64:
		return int(n), true
	case int32:
		return int(n), true
	case int:
		return n, true
	case float64:
		if n == float64(int(n)) {
			return int(n), true
		}
	}
	return 0, false
}
