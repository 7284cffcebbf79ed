package deploy_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/internal/app"
)

// The ConfigMap's warmpath.yaml must load with warmpath's own strict
// loader (unknown keys, bad durations and invalid values are errors), not
// only decode as generic YAML. Its peers validation reads the token file,
// which in the cluster is the mounted Secret: here it is a temporary file.
func TestConfigMapLoadsStrictly(t *testing.T) {
	t.Parallel()
	m := load(t)
	if len(m.cm) != 1 {
		t.Fatalf("%d ConfigMaps, want 1", len(m.cm))
	}
	text, ok := m.cm[0].Data["warmpath.yaml"]
	if !ok {
		t.Fatal("ConfigMap has no warmpath.yaml")
	}
	mount := "token_file: " + peerTokenPath(t, m.dep[0].Spec.Template)
	if strings.Count(text, mount) != 1 {
		t.Fatalf("warmpath.yaml has no %q: peers.token_file must be the Secret's mount", mount)
	}
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := app.ParseConfig([]byte(strings.Replace(text, mount, "token_file: "+tok, 1)))
	if err != nil {
		t.Fatalf("warmpath rejects the ConfigMap's config: %v", err)
	}
	if k := cfg.Discovery.Kubernetes; k.Namespace == "" || k.Defaults.HTTPPort == 0 {
		t.Errorf("kubernetes discovery not configured: %+v", k)
	}
	if p := cfg.Peers; !p.Enabled() || p.TokenFile != tok || p.DNS == "" {
		t.Errorf("peers: %+v, want sharing on through dns with the token at %s", p, tok)
	}
	if len(cfg.Workers) != 0 {
		t.Errorf("static workers %v next to Kubernetes discovery", cfg.Workers)
	}
}

// examples/warmpath.yaml says it spells out every default: the sections it
// documents must load to exactly DefaultConfig's values.
func TestExampleConfigSpellsOutDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := app.LoadConfig("../examples/warmpath.yaml")
	if err != nil {
		t.Fatal(err)
	}
	def := app.DefaultConfig()
	// YAML's [] decodes to an empty slice where the default is nil.
	for _, s := range []*[]string{&cfg.Tenant.Metadata.Path, &cfg.Tenant.Allow} {
		if len(*s) == 0 {
			*s = nil
		}
	}
	tests := []struct {
		name      string
		got, want any
	}{
		{"listen", cfg.Listen, def.Listen},
		{"policy", cfg.Policy, def.Policy},
		{"extproc", cfg.ExtProc, def.ExtProc},
		{"discovery", cfg.Discovery, def.Discovery},
		{"kvindex", cfg.KVIndex, def.KVIndex},
		{"scoring", cfg.Scoring, def.Scoring},
		{"log", cfg.Log, def.Log},
		{"telemetry", cfg.Telemetry, def.Telemetry},
		{"tenant", cfg.Tenant, def.Tenant},
	}
	for _, tc := range tests {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v (the default)", tc.name, tc.got, tc.want)
		}
	}
}
