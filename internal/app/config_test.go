package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const exampleConfig = `
listen: {extproc: ":9002", admin: ":9090"}
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
	if min.Models[0].BlockSize != defaultBlockSize || min.Listen.ExtProc != ":9002" || min.Policy != "warmpath" {
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
		{"numeric duration", "extproc: {drain_timeout: 30}\n", "missing unit in duration"},
		{"bad block size", "models: [{name: m, block_size: -16}]\n", "block_size: must be positive"},
		{"bad header", "extproc: {destination_header: X-Dest}\n", "lower-case header name"},
		{"bad log level", "log: {level: loud}\n", "log.level"},
		{"not yaml", "workers: [\n", "decode"},
		{"several problems joined", "policy: x\nlog: {format: xml}\n", "log.format"},
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
