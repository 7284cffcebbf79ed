package chartest_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/warmpath/warmpath/internal/app"
)

const (
	chartDir  = "../warmpath"
	release   = "warmpath" // helm install warmpath deploy/helm/warmpath -n llm: deploy/'s names
	namespace = "llm"

	// The Secrets deploy/ mounts and README.md tells how to create; the
	// chart references the same names and creates neither.
	tlsSecret  = "warmpath-tls"
	peerSecret = "warmpath-peer-token"

	// dashboardFile is the Grafana dashboard, deploy/grafana's original and
	// the chart's copy (charts may not hold symlinks).
	dashboardFile = "warmpath-dashboard.json"
	dashboardOrig = "../../grafana/" + dashboardFile
	dashboardCopy = chartDir + "/dashboards/" + dashboardFile
)

// strictDecoder rejects unknown and duplicate fields, as kubectl apply
// --validate=strict does.
var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// manifests are the objects one render produced, by kind.
type manifests struct {
	sa    []*corev1.ServiceAccount
	role  []*rbacv1.Role
	rb    []*rbacv1.RoleBinding
	cm    []*corev1.ConfigMap
	dep   []*appsv1.Deployment
	svc   []*corev1.Service
	pdb   []*policyv1.PodDisruptionBudget
	np    []*networkingv1.NetworkPolicy
	sm    []serviceMonitor
	kinds map[string]int
	notes string
}

// serviceMonitor is a monitoring.coreos.com/v1 ServiceMonitor: the object
// as unstructured, and its spec decoded strictly into the fields of the
// Prometheus Operator's CRD that the chart uses (a misspelt or misplaced
// field is an error).
type serviceMonitor struct {
	obj  *unstructured.Unstructured
	spec serviceMonitorSpec
}

type serviceMonitorSpec struct {
	NamespaceSelector struct {
		Any        bool     `json:"any,omitempty"`
		MatchNames []string `json:"matchNames,omitempty"`
	} `json:"namespaceSelector"`
	Selector  metav1.LabelSelector `json:"selector"`
	Endpoints []struct {
		Port          string `json:"port"`
		Path          string `json:"path"`
		Scheme        string `json:"scheme"`
		Interval      string `json:"interval"`
		ScrapeTimeout string `json:"scrapeTimeout"`
	} `json:"endpoints"`
}

func loadChart(t *testing.T) *chartv2.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return ch
}

func readValues(t *testing.T, file string) map[string]any {
	t.Helper()
	v, err := common.ReadValuesFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// render renders the chart as helm install --namespace llm warmpath would,
// values.schema.json included, and returns each template's output.
func render(ctx context.Context, ch *chartv2.Chart, vals map[string]any) (map[string]string, error) {
	top, err := util.ToRenderValues(ch, vals, common.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}, nil)
	if err != nil {
		return nil, err
	}
	var e engine.Engine
	return e.RenderWithContext(ctx, ch, top)
}

// decode splits every rendered template into documents and decodes each
// strictly.
func decode(rendered map[string]string) (*manifests, error) {
	m := &manifests{kinds: map[string]int{}}
	for _, name := range slices.Sorted(maps.Keys(rendered)) {
		switch base := path.Base(name); {
		case strings.HasPrefix(base, "_"):
			continue
		case base == "NOTES.txt":
			m.notes = rendered[name]
			continue
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(rendered[name])))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			var probe map[string]any
			if err := sigsyaml.Unmarshal(doc, &probe); err != nil {
				return nil, fmt.Errorf("%s document %d: %w", name, i, err)
			}
			if len(probe) == 0 { // only comments, or a disabled template
				continue
			}
			if err := m.add(doc); err != nil {
				return nil, fmt.Errorf("%s document %d: %w", name, i, err)
			}
		}
	}
	return m, nil
}

func (m *manifests) add(doc []byte) error {
	obj, _, err := strictDecoder.Decode(doc, nil, nil)
	if runtime.IsNotRegisteredError(err) {
		return m.addUnstructured(doc)
	}
	if err != nil {
		return err
	}
	switch o := obj.(type) {
	case *corev1.ServiceAccount:
		m.sa = append(m.sa, o)
	case *rbacv1.Role:
		m.role = append(m.role, o)
	case *rbacv1.RoleBinding:
		m.rb = append(m.rb, o)
	case *corev1.ConfigMap:
		m.cm = append(m.cm, o)
	case *appsv1.Deployment:
		m.dep = append(m.dep, o)
	case *corev1.Service:
		m.svc = append(m.svc, o)
	case *policyv1.PodDisruptionBudget:
		m.pdb = append(m.pdb, o)
	case *networkingv1.NetworkPolicy:
		m.np = append(m.np, o)
	default:
		return fmt.Errorf("unexpected %T", obj)
	}
	m.kinds[obj.GetObjectKind().GroupVersionKind().Kind]++
	return nil
}

// addUnstructured decodes the one kind outside client-go's scheme the
// chart renders, the Prometheus Operator's ServiceMonitor.
func (m *manifests) addUnstructured(doc []byte) error {
	j, err := sigsyaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		return err
	}
	if u.GetAPIVersion() != "monitoring.coreos.com/v1" || u.GetKind() != "ServiceMonitor" {
		return fmt.Errorf("unexpected %s %s", u.GetAPIVersion(), u.GetKind())
	}
	for k := range u.Object {
		if !slices.Contains([]string{"apiVersion", "kind", "metadata", "spec"}, k) {
			return fmt.Errorf("ServiceMonitor: unknown field %q", k)
		}
	}
	if u.GetName() == "" || u.GetNamespace() == "" {
		return errors.New("ServiceMonitor: metadata.name and metadata.namespace are required")
	}
	spec, ok := u.Object["spec"].(map[string]any)
	if !ok {
		return errors.New("ServiceMonitor: spec is required")
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	sm := serviceMonitor{obj: u}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sm.spec); err != nil {
		return fmt.Errorf("ServiceMonitor spec: %w", err)
	}
	if len(sm.spec.Selector.MatchLabels) == 0 && len(sm.spec.Selector.MatchExpressions) == 0 {
		return errors.New("ServiceMonitor: spec.selector is required (an empty one selects every Service)")
	}
	if len(sm.spec.Endpoints) == 0 {
		return errors.New("ServiceMonitor: spec.endpoints is required")
	}
	for i, ep := range sm.spec.Endpoints {
		if ep.Port == "" {
			return fmt.Errorf("ServiceMonitor: spec.endpoints[%d].port is required", i)
		}
	}
	m.sm = append(m.sm, sm)
	m.kinds["ServiceMonitor"]++
	return nil
}

// configOf returns the ConfigMap holding the file the container's
// --config names, and that file's text.
func configOf(m *manifests) (*corev1.ConfigMap, string, error) {
	pod := m.dep[0].Spec.Template.Spec
	args := strings.Join(pod.Containers[0].Args, " ")
	cfgPath, ok := strings.CutPrefix(args, "serve --config ")
	if !ok {
		return nil, "", fmt.Errorf("container args %q, want serve --config PATH", args)
	}
	vol, vm, rel, ok := source(pod, cfgPath)
	if !ok || vol.ConfigMap == nil {
		return nil, "", fmt.Errorf("config %s is not on a ConfigMap volume", cfgPath)
	}
	if vm.SubPath != "" {
		return nil, "", fmt.Errorf("config mount %s has subPath: kubelet would not update it", vm.MountPath)
	}
	key := keyOf(vol.ConfigMap.Items, rel)
	for _, cm := range m.cm {
		if cm.Name == vol.ConfigMap.Name {
			text, ok := cm.Data[key]
			if !ok {
				return nil, "", fmt.Errorf("config %s: ConfigMap %s has no key %q", cfgPath, cm.Name, key)
			}
			return cm, text, nil
		}
	}
	return nil, "", fmt.Errorf("config %s: ConfigMap %s is not rendered", cfgPath, vol.ConfigMap.Name)
}

// source returns the volume whose mount holds the file p, the mount, and
// p relative to the mount path.
func source(pod corev1.PodSpec, p string) (corev1.Volume, corev1.VolumeMount, string, bool) {
	var best corev1.VolumeMount
	found := false
	for _, vm := range pod.Containers[0].VolumeMounts {
		mp := strings.TrimSuffix(vm.MountPath, "/")
		if (p == mp || strings.HasPrefix(p, mp+"/")) && (!found || len(mp) > len(best.MountPath)) {
			best, found = vm, true
		}
	}
	if !found {
		return corev1.Volume{}, corev1.VolumeMount{}, "", false
	}
	for _, v := range pod.Volumes {
		if v.Name == best.Name {
			rel := strings.TrimPrefix(strings.TrimPrefix(p, strings.TrimSuffix(best.MountPath, "/")), "/")
			return v, best, rel, true
		}
	}
	return corev1.Volume{}, corev1.VolumeMount{}, "", false
}

// keyOf returns the key of a ConfigMap or Secret volume that kubelet
// writes at rel ("" when none): without items each key is a file of its
// name.
func keyOf(items []corev1.KeyToPath, rel string) string {
	if len(items) == 0 {
		if strings.Contains(rel, "/") {
			return ""
		}
		return rel
	}
	for _, it := range items {
		if path.Clean(it.Path) == rel {
			return it.Key
		}
	}
	return ""
}

// configPaths are the keys of warmpath.yaml that name files; "*" is every
// element of a list.
var configPaths = [][]string{
	{"listen", "tls", "cert_file"},
	{"listen", "tls", "key_file"},
	{"listen", "tls", "client_ca_file"},
	{"peers", "token_file"},
	{"debug", "token_file"},
	{"models", "*", "tokenizer"},
}

// loadConfig feeds the rendered warmpath.yaml to warmpath's strict loader.
// The files it names are what the pod's volumes (and the image) provide,
// which agree checks; here they are stand-ins under a temporary root: the
// peer token a 32-byte secret (the loader reads it), a tokenizer directory
// a tokenizer.json (the loader looks for it), the rest empty files.
func loadConfig(t *testing.T, m *manifests) error {
	t.Helper()
	if len(m.dep) != 1 {
		return errors.New("no Deployment")
	}
	_, text, err := configOf(m)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return fmt.Errorf("warmpath.yaml: %w", err)
	}
	root := t.TempDir()
	var errs []error
	for _, keys := range configPaths {
		visit(doc.Content[0], keys, func(n *yaml.Node) {
			p := n.Value
			if p == "" {
				return
			}
			if !path.IsAbs(p) {
				errs = append(errs, fmt.Errorf("%s: %q is not absolute", strings.Join(keys, "."), p))
				return
			}
			local := filepath.Join(root, filepath.FromSlash(p))
			var err error
			switch keys[len(keys)-1] {
			case "tokenizer":
				err = os.MkdirAll(local, 0o755)
				if err == nil {
					err = os.WriteFile(filepath.Join(local, "tokenizer.json"), []byte("{}"), 0o644)
				}
			default:
				err = os.MkdirAll(filepath.Dir(local), 0o755)
				if err == nil {
					err = os.WriteFile(local, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
				}
			}
			if err != nil {
				errs = append(errs, err)
			}
			n.Value = local
		})
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	b, err := yaml.Marshal(&doc)
	if err != nil {
		return err
	}
	if _, err := app.ParseConfig(b); err != nil {
		return fmt.Errorf("warmpath rejects the rendered warmpath.yaml: %w", err)
	}
	return nil
}

// visit calls f on each scalar node at keys below n.
func visit(n *yaml.Node, keys []string, f func(*yaml.Node)) {
	if len(keys) == 0 {
		if n.Kind == yaml.ScalarNode {
			f(n)
		}
		return
	}
	switch {
	case keys[0] == "*" && n.Kind == yaml.SequenceNode:
		for _, c := range n.Content {
			visit(c, keys[1:], f)
		}
	case n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == keys[0] {
				visit(n.Content[i+1], keys[1:], f)
			}
		}
	}
}

// problems renders the chart with vals and returns the objects and every
// problem: a render or decode error, disagreements, the loader's verdict.
func problems(t *testing.T, ch *chartv2.Chart, vals map[string]any, opt options) (*manifests, []error) {
	t.Helper()
	rendered, err := render(t.Context(), ch, vals)
	if err != nil {
		return nil, []error{fmt.Errorf("render: %w", err)}
	}
	m, err := decode(rendered)
	if err != nil {
		return nil, []error{fmt.Errorf("decode: %w", err)}
	}
	errs := agree(m, opt)
	if err := loadConfig(t, m); err != nil {
		errs = append(errs, err)
	}
	return m, errs
}

// env returns the container's environment by name.
func env(c corev1.Container) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		out[e.Name] = e
	}
	return out
}

// warmpathConfig returns the rendered warmpath.yaml's keys the checks read.
func warmpathConfig(t *testing.T, m *manifests) renderedConfig {
	t.Helper()
	_, text, err := configOf(m)
	if err != nil {
		t.Fatal(err)
	}
	var cfg renderedConfig
	if err := sigsyaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}
