package chartest_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	sigsyaml "sigs.k8s.io/yaml"
)

// options are what a values file says that the objects cannot show.
type options struct {
	// imageDirs are directories baked into the image (tokenizers.source:
	// image); a path under one is on no volume.
	imageDirs []string
}

// renderedConfig is the part of warmpath.yaml the manifests must agree with.
type renderedConfig struct {
	Listen struct {
		ExtProc        string            `json:"extproc"`
		Admin          string            `json:"admin"`
		TLS            map[string]string `json:"tls"`
		AllowPlaintext bool              `json:"allow_plaintext"`
	} `json:"listen"`
	Models []struct {
		Name      string `json:"name"`
		Tokenizer string `json:"tokenizer"`
	} `json:"models"`
	Discovery struct {
		Kubernetes struct {
			Namespace     string `json:"namespace"`
			LabelSelector string `json:"label_selector"`
			InferencePool string `json:"inference_pool"`
		} `json:"kubernetes"`
	} `json:"discovery"`
	Tenant struct {
		Trust string `json:"trust"`
	} `json:"tenant"`
	Peers struct {
		TokenFile string `json:"token_file"`
		DNS       string `json:"dns"`
	} `json:"peers"`
}

// view is what the checks look at: the objects, the Deployment's one
// container and the configuration it runs with.
type view struct {
	m        *manifests
	opt      options
	dep      *appsv1.Deployment
	pod      corev1.PodSpec
	c        corev1.Container
	labels   labels.Set       // the pod template's
	replicas int32            // the Deployment's
	ports    map[string]int32 // the container's, by name
	cm       *corev1.ConfigMap
	text     string // warmpath.yaml
	cfg      renderedConfig
	svc      *corev1.Service // the Service named like the Deployment, which Envoy dials
}

// report records one problem.
type report func(format string, args ...any)

// checks are the agreements every release must keep, in the order agree
// runs them.
var checks = []func(v *view, bad report){
	checkDeployment,
	checkRBAC,
	checkServices,
	checkVolumes,
	checkTLS,
	checkPeers,
	checkTokenizers,
	checkDisruptions,
	checkNetworkPolicy,
	checkServiceMonitor,
	checkDashboard,
}

// agree returns every disagreement between the rendered objects, and
// between them and warmpath.yaml.
func agree(m *manifests, opt options) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(m.dep) != 1 || len(m.dep[0].Spec.Template.Spec.Containers) != 1 {
		return []error{fmt.Errorf("want one Deployment with one container, got %d Deployments", len(m.dep))}
	}
	v := &view{m: m, opt: opt, dep: m.dep[0], replicas: 1, ports: map[string]int32{}}
	v.pod = v.dep.Spec.Template.Spec
	v.c = v.pod.Containers[0]
	v.labels = labels.Set(v.dep.Spec.Template.Labels)
	if v.dep.Spec.Replicas != nil {
		v.replicas = *v.dep.Spec.Replicas
	}
	for _, p := range v.c.Ports {
		v.ports[p.Name] = p.ContainerPort
	}
	for _, s := range m.svc {
		if s.Name == v.dep.Name {
			v.svc = s
		}
	}
	var err error
	if v.cm, v.text, err = configOf(m); err != nil {
		return []error{err}
	}
	if err := sigsyaml.Unmarshal([]byte(v.text), &v.cfg); err != nil {
		return []error{fmt.Errorf("warmpath.yaml: %w", err)}
	}
	for _, check := range checks {
		check(v, bad)
	}
	return errs
}

// checkDeployment: namespaces, the selector, the listen ports as named
// container ports, the probes, and the config checksum that rolls the pods.
func checkDeployment(v *view, bad report) {
	for _, o := range []metav1.Object{v.dep, v.cm} {
		if o.GetNamespace() != namespace {
			bad("%s in namespace %q, want the release's %q", o.GetName(), o.GetNamespace(), namespace)
		}
	}
	sel, err := metav1.LabelSelectorAsSelector(v.dep.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(v.labels) {
		bad("Deployment selector %v does not select its own template (%v)", v.dep.Spec.Selector, err)
	}
	if v.ports["extproc"] == 0 || v.ports["admin"] == 0 {
		bad("container ports %v, want extproc and admin", v.ports)
	}
	if got := portOf(v.cfg.Listen.ExtProc); got != strconv.Itoa(int(v.ports["extproc"])) {
		bad("listen.extproc %q, container port extproc %d", v.cfg.Listen.ExtProc, v.ports["extproc"])
	}
	if got := portOf(v.cfg.Listen.Admin); got != strconv.Itoa(int(v.ports["admin"])) {
		bad("listen.admin %q, container port admin %d", v.cfg.Listen.Admin, v.ports["admin"])
	}
	if pr := v.c.ReadinessProbe; pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != "/readyz" || pr.HTTPGet.Port.String() != "admin" {
		bad("readiness probe must GET /readyz on the admin port")
	}
	if pr := v.c.LivenessProbe; pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != "/healthz" || pr.HTTPGet.Port.String() != "admin" {
		bad("liveness probe must GET /healthz on the admin port")
	}
	sum := sha256.Sum256([]byte(strings.TrimSuffix(v.text, "\n")))
	if got := v.dep.Spec.Template.Annotations["checksum/config"]; got != hex.EncodeToString(sum[:]) {
		bad("pod annotation checksum/config %q is not the config's sha256: a changed config would not roll the pods", got)
	}
}

// checkRBAC: what discovery lists and watches, in the workers' namespace,
// bound to the pods' ServiceAccount; nothing more. And discovery does not
// select warmpath itself.
func checkRBAC(v *view, bad report) {
	k := v.cfg.Discovery.Kubernetes
	if k.Namespace == "" {
		bad("discovery.kubernetes.namespace is empty")
	}
	sa := v.pod.ServiceAccountName
	if len(v.m.sa) != 1 || v.m.sa[0].Name != sa || v.m.sa[0].Namespace != v.dep.Namespace {
		bad("want the ServiceAccount %q the pods run as, in %q", sa, v.dep.Namespace)
	}
	if len(v.m.role) != 1 || len(v.m.rb) != 1 {
		bad("want one Role and one RoleBinding, got %d and %d", len(v.m.role), len(v.m.rb))
	} else {
		role, rb := v.m.role[0], v.m.rb[0]
		if role.Namespace != k.Namespace || rb.Namespace != k.Namespace {
			bad("Role in %q, RoleBinding in %q, discovery.kubernetes.namespace %q", role.Namespace, rb.Namespace, k.Namespace)
		}
		need := [][2]string{{"", "pods"}}
		if k.InferencePool != "" {
			need = append(need, [2]string{"inference.networking.k8s.io", "inferencepools"})
		}
		for _, n := range need {
			var verbs []string
			for _, r := range role.Rules {
				if slices.Contains(r.APIGroups, n[0]) && slices.Contains(r.Resources, n[1]) {
					verbs = append(verbs, r.Verbs...)
				}
			}
			for _, verb := range []string{"get", "list", "watch"} {
				if !slices.Contains(verbs, verb) {
					bad("Role %s does not grant %s on %s, which discovery's informers need", role.Name, verb, n[1])
				}
			}
		}
		for _, r := range role.Rules {
			for _, verb := range r.Verbs {
				if verb != "get" && verb != "list" && verb != "watch" {
					bad("Role %s grants %q on %v: warmpath writes nothing", role.Name, verb, r.Resources)
				}
			}
		}
		if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name || rb.RoleRef.APIGroup != rbacv1.GroupName {
			bad("RoleBinding refers to %s %s, want Role %s", rb.RoleRef.Kind, rb.RoleRef.Name, role.Name)
		}
		if len(rb.Subjects) != 1 || rb.Subjects[0].Kind != rbacv1.ServiceAccountKind || rb.Subjects[0].Name != sa || rb.Subjects[0].Namespace != v.dep.Namespace {
			bad("RoleBinding subjects %+v, want the ServiceAccount %s/%s", rb.Subjects, v.dep.Namespace, sa)
		}
	}
	if k.LabelSelector == "" && k.InferencePool == "" {
		bad("discovery has neither a label selector nor an InferencePool")
	}
	if ws, err := labels.Parse(k.LabelSelector); err != nil {
		bad("discovery.kubernetes.label_selector %q: %v", k.LabelSelector, err)
	} else if k.LabelSelector != "" && ws.Matches(v.labels) {
		bad("discovery.kubernetes.label_selector %q matches warmpath's own pods", k.LabelSelector)
	}
}

// checkServices: every Service selects the pods and targets their named
// ports, the extproc port unchanged (headless A records are pod
// addresses); the main one has extproc and admin.
func checkServices(v *view, bad report) {
	for _, s := range v.m.svc {
		if s.Namespace != v.dep.Namespace {
			bad("Service %s in %q, Deployment in %q", s.Name, s.Namespace, v.dep.Namespace)
		}
		if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(v.labels) {
			bad("Service %s selector %v does not select warmpath's pods", s.Name, s.Spec.Selector)
		}
		for _, p := range s.Spec.Ports {
			cp, ok := v.ports[p.TargetPort.String()]
			if !ok {
				bad("Service %s port %s targets %s, not a named container port", s.Name, p.Name, p.TargetPort.String())
			}
			if p.Name == "extproc" && p.Port != cp {
				bad("Service %s port extproc %d, container port %d: want one port", s.Name, p.Port, cp)
			}
		}
	}
	if v.svc == nil {
		bad("no Service %s (the address Envoy's ext_proc cluster names)", v.dep.Name)
		return
	}
	names := map[string]bool{}
	for _, p := range v.svc.Spec.Ports {
		names[p.Name] = true
	}
	if !names["extproc"] || !names["admin"] {
		bad("Service %s ports %v, want extproc and admin", v.svc.Name, names)
	}
}

// checkVolumes: every mount has its volume and every volume a mount, all
// read-only; the Secrets are required and 0440 for the pod's group only.
func checkVolumes(v *view, bad report) {
	vols := map[string]bool{}
	for _, vol := range v.pod.Volumes {
		vols[vol.Name] = true
	}
	mounted := map[string]bool{}
	for _, vm := range v.c.VolumeMounts {
		mounted[vm.Name] = true
		if !vols[vm.Name] {
			bad("volumeMount %s names no volume", vm.Name)
		}
		if !vm.ReadOnly {
			bad("mount %s is writable: warmpath writes no files", vm.MountPath)
		}
	}
	var secrets bool
	for _, vol := range v.pod.Volumes {
		if !mounted[vol.Name] {
			bad("volume %s is not mounted", vol.Name)
		}
		if s := vol.Secret; s != nil {
			secrets = true
			if s.Optional != nil && *s.Optional {
				bad("volume %s: Secret %s must not be optional", vol.Name, s.SecretName)
			}
			if s.DefaultMode == nil || *s.DefaultMode&0o007 != 0 {
				bad("volume %s: defaultMode unset (0644) or readable by others, want 0440", vol.Name)
			}
		}
	}
	if sc := v.pod.SecurityContext; secrets && (sc == nil || sc.FSGroup == nil || sc.RunAsGroup == nil || *sc.FSGroup != *sc.RunAsGroup) {
		bad("fsGroup must be the container's group, which then reads the 0440 Secrets")
	}
}

// checkTLS: listen.tls names the keys of the Secret warmpath-tls.
func checkTLS(v *view, bad report) {
	if len(v.cfg.Listen.TLS) == 0 {
		return
	}
	for key, file := range map[string]string{"cert_file": "tls.crt", "key_file": "tls.key", "client_ca_file": "ca.crt"} {
		if err := secretFile(v.pod, v.cfg.Listen.TLS[key], tlsSecret, file); err != nil {
			bad("listen.tls.%s: %v", key, err)
		}
	}
}

// checkPeers: peers.token_file is key token of the Secret
// warmpath-peer-token, peers.dns the headless Service of the replicas at
// their extproc port.
func checkPeers(v *view, bad report) {
	p := v.cfg.Peers
	if p.TokenFile == "" && p.DNS == "" {
		if slices.ContainsFunc(v.pod.Volumes, func(vol corev1.Volume) bool { return vol.Secret != nil && vol.Secret.SecretName == peerSecret }) {
			bad("Secret %s mounted without peers in the config: the pods would wait for a Secret nothing reads", peerSecret)
		}
		return
	}
	if v.replicas < 2 {
		bad("peers configured for %d replica", v.replicas)
	}
	if err := secretFile(v.pod, p.TokenFile, peerSecret, "token"); err != nil {
		bad("peers.token_file: %v", err)
	}
	host, port, err := net.SplitHostPort(p.DNS)
	if err != nil {
		bad("peers.dns %q: %v", p.DNS, err)
		return
	}
	var svc *corev1.Service
	for _, s := range v.m.svc {
		if host == s.Name+"."+s.Namespace+".svc.cluster.local" {
			svc = s
		}
	}
	switch {
	case svc == nil:
		bad("peers.dns host %q is no rendered Service", host)
	case svc.Spec.ClusterIP != corev1.ClusterIPNone:
		bad("peers.dns Service %s is not headless: it would resolve to one virtual IP, not every replica", svc.Name)
	case port != strconv.Itoa(int(v.ports["extproc"])):
		bad("peers.dns port %s, container port extproc %d", port, v.ports["extproc"])
	}
}

// checkTokenizers: each models[].tokenizer is a tokenizer ConfigMap's
// mount, on a read-only PVC, or in the image.
func checkTokenizers(v *view, bad report) {
	for i, md := range v.cfg.Models {
		t := md.Tokenizer
		if t == "" {
			continue
		}
		if !path.IsAbs(t) {
			bad("models[%d].tokenizer %q: relative to the working directory, want an absolute path", i, t)
			continue
		}
		vol, vm, rel, ok := source(v.pod, t)
		switch {
		case !ok:
			if !slices.ContainsFunc(v.opt.imageDirs, func(d string) bool { return t == d || strings.HasPrefix(t, d+"/") }) {
				bad("models[%d].tokenizer %s is on no volume and not in the image", i, t)
			}
		case vol.PersistentVolumeClaim != nil:
			if !vm.ReadOnly || !vol.PersistentVolumeClaim.ReadOnly {
				bad("models[%d].tokenizer: PVC %s must be mounted read-only", i, vol.PersistentVolumeClaim.ClaimName)
			}
		case vol.ConfigMap != nil && vol.ConfigMap.Name != v.cm.Name:
			if rel != "" {
				bad("models[%d].tokenizer %s is a subdirectory of ConfigMap %s, whose keys are flat files", i, t, vol.ConfigMap.Name)
			}
		default:
			bad("models[%d].tokenizer %s is on volume %s, not a tokenizer ConfigMap or PVC", i, t, vol.Name)
		}
	}
}

// checkDisruptions: a budget that lets drains take one replica at a time,
// and the replicas spread over nodes.
func checkDisruptions(v *view, bad report) {
	for _, pdb := range v.m.pdb {
		s, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || s.Empty() || !s.Matches(v.labels) || pdb.Namespace != v.dep.Namespace {
			bad("PodDisruptionBudget %s/%s selector %v does not select the Deployment's pods (%v)", pdb.Namespace, pdb.Name, pdb.Spec.Selector, err)
		}
		switch mina, maxu := pdb.Spec.MinAvailable, pdb.Spec.MaxUnavailable; {
		case mina != nil && maxu != nil:
			bad("PodDisruptionBudget sets both minAvailable and maxUnavailable")
		case mina != nil && (mina.Type != 0 || mina.IntValue() < 1 || int32(mina.IntValue()) >= v.replicas):
			bad("PodDisruptionBudget minAvailable %s with %d replicas: want an integer from 1 to replicas-1, or it blocks every drain", mina, v.replicas)
		case maxu != nil && maxu.IntValue() < 1:
			bad("PodDisruptionBudget maxUnavailable %s blocks every drain", maxu)
		}
	}
	if v.replicas < 2 {
		return
	}
	if a := v.pod.Affinity; a != nil && a.PodAntiAffinity != nil {
		for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			s, err := metav1.LabelSelectorAsSelector(w.PodAffinityTerm.LabelSelector)
			if err == nil && !s.Empty() && s.Matches(v.labels) && w.PodAffinityTerm.TopologyKey == corev1.LabelHostname {
				return
			}
		}
	}
	bad("%d replicas without a preferred pod anti-affinity by hostname", v.replicas)
}

// checkNetworkPolicy: it admits ext_proc (the gateway, the other replicas)
// and admin, each from named sources only.
func checkNetworkPolicy(v *view, bad report) {
	for _, np := range v.m.np {
		s, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || s.Empty() || !s.Matches(v.labels) || np.Namespace != v.dep.Namespace {
			bad("NetworkPolicy %s does not select warmpath's pods (%v)", np.Name, err)
		}
		seen := map[string]bool{}
		var replicas bool
		for _, r := range np.Spec.Ingress {
			if len(r.From) == 0 {
				var ps []string
				for _, p := range r.Ports {
					ps = append(ps, p.Port.String())
				}
				bad("NetworkPolicy %s: the rule for ports %v admits every source", np.Name, ps)
			}
			for _, p := range r.Ports {
				if p.Port == nil || v.ports[p.Port.String()] == 0 {
					bad("NetworkPolicy %s admits port %v, not a named container port", np.Name, p.Port)
					continue
				}
				seen[p.Port.String()] = true
				if p.Port.String() != "extproc" {
					continue
				}
				for _, f := range r.From {
					if f.NamespaceSelector != nil || f.PodSelector == nil {
						continue
					}
					if s, err := metav1.LabelSelectorAsSelector(f.PodSelector); err == nil && !s.Empty() && s.Matches(v.labels) {
						replicas = true
					}
				}
			}
		}
		if !seen["extproc"] || !seen["admin"] {
			bad("NetworkPolicy %s admits %v, want extproc and admin", np.Name, slices.Sorted(maps.Keys(seen)))
		}
		if v.cfg.Peers.TokenFile != "" && !replicas {
			bad("NetworkPolicy %s does not admit the other replicas to ext_proc (peers)", np.Name)
		}
	}
}

// checkServiceMonitor: it scrapes /metrics on the admin port of the main
// Service alone.
func checkServiceMonitor(v *view, bad report) {
	for _, sm := range v.m.sm {
		s, err := metav1.LabelSelectorAsSelector(&sm.spec.Selector)
		if err != nil {
			bad("ServiceMonitor selector: %v", err)
			continue
		}
		ns := sm.spec.NamespaceSelector
		var selected []*corev1.Service
		for _, svc := range v.m.svc {
			inNS := ns.Any || slices.Contains(ns.MatchNames, svc.Namespace) || (len(ns.MatchNames) == 0 && svc.Namespace == sm.obj.GetNamespace())
			if inNS && s.Matches(labels.Set(svc.Labels)) {
				selected = append(selected, svc)
			}
		}
		if len(selected) != 1 || selected[0] != v.svc {
			bad("ServiceMonitor %s selects %d Services, want the Service %s alone", sm.obj.GetName(), len(selected), v.dep.Name)
			continue
		}
		for _, ep := range sm.spec.Endpoints {
			if !slices.ContainsFunc(v.svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port && p.TargetPort.String() == "admin" }) {
				bad("ServiceMonitor endpoint port %q is not the Service's admin port", ep.Port)
			}
			if ep.Path != "/metrics" {
				bad("ServiceMonitor endpoint path %q, want /metrics", ep.Path)
			}
		}
	}
}

// checkDashboard: a dashboard ConfigMap holds deploy/grafana's dashboard.
func checkDashboard(v *view, bad report) {
	for _, d := range v.m.cm {
		text, ok := d.Data[dashboardFile]
		if !ok {
			continue
		}
		want, err := os.ReadFile(dashboardOrig)
		if err != nil {
			bad("%v", err)
		} else if text != string(want) {
			bad("ConfigMap %s: %s differs from %s", d.Name, dashboardFile, dashboardOrig)
		}
	}
}

// secretFile checks that p is key of Secret secret, mounted read-only
// without subPath (so that kubelet updates it).
func secretFile(pod corev1.PodSpec, p, secret, key string) error {
	vol, vm, rel, ok := source(pod, p)
	switch {
	case !ok || vol.Secret == nil || vol.Secret.SecretName != secret:
		return fmt.Errorf("%s is not on a volume of Secret %s", p, secret)
	case keyOf(vol.Secret.Items, rel) != key:
		return fmt.Errorf("%s is key %q of Secret %s, want %q", p, keyOf(vol.Secret.Items, rel), secret, key)
	case !vm.ReadOnly || vm.SubPath != "":
		return fmt.Errorf("mount %s of Secret %s: want read-only, without subPath", vm.MountPath, secret)
	}
	return nil
}

func portOf(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return port
}
