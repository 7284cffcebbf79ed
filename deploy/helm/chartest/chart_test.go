package chartest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	corev1 "k8s.io/api/core/v1"
)

// The deploy/ set of objects, and what the releases add to it.
var baseKinds = map[string]int{"ServiceAccount": 1, "Role": 1, "RoleBinding": 1, "ConfigMap": 1, "Deployment": 1, "Service": 1, "PodDisruptionBudget": 1, "NetworkPolicy": 1}

func kindsWith(changes map[string]int) map[string]int {
	out := maps.Clone(baseKinds)
	for k, n := range changes {
		if n == 0 {
			delete(out, k)
		} else {
			out[k] = n
		}
	}
	return out
}

// cases are the values files of testdata/ that must render a working
// release.
var cases = []struct {
	name  string
	file  string // under testdata/
	opt   options
	kinds map[string]int
	peers bool
	check func(t *testing.T, m *manifests, cfg renderedConfig)
}{
	{
		name: "defaults", file: "defaults.yaml", kinds: baseKinds, peers: true,
		check: func(t *testing.T, m *manifests, cfg renderedConfig) {
			// The names deploy/README.md tells the reader about.
			want := map[string]string{"Deployment": "warmpath", "Service": "warmpath", "ConfigMap": "warmpath-config", "Role": "warmpath-discovery", "ServiceAccount": "warmpath"}
			got := map[string]string{"Deployment": m.dep[0].Name, "Service": m.svc[0].Name, "ConfigMap": m.cm[0].Name, "Role": m.role[0].Name, "ServiceAccount": m.sa[0].Name}
			if !maps.Equal(got, want) {
				t.Errorf("names %v, want deploy/'s %v", got, want)
			}
			if *m.dep[0].Spec.Replicas != 2 || len(cfg.Listen.TLS) != 3 || cfg.Peers.DNS != "warmpath.llm.svc.cluster.local:9002" {
				t.Errorf("replicas %d, listen.tls %v, peers.dns %q: want deploy/'s 2, mutual TLS, warmpath.llm.svc.cluster.local:9002",
					*m.dep[0].Spec.Replicas, cfg.Listen.TLS, cfg.Peers.DNS)
			}
			if len(m.role[0].Rules) != 1 {
				t.Errorf("pods mode: Role rules %v, want pods alone", m.role[0].Rules)
			}
		},
	},
	{
		name: "inference pool in another namespace", file: "inferencepool.yaml", kinds: baseKinds, peers: true,
		check: func(t *testing.T, m *manifests, cfg renderedConfig) {
			if k := cfg.Discovery.Kubernetes; k.InferencePool != "qwen3-pool" || k.Namespace != "vllm" || k.LabelSelector != "" {
				t.Errorf("discovery.kubernetes %+v, want the InferencePool qwen3-pool in vllm, no label selector", k)
			}
		},
	},
	{
		name: "one replica without peers", file: "single-replica.yaml", kinds: kindsWith(map[string]int{"PodDisruptionBudget": 0}), peers: false,
		check: func(t *testing.T, m *manifests, _ renderedConfig) {
			for _, v := range m.dep[0].Spec.Template.Spec.Volumes {
				if v.Secret != nil && v.Secret.SecretName == peerSecret {
					t.Errorf("one replica mounts %s", peerSecret)
				}
			}
		},
	},
	{
		name: "ServiceMonitor and dashboard", file: "monitoring.yaml", kinds: kindsWith(map[string]int{"ServiceMonitor": 1, "ConfigMap": 2}), peers: true,
		check: func(t *testing.T, m *manifests, _ renderedConfig) {
			if l := m.sm[0].obj.GetLabels()["release"]; l != "kube-prometheus-stack" {
				t.Errorf("ServiceMonitor label release %q, want the values' kube-prometheus-stack", l)
			}
			var dash *corev1.ConfigMap
			for _, c := range m.cm {
				if _, ok := c.Data[dashboardFile]; ok {
					dash = c
				}
			}
			if dash == nil || dash.Namespace != "monitoring" || dash.Labels["grafana_dashboard"] != "1" {
				t.Fatalf("dashboard ConfigMap %v: want one in monitoring with label grafana_dashboard", dash)
			}
			if !json.Valid([]byte(dash.Data[dashboardFile])) {
				t.Error("the dashboard is not JSON")
			}
		},
	},
	{
		name: "tokenizers from a PVC", file: "tokenizers-pvc.yaml", kinds: baseKinds, peers: true,
		check: func(t *testing.T, m *manifests, cfg renderedConfig) {
			if tk := cfg.Models[0].Tokenizer; tk != "/var/lib/warmpath/tokenizers/qwen3" {
				t.Errorf("models[0].tokenizer %q", tk)
			}
		},
	},
	{
		name: "tokenizers from ConfigMaps", file: "tokenizers-configmap.yaml", kinds: baseKinds, peers: true,
		check: func(t *testing.T, m *manifests, cfg renderedConfig) {
			if len(cfg.Models) != 2 || cfg.Models[1].Tokenizer != "/var/lib/warmpath/tokenizers/llama3" {
				t.Errorf("models %+v", cfg.Models)
			}
		},
	},
	{
		name: "tokenizers in the image", file: "tokenizers-image.yaml", opt: options{imageDirs: []string{"/usr/share/warmpath/tokenizers"}}, kinds: baseKinds, peers: true,
		check: func(t *testing.T, m *manifests, cfg renderedConfig) {
			if img := m.dep[0].Spec.Template.Spec.Containers[0].Image; img != "registry.example.com/warmpath-with-tokenizers:1.0" {
				t.Errorf("image %q", img)
			}
		},
	},
	{
		name: "ClusterIP Service, peers Service, tenants, OTel", file: "clusterip-tenant-otel.yaml", kinds: kindsWith(map[string]int{"Service": 2}), peers: true,
		check: func(t *testing.T, m *manifests, cfg renderedConfig) {
			if cfg.Tenant.Trust != "jwt" {
				t.Errorf("tenant.trust %q, want jwt", cfg.Tenant.Trust)
			}
			if cfg.Peers.DNS != "warmpath-peers.llm.svc.cluster.local:9002" {
				t.Errorf("peers.dns %q, want the peers Service", cfg.Peers.DNS)
			}
			e := env(m.dep[0].Spec.Template.Spec.Containers[0])
			for name, want := range map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.monitoring:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "warmpath"} {
				if e[name].Value != want {
					t.Errorf("env %s=%q, want %q", name, e[name].Value, want)
				}
			}
			if h := e["OTEL_EXPORTER_OTLP_HEADERS"].ValueFrom; h == nil || h.SecretKeyRef == nil || h.SecretKeyRef.Name != "otel-headers" {
				t.Errorf("OTEL_EXPORTER_OTLP_HEADERS %+v, want from Secret otel-headers", e["OTEL_EXPORTER_OTLP_HEADERS"])
			}
		},
	},
}

func TestLint(t *testing.T) {
	t.Parallel()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := lint.RunAll(chartDir, readValues(t, filepath.Join("testdata", tc.file)), namespace)
			for _, msg := range res.Messages {
				if msg.Severity >= support.WarningSev {
					t.Error(msg)
				} else {
					t.Log(msg)
				}
			}
		})
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	ch := loadChart(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, errs := problems(t, ch, readValues(t, filepath.Join("testdata", tc.file)), tc.opt)
			for _, err := range errs {
				t.Error(err)
			}
			if m == nil || t.Failed() {
				return
			}
			if !maps.Equal(m.kinds, tc.kinds) {
				t.Errorf("rendered %v, want %v", m.kinds, tc.kinds)
			}
			cfg := warmpathConfig(t, m)
			if on := cfg.Peers.TokenFile != ""; on != tc.peers {
				t.Errorf("peers on: %v, want %v", on, tc.peers)
			}
			if !strings.Contains(m.notes, "kubectl -n llm create secret generic "+tlsSecret) || strings.Contains(m.notes, peerSecret) != tc.peers {
				t.Errorf("NOTES.txt does not tell which Secrets to create:\n%s", m.notes)
			}
			if tc.check != nil {
				tc.check(t, m, cfg)
			}
		})
	}
}

// badValues are the values files of testdata/bad/, each with what must
// catch it.
var badValues = map[string]string{
	"tokenizer-without-source.yaml":  `models[0].tokenizer "qwen3" needs tokenizers.source`,
	"tokenizer-not-a-configmap.yaml": `is not the dir of one of tokenizers.configMaps`,
	"unknown-config-key.yaml":        `field drain_dealy not found`,
	"plaintext.yaml":                 `reachable from other hosts without TLS`,
	"listen-port.yaml":               `listen.extproc ":9100", container port extproc 9002`,
	"selector-matches-self.yaml":     `matches warmpath's own pods`,
	"pdb-blocks-drains.yaml":         `or it blocks every drain`,
	"admin-open.yaml":                `admits every source`,
	"peer-token-elsewhere.yaml":      `peers.token_file: /etc/warmpath/peer-token is not on a volume of Secret warmpath-peer-token`,
	"replicas-zero.yaml":             `at '/replicas': minimum: got 0, want 1`,
	"misspelt-value.yaml":            `additional properties 'replica' not allowed`,
	"bad-pool-mode.yaml":             `discovery.mode inferencePool needs discovery.inferencePool`,
}

func TestBadValuesAreCaught(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = filepath.Base(f)
	}
	if want := slices.Sorted(maps.Keys(badValues)); !slices.Equal(names, want) {
		t.Fatalf("testdata/bad holds %v, the table %v", names, want)
	}
	ch := loadChart(t)
	for name, want := range badValues {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, errs := problems(t, ch, readValues(t, filepath.Join("testdata", "bad", name)), options{})
			err := errors.Join(errs...)
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("got %v\nwant an error containing %q", err, want)
			}
		})
	}
}

// Breaking an object that the chart renders right must be caught: the
// checks are not vacuous.
func TestBrokenObjectsAreCaught(t *testing.T) {
	t.Parallel()
	ch := loadChart(t)
	rendered, err := render(t.Context(), ch, readValues(t, "testdata/monitoring.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mutate func(m *manifests)
		want   string
	}{
		{"service selects other pods", func(m *manifests) { m.svc[0].Spec.Selector = map[string]string{"app": "other"} }, "does not select warmpath's pods"},
		{"service targets a missing port", func(m *manifests) { m.svc[0].Spec.Ports[1].TargetPort.StrVal = "metrics" }, "not a named container port"},
		{"role cannot watch", func(m *manifests) { m.role[0].Rules[0].Verbs = []string{"get", "list"} }, "does not grant watch on pods"},
		{"role writes", func(m *manifests) { m.role[0].Rules[0].Verbs = append(m.role[0].Rules[0].Verbs, "delete") }, `grants "delete"`},
		{"binding to another account", func(m *manifests) { m.rb[0].Subjects[0].Name = "default" }, "RoleBinding subjects"},
		{"pdb selects nothing", func(m *manifests) { m.pdb[0].Spec.Selector.MatchLabels = map[string]string{"app": "other"} }, "does not select the Deployment's pods"},
		{"network policy without admin", func(m *manifests) { m.np[0].Spec.Ingress = m.np[0].Spec.Ingress[:1] }, "want extproc and admin"},
		{"network policy without the replicas", func(m *manifests) { m.np[0].Spec.Ingress[0].From = m.np[0].Spec.Ingress[0].From[1:] }, "does not admit the other replicas"},
		{"tls from another Secret", func(m *manifests) {
			for i, v := range m.dep[0].Spec.Template.Spec.Volumes {
				if v.Secret != nil && v.Secret.SecretName == tlsSecret {
					m.dep[0].Spec.Template.Spec.Volumes[i].Secret.SecretName = "other-tls"
				}
			}
		}, "is not on a volume of Secret warmpath-tls"},
		{"peer token world-readable", func(m *manifests) {
			for i, v := range m.dep[0].Spec.Template.Spec.Volumes {
				if v.Secret != nil && v.Secret.SecretName == peerSecret {
					mode := int32(0o444)
					m.dep[0].Spec.Template.Spec.Volumes[i].Secret.DefaultMode = &mode
				}
			}
		}, "readable by others"},
		{"service not headless", func(m *manifests) { m.svc[0].Spec.ClusterIP = "" }, "is not headless"},
		{"servicemonitor on another port", func(m *manifests) { m.sm[0].spec.Endpoints[0].Port = "extproc" }, "is not the Service's admin port"},
		{"dashboard edited", func(m *manifests) {
			for _, c := range m.cm {
				if _, ok := c.Data[dashboardFile]; ok {
					c.Data[dashboardFile] += " "
				}
			}
		}, "differs from"},
		{"config changed without a roll", func(m *manifests) {
			for _, c := range m.cm {
				if _, ok := c.Data["warmpath.yaml"]; ok {
					c.Data["warmpath.yaml"] += "log: {level: debug}\n"
				}
			}
		}, "checksum/config"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := decode(rendered)
			if err != nil {
				t.Fatal(err)
			}
			if errs := agree(m, options{}); len(errs) != 0 {
				t.Fatalf("unbroken: %v", errors.Join(errs...))
			}
			tc.mutate(m)
			err = errors.Join(agree(m, options{})...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
}

// A misspelt field in a template is an error of the strict decoder, as it
// would be of kubectl apply --validate=strict.
func TestStrictDecode(t *testing.T) {
	t.Parallel()
	docs := map[string]string{
		"unknown field": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {clusterIp: None}\n",
		"duplicate key": "apiVersion: v1\nkind: Service\nmetadata: {name: x, name: y}\n",
		"ServiceMonitor unknown field": "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x, namespace: llm}\n" +
			"spec: {selector: {matchLabels: {a: b}}, endpoints: [{port: admin, intervall: 15s}]}\n",
		"ServiceMonitor without endpoints": "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x, namespace: llm}\n" +
			"spec: {selector: {matchLabels: {a: b}}}\n",
		"unknown kind": "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: x}\n",
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, err := decode(map[string]string{"warmpath/templates/x.yaml": doc}); err == nil {
				t.Errorf("%q decoded", doc)
			}
		})
	}
}

// Charts may not hold symlinks: the dashboard is a copy, which must stay
// deploy/grafana's file.
func TestDashboardCopyIsCurrent(t *testing.T) {
	t.Parallel()
	orig, err := os.ReadFile(dashboardOrig)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := os.ReadFile(dashboardCopy)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(orig, cp) {
		t.Errorf("%s differs from %s: cp %[2]s %[1]s", dashboardCopy, dashboardOrig)
	}
}

// opaqueValues are values whose keys are warmpath's or Kubernetes' own;
// README.md documents the value, not each key below it.
var opaqueValues = []string{
	"scoring", "tenant", "config", "models", "discovery.defaults", "peers.config", "resources", "podSecurityContext",
	"securityContext", "networkPolicy.extprocFrom", "networkPolicy.adminFrom", "serviceMonitor.labels",
	"grafanaDashboard.labels", "grafanaDashboard.annotations", "service.annotations", "serviceAccount.annotations",
	"tokenizers.configMaps",
}

// Every value of values.yaml is in the chart README's table.
func TestReadmeListsEveryValue(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(chartDir + "/README.md")
	if err != nil {
		t.Fatal(err)
	}
	vals := readValues(t, chartDir+"/values.yaml")
	var walk func(prefix string, v map[string]any)
	walk = func(prefix string, v map[string]any) {
		for k, x := range v {
			key := prefix + k
			sub, isMap := x.(map[string]any)
			if isMap && len(sub) > 0 && !slices.Contains(opaqueValues, key) {
				walk(key+".", sub)
				continue
			}
			if !bytes.Contains(readme, []byte("| `"+key+"` |")) {
				t.Errorf("README.md has no row for `%s`", key)
			}
		}
	}
	walk("", vals)
}
