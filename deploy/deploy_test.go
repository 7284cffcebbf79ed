// Package deploy_test checks that the Kubernetes manifests in this
// directory decode strictly and agree with each other and with what
// warmpath's discovery needs.
package deploy_test

import (
	"bytes"
	"net"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// manifestFiles are the files kustomization.yaml applies, in its order.
var manifestFiles = []string{"rbac.yaml", "configmap.yaml", "deployment.yaml", "service.yaml", "pdb.yaml", "networkpolicy.yaml"}

// peerSecret is the Secret holding the replicas' shared token; it is
// created by hand, never committed (README.md, "Replicas").
const peerSecret = "warmpath-peer-token"

type manifests struct {
	sa   []*corev1.ServiceAccount
	role []*rbacv1.Role
	rb   []*rbacv1.RoleBinding
	cm   []*corev1.ConfigMap
	dep  []*appsv1.Deployment
	svc  []*corev1.Service
	pdb  []*policyv1.PodDisruptionBudget
	np   []*networkingv1.NetworkPolicy
}

func load(t *testing.T) manifests {
	t.Helper()
	strict := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var m manifests
	for _, f := range manifestFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(b, []byte("\n---\n")) {
			obj, _, err := strict.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
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
				t.Fatalf("%s document %d: unexpected %T", f, i, obj)
			}
			if ns := obj.(interface{ GetNamespace() string }).GetNamespace(); ns != "llm" {
				t.Errorf("%s document %d: namespace %q, want llm", f, i, ns)
			}
		}
	}
	if len(m.sa) != 1 || len(m.role) != 1 || len(m.rb) != 1 || len(m.cm) != 1 || len(m.dep) != 1 || len(m.svc) != 1 || len(m.pdb) != 1 || len(m.np) != 1 {
		t.Fatalf("want one of each kind, got %d SA, %d Role, %d RoleBinding, %d ConfigMap, %d Deployment, %d Service, %d PodDisruptionBudget",
			len(m.sa), len(m.role), len(m.rb), len(m.cm), len(m.dep), len(m.svc), len(m.pdb))
	}
	return m
}

// peerTokenPath returns where the container finds key token of the Secret
// peerSecret, failing the test unless exactly one read-only mount of it
// exists.
func peerTokenPath(t *testing.T, pod corev1.PodTemplateSpec) string {
	t.Helper()
	var found []string
	for _, v := range pod.Spec.Volumes {
		s := v.Secret
		if s == nil || s.SecretName != peerSecret {
			continue
		}
		if s.Optional != nil && *s.Optional {
			t.Errorf("volume %s: the peer token must not be optional", v.Name)
		}
		file := "token" // without items, each key is a file of its name
		for _, it := range s.Items {
			if it.Key == "token" {
				file = it.Path
			}
		}
		for _, vm := range pod.Spec.Containers[0].VolumeMounts {
			if vm.Name != v.Name {
				continue
			}
			if !vm.ReadOnly || vm.SubPath != "" {
				t.Errorf("mount %s: want read-only, without subPath (kubelet then updates it)", vm.MountPath)
			}
			found = append(found, path.Join(vm.MountPath, file))
		}
	}
	if len(found) != 1 {
		t.Fatalf("Secret %s key token mounted at %v, want one path", peerSecret, found)
	}
	return found[0]
}

// exampleConfig is the part of the ConfigMap's warmpath.yaml that the
// other manifests must agree with.
type exampleConfig struct {
	Listen struct {
		ExtProc string            `json:"extproc"`
		Admin   string            `json:"admin"`
		TLS     map[string]string `json:"tls"`
	} `json:"listen"`
	Policy    string           `json:"policy"`
	Models    []map[string]any `json:"models"`
	Discovery struct {
		Kubernetes struct {
			Namespace     string         `json:"namespace"`
			LabelSelector string         `json:"label_selector"`
			Defaults      map[string]any `json:"defaults"`
		} `json:"kubernetes"`
	} `json:"discovery"`
	Peers struct {
		TokenFile string `json:"token_file"`
		DNS       string `json:"dns"`
	} `json:"peers"`
}

func TestKustomizationListsTheManifests(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Namespace  string   `json:"namespace"`
		Resources  []string `json:"resources"`
	}
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatal(err)
	}
	if k.Namespace != "llm" || !slices.Equal(k.Resources, manifestFiles) {
		t.Errorf("kustomization: namespace %q, resources %v; want llm, %v", k.Namespace, k.Resources, manifestFiles)
	}
}

func TestManifestsAgree(t *testing.T) {
	t.Parallel()
	m := load(t)
	dep, svc, role, rb, cm, pdb := m.dep[0], m.svc[0], m.role[0], m.rb[0], m.cm[0], m.pdb[0]
	pod := dep.Spec.Template
	var cfg exampleConfig
	if err := yaml.Unmarshal([]byte(cm.Data["warmpath.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}

	t.Run("rbac", func(t *testing.T) {
		allowed := func(group, resource string) bool {
			for _, r := range role.Rules {
				if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) {
					for _, v := range []string{"get", "list", "watch"} {
						if !slices.Contains(r.Verbs, v) {
							return false
						}
					}
					for _, v := range r.Verbs {
						if v != "get" && v != "list" && v != "watch" {
							t.Errorf("role grants %q on %s", v, resource)
						}
					}
					return true
				}
			}
			return false
		}
		if !allowed("", "pods") || !allowed("inference.networking.k8s.io", "inferencepools") {
			t.Error("role must allow get/list/watch on pods and inferencepools")
		}
		if rb.RoleRef.Name != role.Name || rb.RoleRef.Kind != "Role" {
			t.Errorf("binding refers to %s %s", rb.RoleRef.Kind, rb.RoleRef.Name)
		}
		if len(rb.Subjects) != 1 || rb.Subjects[0].Name != m.sa[0].Name || pod.Spec.ServiceAccountName != m.sa[0].Name {
			t.Error("deployment, binding and service account names disagree")
		}
	})

	t.Run("service selects the pods", func(t *testing.T) {
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
			t.Error("service selector does not match the pod template")
		}
		sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
		if !sel.Matches(labels.Set(pod.Labels)) {
			t.Error("deployment selector does not match its template")
		}
		named := map[string]int32{}
		for _, p := range pod.Spec.Containers[0].Ports {
			named[p.Name] = p.ContainerPort
		}
		for _, p := range svc.Spec.Ports {
			if _, ok := named[p.TargetPort.String()]; !ok {
				t.Errorf("service port %s targets %s, not a container port", p.Name, p.TargetPort.String())
			}
		}
		if named["extproc"] != 9002 || named["admin"] != 9090 {
			t.Errorf("container ports %v, want extproc 9002 and admin 9090 (DESIGN §4)", named)
		}
	})

	t.Run("probes and config mount", func(t *testing.T) {
		c := pod.Spec.Containers[0]
		if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Error("readiness probe must GET /readyz")
		}
		if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
			t.Error("liveness probe must GET /healthz")
		}
		for _, pr := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
			if pr != nil && pr.HTTPGet != nil && pr.HTTPGet.Port.String() != "admin" {
				t.Errorf("probe on port %s, want the admin port", pr.HTTPGet.Port.String())
			}
		}
		args := strings.Join(c.Args, " ")
		if !strings.HasPrefix(args, "serve --config ") {
			t.Fatalf("args %q", args)
		}
		cfgPath := strings.TrimPrefix(args, "serve --config ")
		var mounted bool
		for _, vm := range c.VolumeMounts {
			for _, v := range pod.Spec.Volumes {
				if v.Name == vm.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
					key := strings.TrimPrefix(cfgPath, strings.TrimSuffix(vm.MountPath, "/")+"/")
					if _, ok := cm.Data[key]; ok && key != cfgPath {
						mounted = true
					}
				}
			}
		}
		if !mounted {
			t.Errorf("config %s is not a key of ConfigMap %s mounted into the container", cfgPath, cm.Name)
		}
	})

	t.Run("mutual TLS from the Secret", func(t *testing.T) {
		want := map[string]string{"cert_file": "tls.crt", "key_file": "tls.key", "client_ca_file": "ca.crt"}
		for key, file := range want {
			p := cfg.Listen.TLS[key]
			var found bool
			for _, v := range pod.Spec.Volumes {
				if v.Secret == nil || v.Secret.SecretName != "warmpath-tls" {
					continue
				}
				for _, vm := range pod.Spec.Containers[0].VolumeMounts {
					if vm.Name == v.Name && vm.ReadOnly && vm.SubPath == "" && p == path.Join(vm.MountPath, file) {
						found = true
					}
				}
			}
			if !found {
				t.Errorf("listen.tls.%s %q is not key %s of Secret warmpath-tls mounted read-only", key, p, file)
			}
		}
	})

	t.Run("network policy", func(t *testing.T) {
		np := m.np[0]
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
			t.Fatalf("the NetworkPolicy does not select warmpath's pods (%v)", err)
		}
		ports := map[string]bool{}
		for _, p := range pod.Spec.Containers[0].Ports {
			ports[p.Name] = true
		}
		seen := map[string]bool{}
		for _, r := range np.Spec.Ingress {
			for _, p := range r.Ports {
				if p.Port == nil || !ports[p.Port.String()] {
					t.Errorf("the NetworkPolicy admits port %v, not a named port of the container", p.Port)
					continue
				}
				seen[p.Port.String()] = true
			}
			if len(r.From) == 0 {
				t.Error("a NetworkPolicy rule admits every source")
			}
		}
		if !seen["extproc"] || !seen["admin"] {
			t.Errorf("the NetworkPolicy admits %v, want extproc and admin", seen)
		}
	})

	t.Run("example config", func(t *testing.T) {
		if cfg.Listen.ExtProc != ":9002" || cfg.Listen.Admin != ":9090" || cfg.Policy == "" || len(cfg.Models) == 0 {
			t.Errorf("config misses the DESIGN §4 names: %+v", cfg)
		}
		k := cfg.Discovery.Kubernetes
		if k.Namespace != "llm" {
			t.Errorf("discovery namespace %q, want the manifests' llm", k.Namespace)
		}
		if _, err := labels.Parse(k.LabelSelector); err != nil || k.LabelSelector == "" {
			t.Errorf("label selector %q: %v", k.LabelSelector, err)
		}
		if sel, _ := labels.Parse(k.LabelSelector); sel.Matches(labels.Set(pod.Labels)) {
			t.Error("the worker selector matches warmpath's own pods")
		}
	})

	t.Run("replicas survive a disruption", func(t *testing.T) {
		if dep.Spec.Replicas == nil || *dep.Spec.Replicas < 2 {
			t.Fatalf("replicas %v, want at least 2", dep.Spec.Replicas)
		}
		if pdb.Namespace != dep.Namespace {
			t.Errorf("PodDisruptionBudget in %q, Deployment in %q", pdb.Namespace, dep.Namespace)
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
			t.Errorf("PodDisruptionBudget selector %v does not select the Deployment's pods (%v)", pdb.Spec.Selector, err)
		}
		// minAvailable as high as replicas would block every drain.
		if mina := pdb.Spec.MinAvailable; mina == nil || mina.IntValue() != 1 || pdb.Spec.MaxUnavailable != nil {
			t.Errorf("PodDisruptionBudget minAvailable %v, maxUnavailable %v; want minAvailable 1 alone", mina, pdb.Spec.MaxUnavailable)
		}
		var spread bool
		if a := pod.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
			for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
				term := w.PodAffinityTerm
				sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
				if err == nil && !sel.Empty() && sel.Matches(labels.Set(pod.Labels)) && term.TopologyKey == corev1.LabelHostname {
					spread = true
				}
			}
		}
		if !spread {
			t.Error("no preferred pod anti-affinity by hostname keeps the replicas on different nodes")
		}
	})

	t.Run("peer token mount", func(t *testing.T) {
		if got := peerTokenPath(t, pod); cfg.Peers.TokenFile != got {
			t.Errorf("peers.token_file %q, but the Secret %s is mounted at %q", cfg.Peers.TokenFile, peerSecret, got)
		}
		for _, v := range pod.Spec.Volumes {
			if s := v.Secret; s != nil && s.SecretName == peerSecret && (s.DefaultMode == nil || *s.DefaultMode&0o007 != 0) {
				t.Errorf("volume %s: defaultMode unset (0644) or readable by others, want 0440", v.Name)
			}
		}
		if sc := pod.Spec.SecurityContext; sc.FSGroup == nil || sc.RunAsGroup == nil || *sc.FSGroup != *sc.RunAsGroup {
			t.Error("fsGroup must be the container's group, which then reads the 0440 token")
		}
	})

	t.Run("peers dns is the headless service", func(t *testing.T) {
		host, port, err := net.SplitHostPort(cfg.Peers.DNS)
		if err != nil {
			t.Fatalf("peers.dns %q: %v", cfg.Peers.DNS, err)
		}
		if want := svc.Name + "." + dep.Namespace + ".svc.cluster.local"; host != want || svc.Namespace != dep.Namespace {
			t.Errorf("peers.dns host %q, want %q (Service %s/%s)", host, want, svc.Namespace, svc.Name)
		}
		// Only a headless Service resolves to every replica's address.
		if svc.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("Service clusterIP %q, want None", svc.Spec.ClusterIP)
		}
		// The A records are pod addresses: the port is the container's,
		// which the Service's extproc port must equal too.
		var svcPort, podPort int32
		for _, p := range svc.Spec.Ports {
			if p.Name == "extproc" {
				svcPort = p.Port
			}
		}
		for _, p := range pod.Spec.Containers[0].Ports {
			if p.Name == "extproc" {
				podPort = p.ContainerPort
			}
		}
		if port != strconv.Itoa(int(svcPort)) || svcPort != podPort {
			t.Errorf("peers.dns port %s, Service extproc port %d, container extproc port %d: want one port", port, svcPort, podPort)
		}
	})
}
