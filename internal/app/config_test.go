package app

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

const exampleConfig = `
listen: {extproc: "127.0.0.1:9002", admin: ":9090"}
policy: round-robin
models:
  - name: qwen3
    tokenizer: ../../tokenize/testdata/models/qwen3
    block_size: 16
workers:
  - name: w0
    address: 127.0.0.1:8000
    models: [qwen3]
    kv_events: tcp://127.0.0.1:5557
    kv_replay: tcp://127.0.0.1:5558
    data_parallel_size: 1
extproc:
  assignment_ttl: 5m
`

func TestParseConfigDefaultsAndValues(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig([]byte(exampleConfig))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policy != "round-robin" || cfg.Models[0].BlockSize != 16 || cfg.Workers[0].KVReplay != "tcp://127.0.0.1:5558" {
		t.Fatalf("decoded %+v", cfg)
	}
	if time.Duration(cfg.ExtProc.AssignmentTTL) != 5*time.Minute || cfg.ExtProc.DestinationHeader != "x-gateway-destination-endpoint" ||
		cfg.ExtProc.MaxBodyBytes != 16<<20 || cfg.Log.Level != "info" {
		t.Fatalf("defaults not applied: %+v", cfg.ExtProc)
	}
	min, err := ParseConfig([]byte("models: [{name: m}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if min.Models[0].BlockSize != defaultBlockSize || min.Listen.ExtProc != "127.0.0.1:9002" || min.Policy != "warmpath" {
		t.Fatalf("defaults: %+v", min)
	}
}

func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, yaml, want string }{
		{"unknown key names key and line", "policy: random\nworkers:\n  - name: w0\n    adress: 1.2.3.4:80\n", "line 4: field adress not found"},
		{"unknown top-level", "polcy: random\n", "line 1: field polcy not found"},
		{"bad policy", "policy: fastest\n", `policy: "fastest" is not one of`},
		{"bad address", "workers: [{name: w, address: nope, models: [m]}]\n", "workers[0].address"},
		{"duplicate worker", "workers: [{name: w, address: 'a:1', models: [m]}, {name: w, address: 'b:1', models: [m]}]\n", `"w" listed twice`},
		{"worker model not listed", "models: [{name: a}]\nworkers: [{name: w, address: 'a:1', models: [b]}]\n", `"b" is not in models`},
		{"no models on worker", "workers: [{name: w, address: 'a:1'}]\n", "at least one served model"},
		{"bad endpoint", "workers: [{name: w, address: 'a:1', models: [m], kv_events: '127.0.0.1:5557'}]\n", "kv_events: want tcp://"},
		{"replay without events", "workers: [{name: w, address: 'a:1', models: [m], kv_replay: 'tcp://a:2'}]\n", "kv_replay: set without kv_events"},
		{"bad duration", "extproc: {assignment_ttl: forever}\n", "line 1"},
		{"numeric duration", "extproc: {drain_timeout: 30}\n", `line 1: cannot unmarshal !!int ` + "`30`" + ` into time.Duration (write durations like "30s" or "5m")`},
		{"bad block size", "models: [{name: m, block_size: -16}]\n", "block_size: must be positive"},
		{"bad header", "extproc: {destination_header: X-Dest}\n", "lower-case header name"},
		{"bad log level", "log: {level: loud}\n", "log.level"},
		{"not yaml", "workers: [\n", "decode"},
		{"several problems joined", "policy: x\nlog: {format: xml}\n", "log.format"},
		{"plaintext ext_proc on a reachable address", "listen: {extproc: ':9002'}\n", "reachable from other hosts without TLS"},
		{"half a TLS configuration", "listen: {tls: {cert_file: a.pem}}\n", "listen.tls: cert_file, key_file and client_ca_file are needed together"},
		{"bad debug endpoints", "debug: {endpoints: yes}\n", `debug.endpoints: "yes" is not one of`},
		{"debug endpoints on a reachable port without a token", "listen: {admin: ':9090'}\ndebug: {endpoints: 'on'}\n", "need token_file"},
		{"pprof on a reachable port without a token", "listen: {admin: '0.0.0.0:9090'}\ndebug: {pprof: true}\n", "need token_file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseConfig([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want error containing %q, got %v", tc.want, err)
			}
		})
	}
}

func TestExampleConfigsInRepoAreValid(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("../../examples/*.yaml")
	for _, f := range files {
		if _, err := LoadConfig(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add(exampleConfig)
	f.Add("workers: [{name: w, address: 'a:1', models: [m]}]\n")
	f.Add("extproc: {assignment_ttl: 1s, drain_timeout: 2m}\n")
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := ParseConfig([]byte(s))
		if err == nil {
			if verr := cfg.Validate(); verr != nil {
				t.Fatalf("accepted a config that does not validate: %v", verr)
			}
		}
	})
}

func TestConfigValidateCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	abs, _ := filepath.Abs("../../tokenize/testdata/models/qwen3")
	os.WriteFile(good, []byte(strings.Replace(exampleConfig, "../../tokenize/testdata/models/qwen3", abs, 1)), 0o644)
	os.WriteFile(bad, []byte("policy: nope\nworkerz: []\n"), 0o644)
	var out, errOut strings.Builder
	if err := run(t.Context(), []string{"config", "validate", good}, nil, &out, &errOut); err != nil || out.String() != "ok\n" {
		t.Fatalf("good: err %v out %q", err, out.String())
	}
	out.Reset()
	if err := run(t.Context(), []string{"config", "validate", bad}, nil, &out, &errOut); err == nil || !strings.Contains(out.String(), "workerz") {
		t.Fatalf("bad: err %v out %q", err, out.String())
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	var out, errOut strings.Builder
	if err := run(t.Context(), []string{"--help"}, nil, &out, &errOut); err != nil || !strings.Contains(out.String(), "warmpath serve --config FILE") {
		t.Fatalf("help: %v %q", err, out.String())
	}
	out.Reset()
	errOut.Reset()
	if err := run(t.Context(), []string{"serve", "--help"}, nil, &out, &errOut); err != nil || !strings.Contains(errOut.String(), "drain_timeout") {
		t.Fatalf("serve --help: %v %q", err, errOut.String())
	}
	if err := run(t.Context(), []string{"frobnicate"}, nil, &out, &errOut); !IsUsage(err) {
		t.Fatalf("unknown command: %v", err)
	}
}

// TestSectionsComposePackageConfigs: each section decodes into the config
// of the package that owns it, inline sections included, and the whole
// default configuration written out as YAML reads back unchanged, so no
// key is owned twice or lost between a package and the app.
func TestSectionsComposePackageConfigs(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig([]byte(`
kvindex: {entry_budget: 10, stale_after: 1m, speculative_ttl: 1s, topic: kv, replay_timeout: 3s}
extproc: {body_mode: buffered, max_recv_msg_bytes: 2097152, drain_timeout: 2s, metadata_namespace: "-"}
discovery: {scrape: {interval: 2s, max_age: 5s, concurrency: 4}, health: {active_interval: -1s}}
telemetry: {capture_prompts: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	k, e, d := cfg.KVIndex, cfg.ExtProc, cfg.Discovery
	if k.Index.EntryBudget != 10 || k.Index.StaleAfter != time.Minute || k.Index.SpeculativeTTL != time.Second ||
		k.Events.Topic != "kv" || k.Events.ReplayTimeout != 3*time.Second {
		t.Errorf("kvindex section: %+v", k)
	}
	if e.BodyMode != "buffered" || e.MaxRecvMsgBytes != 2<<20 || e.DrainTimeout != 2*time.Second || e.MetadataNamespace != "-" ||
		e.MaxBodyBytes != 16<<20 {
		t.Errorf("extproc section: %+v", e)
	}
	if d.Scrape.Interval != 2*time.Second || d.Scrape.MaxAge != 5*time.Second || d.Scrape.Concurrency != 4 ||
		d.Health.ActiveInterval != -time.Second || d.Health.FailureThreshold != 3 {
		t.Errorf("discovery section: %+v", d)
	}
	if !cfg.Telemetry.CapturePrompts {
		t.Error("telemetry.capture_prompts not read")
	}
	for _, bad := range []string{"kvindex: {topc: x}\n", "scoring: {block_sizes: {m: 16}}\n", "scoring: {load_max_age: 5s}\n"} {
		if _, err := ParseConfig([]byte(bad)); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("%q: want an unknown-key error, got %v", bad, err)
		}
	}

	def := DefaultConfig()
	b, err := yaml.Marshal(def)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseConfig(b)
	if err != nil {
		t.Fatalf("the defaults written out do not parse: %v\n%s", err, b)
	}
	if !reflect.DeepEqual(normalised(back), normalised(def)) {
		t.Errorf("defaults changed through YAML:\n%s", b)
	}
}

// normalised clears what a YAML round trip may legitimately change: nil
// and empty slices and maps.
func normalised(c Config) Config {
	c.Tenant.Allow, c.Tenant.Metadata.Path = nil, nil
	c.Scoring.Shadow, c.Scoring.Budgets, c.Scoring.KVBlocks, c.Scoring.SLOs = nil, nil, nil, nil
	c.Discovery.Kubernetes.Defaults.Models = nil
	c.Models, c.Workers = nil, nil
	c.Peers.Static = nil
	return c
}
