package app

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/kvevents"
	"github.com/warmpath/warmpath/kvindex"
	"github.com/warmpath/warmpath/scoring"
)

// Config is warmpath's whole configuration, read from one YAML file.
// Every field has a documented default applied by DefaultConfig; a file only
// needs to say what differs. Unknown keys are an error.
type Config struct {
	// Listen holds the server addresses.
	Listen ListenConfig `yaml:"listen"`
	// Policy names the routing policy: warmpath (default), random,
	// round-robin, least-request, prefix-max, affinity or dynamo-cost.
	Policy string `yaml:"policy"`
	// Models lists the served model names warmpath routes for.
	Models []ModelConfig `yaml:"models"`
	// Workers lists the vLLM servers when discovery is static.
	Workers []WorkerConfig `yaml:"workers"`
	// ExtProc tunes the Envoy-facing protocol handling.
	ExtProc ExtProcConfig `yaml:"extproc"`
	// Discovery says where the worker set comes from (the workers list,
	// reloaded on change, or Kubernetes), and tunes metrics scraping and
	// health checking.
	Discovery DiscoveryConfig `yaml:"discovery"`
	// KVIndex tunes the KV-cache index and its event subscribers.
	KVIndex KVIndexConfig `yaml:"kvindex"`
	// Scoring tunes the TTFT model, calibration and baselines (see
	// scoring.Config for every key and its default). Block sizes come from
	// models[].block_size.
	Scoring scoring.Config `yaml:"scoring"`
	// Log sets the log level and format.
	Log LogConfig `yaml:"log"`
	// Telemetry tunes tracing; exporters come from the OTEL_* variables.
	Telemetry TelemetryConfig `yaml:"telemetry"`
	// Tenant says where a request's tenant identity comes from.
	Tenant TenantConfig `yaml:"tenant"`

	path string // the file it was loaded from, for reloads
}

// TelemetryConfig tunes tracing. Whether and where spans are exported is
// set by the standard OTEL_* environment variables (OTEL_TRACES_EXPORTER
// otlp or console; unset means off).
type TelemetryConfig struct {
	// CapturePrompts puts the request's messages or prompt on the GenAI span
	// (gen_ai.input.messages). Prompts are user data. Default false.
	CapturePrompts bool `yaml:"capture_prompts"`
}

// TenantConfig selects the single trusted source of tenant identity.
type TenantConfig struct {
	// Trust is "" (default: no tenants), "attribute" (an Envoy request
	// attribute such as the mTLS peer's URI SAN), "jwt" (a claim verified by
	// Envoy's jwt_authn and forwarded as metadata) or "header" (a request
	// header, believed blindly: WARNING, only safe when a proxy in front of
	// Envoy always sets or strips it).
	Trust string `yaml:"trust"`
	// Attribute is the request_attributes expression, exactly as listed in
	// the ext_proc filter (trust: attribute), e.g.
	// connection.uri_san_peer_certificate.
	Attribute string `yaml:"attribute"`
	// Metadata locates the claim (trust: jwt): namespace default
	// envoy.filters.http.jwt_authn, path e.g. [jwt_payload, tenant] for
	// payload_in_metadata: jwt_payload.
	Metadata TenantMetadata `yaml:"metadata"`
	// TrimPrefix is removed from the value; values without it are rejected.
	TrimPrefix string `yaml:"trim_prefix"`
	// Header is the tenant header (required for trust: header). Under every
	// trust warmpath removes it from the upstream request; under attribute and
	// jwt a client-set copy is ignored and counted.
	Header string `yaml:"header"`
	// Labels adds a tenant label to the GenAI request metrics. Default false.
	Labels bool `yaml:"labels"`
	// Allow lists the tenants that get their own label value; all others are
	// "other", requests without a tenant "none".
	Allow []string `yaml:"allow"`
}

// TenantMetadata is a path into forwarded dynamic metadata.
type TenantMetadata struct {
	Namespace string   `yaml:"namespace"`
	Path      []string `yaml:"path"`
}

// ListenConfig holds listen addresses. Port 0 picks a free port; the chosen
// address is printed on the ready line.
type ListenConfig struct {
	// ExtProc is the ext_proc gRPC address. Default ":9002".
	ExtProc string `yaml:"extproc"`
	// Admin is the admin HTTP address (/metrics, /healthz, /readyz, /debug/*).
	// Default ":9090".
	Admin string `yaml:"admin"`
}

// ModelConfig describes one served model name.
type ModelConfig struct {
	// Name is the model name clients send in "model". Required.
	Name string `yaml:"name"`
	// Tokenizer is a directory holding tokenizer.json and
	// tokenizer_config.json, relative to the config file's directory;
	// empty means use the workers' /tokenize.
	Tokenizer string `yaml:"tokenizer"`
	// BlockSize is the engines' KV block size in tokens. Default 16.
	BlockSize int `yaml:"block_size"`
	// TokenizerCacheMiB bounds the conversation prefix cache that lets a
	// follow-up turn re-tokenize only its new tail. Default 64.
	TokenizerCacheMiB int `yaml:"tokenizer_cache_mib"`
}

// WorkerConfig is one statically configured vLLM server (see
// discovery.Worker for the meaning of each field).
type WorkerConfig struct {
	Name             string   `yaml:"name"`
	Address          string   `yaml:"address"`
	Models           []string `yaml:"models"`
	KVEvents         string   `yaml:"kv_events"`
	KVReplay         string   `yaml:"kv_replay"`
	DataParallelSize int      `yaml:"data_parallel_size"`
}

// ExtProcConfig tunes the ext_proc server.
type ExtProcConfig struct {
	// DestinationHeader is the request header that carries the chosen
	// worker's host:port to Envoy. Default "x-gateway-destination-endpoint".
	DestinationHeader string `yaml:"destination_header"`
	// MetadataNamespace is the dynamic-metadata namespace the destination is
	// also written to (key DestinationHeader). Default "envoy.lb"; "-" disables.
	MetadataNamespace string `yaml:"metadata_namespace"`
	// MaxBodyBytes is the largest request body accepted; larger gets 413.
	// Default 16 MiB.
	MaxBodyBytes int `yaml:"max_body_bytes"`
	// MaxResponseBytes bounds how much of a non-streamed response body is kept
	// to read its usage; the body itself always passes through. Default 4 MiB.
	MaxResponseBytes int `yaml:"max_response_bytes"`
	// MaxRecvMsgBytes is the gRPC receive limit; it must exceed the largest
	// body chunk Envoy sends (BUFFERED sends the whole body). Default 64 MiB.
	MaxRecvMsgBytes int `yaml:"max_recv_msg_bytes"`
	// BodyMode is assumed when Envoy sends no protocol_config (before 1.34):
	// "full_duplex" (default) or "buffered".
	BodyMode string `yaml:"body_mode"`
	// DebugHeaders adds x-warmpath-worker and x-warmpath-reason to responses.
	// Default false.
	DebugHeaders bool `yaml:"debug_headers"`
	// AssignmentTTL ends an assignment whose response never finished.
	// Default 30m.
	AssignmentTTL Duration `yaml:"assignment_ttl"`
	// DrainTimeout bounds graceful shutdown: in-flight streams get this long
	// to finish after readiness turns NOT_SERVING. Default 30s.
	DrainTimeout Duration `yaml:"drain_timeout"`
	// RetryAfter is the Retry-After value (seconds) on 503 replies. Default 1.
	RetryAfter int `yaml:"retry_after"`
}

// DiscoveryConfig configures package discovery.
type DiscoveryConfig struct {
	// StaticReload is how often the config file is checked for changes to
	// workers (static discovery). Default 1s.
	StaticReload Duration `yaml:"static_reload"`
	// Kubernetes, when its namespace is set, replaces the workers list with
	// the Ready pods of a label selector or an InferencePool.
	Kubernetes KubernetesConfig `yaml:"kubernetes"`
	// Scrape tunes the engines' /metrics scraping.
	Scrape ScrapeConfig `yaml:"scrape"`
	// Health tunes passive ejection and active /health checks.
	Health HealthConfig `yaml:"health"`
}

// KubernetesConfig selects worker pods (see deploy/README.md for the
// warmpath.io/* annotations that override Defaults per pod).
type KubernetesConfig struct {
	Namespace     string `yaml:"namespace"`
	LabelSelector string `yaml:"label_selector"`
	// InferencePool names an inference.networking.k8s.io/v1 InferencePool
	// whose selector and target ports define the workers.
	InferencePool string `yaml:"inference_pool"`
	// Kubeconfig is a kubeconfig path; empty tries $KUBECONFIG,
	// ~/.kube/config, then in-cluster credentials.
	Kubeconfig string      `yaml:"kubeconfig"`
	Defaults   PodDefaults `yaml:"defaults"`
}

// PodDefaults are per-pod settings annotations may override.
type PodDefaults struct {
	HTTPPort         int      `yaml:"http_port"`
	KVEventsPort     int      `yaml:"kv_events_port"`
	KVReplayPort     int      `yaml:"kv_replay_port"`
	DataParallelSize int      `yaml:"data_parallel_size"`
	Models           []string `yaml:"models"`
}

// ScrapeConfig: Interval between scrapes (default 1s); MaxAge after which
// a worker's load is stale, never read as zero (default 3s).
type ScrapeConfig struct {
	Interval Duration `yaml:"interval"`
	MaxAge   Duration `yaml:"max_age"`
}

// HealthConfig: FailureThreshold consecutive 5xx eject a worker (default 3;
// a refused connection ejects at once) for BaseEjection (default 1s),
// doubling per repeat up to MaxEjection (default 30s); ActiveInterval is
// the GET /health period (default 5s; negative disables).
type HealthConfig struct {
	ActiveInterval   Duration `yaml:"active_interval"`
	FailureThreshold int      `yaml:"failure_threshold"`
	BaseEjection     Duration `yaml:"base_ejection"`
	MaxEjection      Duration `yaml:"max_ejection"`
}

// KVIndexConfig tunes package kvindex (the index) and package kvevents
// (the subscriptions feeding it: topic and replay timeout).
type KVIndexConfig struct {
	// EntryBudget bounds (block, worker) entries; the least recently touched
	// chains are dropped past it. Default 4194304 (about 0.5 GiB at most).
	EntryBudget int `yaml:"entry_budget"`
	// StaleAfter marks a worker whose events stopped as stale. An idle
	// engine publishes nothing, so keep it above normal lulls. Default 5m.
	StaleAfter Duration `yaml:"stale_after"`
	// SpeculativeTTL is how long the blocks of a just-routed request count
	// as cached on the chosen worker before its real events arrive. Default 5s.
	SpeculativeTTL Duration `yaml:"speculative_ttl"`
	// Topic is the ZMQ topic prefix subscribed to ("" = all). Default "".
	Topic string `yaml:"topic"`
	// ReplayTimeout abandons a replay silent this long. Default 10s.
	ReplayTimeout Duration `yaml:"replay_timeout"`
}

// LogConfig selects the log level ("debug", "info", "warn", "error"; default
// "info") and format ("text" default, or "json").
type LogConfig struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// Duration is a time.Duration written in YAML as a Go duration string
// ("30s", "5m").
type Duration time.Duration

// UnmarshalYAML decodes "1m30s" style strings.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: duration must be a string like \"30s\"", n.Line)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// DefaultConfig returns the configuration used for every key a file omits.
func DefaultConfig() Config {
	return Config{
		Listen: ListenConfig{ExtProc: ":9002", Admin: ":9090"},
		Policy: "warmpath",
		ExtProc: ExtProcConfig{
			DestinationHeader: "x-gateway-destination-endpoint",
			MetadataNamespace: "envoy.lb",
			MaxBodyBytes:      16 << 20,
			MaxResponseBytes:  4 << 20,
			MaxRecvMsgBytes:   64 << 20,
			BodyMode:          "full_duplex",
			AssignmentTTL:     Duration(30 * time.Minute),
			DrainTimeout:      Duration(30 * time.Second),
			RetryAfter:        1,
		},
		Discovery: DiscoveryConfig{
			StaticReload: Duration(time.Second),
			Kubernetes:   KubernetesConfig{Defaults: PodDefaults{HTTPPort: 8000}},
			Scrape:       ScrapeConfig{Interval: Duration(time.Second), MaxAge: Duration(3 * time.Second)},
			Health: HealthConfig{ActiveInterval: Duration(5 * time.Second), FailureThreshold: 3,
				BaseEjection: Duration(time.Second), MaxEjection: Duration(30 * time.Second)},
		},
		KVIndex: KVIndexConfig{
			EntryBudget:    kvindex.DefaultEntryBudget,
			StaleAfter:     Duration(kvindex.DefaultStaleAfter),
			SpeculativeTTL: Duration(kvindex.DefaultSpeculativeTTL),
			ReplayTimeout:  Duration(kvevents.DefaultReplayTimeout),
		},
		Scoring: scoring.DefaultConfig(),
		Log:     LogConfig{Level: "info", Format: "text"},
		Tenant:  TenantConfig{Metadata: TenantMetadata{Namespace: "envoy.filters.http.jwt_authn"}},
	}
}

// defaultBlockSize is vLLM's default KV block size on GPUs.
const defaultBlockSize = 16

// LoadConfig reads and strictly decodes the YAML file at path over the
// defaults and validates the result.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	cfg, err := parseConfig(b, filepath.Dir(path))
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	cfg.path = path
	return cfg, nil
}

// ParseConfig strictly decodes YAML over the defaults and validates it. An
// unknown key is an error naming the key and its line. Relative tokenizer
// paths are taken from the working directory.
func ParseConfig(b []byte) (Config, error) { return parseConfig(b, "") }

// parseConfig is ParseConfig with relative tokenizer paths resolved
// against dir (the config file's directory).
func parseConfig(b []byte, dir string) (Config, error) {
	cfg := DefaultConfig()
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("decode: %s", strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  "))
	}
	for i := range cfg.Models {
		if cfg.Models[i].BlockSize == 0 {
			cfg.Models[i].BlockSize = defaultBlockSize
		}
		if cfg.Models[i].TokenizerCacheMiB == 0 {
			cfg.Models[i].TokenizerCacheMiB = 64
		}
		if t := cfg.Models[i].Tokenizer; t != "" && dir != "" && !filepath.IsAbs(t) {
			cfg.Models[i].Tokenizer = filepath.Join(dir, t)
		}
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Validate reports every problem in c, joined.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := checkListen(c.Listen.ExtProc); err != nil {
		bad("listen.extproc: %w", err)
	}
	if err := checkListen(c.Listen.Admin); err != nil {
		bad("listen.admin: %w", err)
	}
	if !slices.Contains(scoring.PolicyNames(), c.Policy) {
		bad("policy: %q is not one of %s", c.Policy, strings.Join(scoring.PolicyNames(), ", "))
	}
	sc := c.scoringConfig()
	if err := sc.Validate(); err != nil {
		bad("scoring: %w", err)
	}
	models := map[string]bool{}
	for i, m := range c.Models {
		switch {
		case m.Name == "":
			bad("models[%d].name: required", i)
		case models[m.Name]:
			bad("models[%d].name: %q listed twice", i, m.Name)
		}
		models[m.Name] = true
		if m.BlockSize < 1 {
			bad("models[%d].block_size: must be positive, got %d", i, m.BlockSize)
		}
		if m.TokenizerCacheMiB < 0 {
			bad("models[%d].tokenizer_cache_mib: must not be negative", i)
		}
		if m.Tokenizer != "" {
			if _, err := os.Stat(filepath.Join(m.Tokenizer, "tokenizer.json")); err != nil {
				if _, errGz := os.Stat(filepath.Join(m.Tokenizer, "tokenizer.json.gz")); errGz != nil {
					bad("models[%d].tokenizer: %s holds no tokenizer.json", i, m.Tokenizer)
				}
			}
		}
	}
	names := map[string]bool{}
	for i, w := range c.Workers {
		switch {
		case w.Name == "":
			bad("workers[%d].name: required", i)
		case names[w.Name]:
			bad("workers[%d].name: %q listed twice", i, w.Name)
		}
		names[w.Name] = true
		if _, _, err := net.SplitHostPort(w.Address); err != nil || w.Address == "" {
			bad("workers[%d].address: want host:port, got %q", i, w.Address)
		}
		if len(w.Models) == 0 {
			bad("workers[%d].models: at least one served model name required", i)
		}
		for _, m := range w.Models {
			if len(c.Models) > 0 && !models[m] {
				bad("workers[%d].models: %q is not in models", i, m)
			}
		}
		for _, ep := range []struct{ key, v string }{{"kv_events", w.KVEvents}, {"kv_replay", w.KVReplay}} {
			if ep.v != "" && !strings.HasPrefix(ep.v, "tcp://") && !strings.HasPrefix(ep.v, "ipc://") {
				bad("workers[%d].%s: want tcp://host:port, got %q", i, ep.key, ep.v)
			}
		}
		if w.KVReplay != "" && w.KVEvents == "" {
			bad("workers[%d].kv_replay: set without kv_events", i)
		}
		if w.DataParallelSize < 0 {
			bad("workers[%d].data_parallel_size: must not be negative", i)
		}
	}
	e := c.ExtProc
	if e.DestinationHeader == "" || strings.ToLower(e.DestinationHeader) != e.DestinationHeader || strings.HasPrefix(e.DestinationHeader, ":") {
		bad("extproc.destination_header: want a lower-case header name, got %q", e.DestinationHeader)
	}
	if e.MaxBodyBytes < 1 {
		bad("extproc.max_body_bytes: must be positive")
	}
	if e.MaxResponseBytes < 1 {
		bad("extproc.max_response_bytes: must be positive")
	}
	if e.MaxRecvMsgBytes < 1<<20 {
		bad("extproc.max_recv_msg_bytes: must be at least 1 MiB")
	}
	if e.BodyMode != "full_duplex" && e.BodyMode != "buffered" {
		bad("extproc.body_mode: want full_duplex or buffered, got %q", e.BodyMode)
	}
	if e.AssignmentTTL <= 0 {
		bad("extproc.assignment_ttl: must be positive")
	}
	if e.DrainTimeout < 0 {
		bad("extproc.drain_timeout: must not be negative")
	}
	if e.RetryAfter < 0 {
		bad("extproc.retry_after: must not be negative")
	}
	if d := c.Discovery; d.StaticReload <= 0 || d.Scrape.Interval <= 0 || d.Scrape.MaxAge <= 0 ||
		d.Health.FailureThreshold < 1 || d.Health.BaseEjection <= 0 || d.Health.MaxEjection < d.Health.BaseEjection {
		bad("discovery: static_reload, scrape intervals and ejection periods must be positive, failure_threshold at least 1, max_ejection ≥ base_ejection")
	}
	if k := c.Discovery.Kubernetes; k.Namespace != "" {
		if len(c.Workers) > 0 {
			bad("discovery.kubernetes: set together with workers; choose one source")
		}
		if k.LabelSelector == "" && k.InferencePool == "" {
			bad("discovery.kubernetes: label_selector or inference_pool required")
		}
	}
	if c.KVIndex.EntryBudget < 1 {
		bad("kvindex.entry_budget: must be positive")
	}
	if c.KVIndex.SpeculativeTTL <= 0 || c.KVIndex.ReplayTimeout <= 0 {
		bad("kvindex: speculative_ttl and replay_timeout must be positive")
	}
	if !contains([]string{"debug", "info", "warn", "error"}, c.Log.Level) {
		bad("log.level: want debug, info, warn or error, got %q", c.Log.Level)
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		bad("log.format: want text or json, got %q", c.Log.Format)
	}
	errs = append(errs, c.Tenant.validate()...)
	return errors.Join(errs...)
}

// DiscoveryWorkers converts the static worker list.
func (c *Config) DiscoveryWorkers() []discovery.Worker {
	ws := make([]discovery.Worker, len(c.Workers))
	for i, w := range c.Workers {
		ws[i] = discovery.Worker{
			Name: w.Name, Address: w.Address, Models: w.Models,
			KVEvents: w.KVEvents, KVReplay: w.KVReplay, DataParallelSize: w.DataParallelSize,
		}
	}
	return ws
}

// blockSizeOf returns the configured block size of model, 0 when unknown.
func (c *Config) blockSizeOf(model string) int {
	for _, m := range c.Models {
		if m.Name == model {
			return m.BlockSize
		}
	}
	return 0
}

// scoringConfig is the scoring section with the models' block sizes.
func (c *Config) scoringConfig() scoring.Config {
	sc := c.Scoring
	sc.BlockSizes = maps.Clone(sc.BlockSizes)
	if sc.BlockSizes == nil {
		sc.BlockSizes = map[string]int{}
	}
	for _, m := range c.Models {
		sc.BlockSizes[m.Name] = m.BlockSize
	}
	return sc
}

func checkListen(addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("want host:port or :port, got %q", addr)
	}
	return nil
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func (t *TenantConfig) validate() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch t.Trust {
	case "":
	case "attribute":
		if t.Attribute == "" {
			bad("tenant.attribute: required with trust: attribute")
		}
	case "jwt":
		if t.Metadata.Namespace == "" || len(t.Metadata.Path) == 0 {
			bad("tenant.metadata: namespace and path required with trust: jwt")
		}
	case "header":
		if t.Header == "" {
			bad("tenant.header: required with trust: header")
		}
	default:
		bad("tenant.trust: want attribute, jwt or header, got %q", t.Trust)
	}
	if t.Header != "" && (strings.ToLower(t.Header) != t.Header || strings.HasPrefix(t.Header, ":")) {
		bad("tenant.header: want a lower-case header name, got %q", t.Header)
	}
	if t.Labels && t.Trust == "" {
		bad("tenant.labels: set without a tenant source (tenant.trust)")
	}
	if len(t.Allow) > 0 && !t.Labels {
		bad("tenant.allow: set without tenant.labels: true")
	}
	for _, a := range t.Allow {
		if a == "other" || a == "none" || a == "" {
			bad("tenant.allow: %q is reserved", a)
		}
	}
	return errs
}
