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
	"github.com/warmpath/warmpath/extproc"
	"github.com/warmpath/warmpath/internal/mtls"
	"github.com/warmpath/warmpath/kvevents"
	"github.com/warmpath/warmpath/kvindex"
	"github.com/warmpath/warmpath/peers"
	"github.com/warmpath/warmpath/scoring"
	"github.com/warmpath/warmpath/telemetry"
)

// Config is warmpath's whole configuration, read from one YAML file. Each
// section is owned by the package it configures, which documents every key
// with its unit and default (extproc.Config, discovery.ScrapeConfig, …);
// this file composes them and owns only the keys that belong to the process
// itself. Every field has a default applied by DefaultConfig; a file only
// needs to say what differs. Unknown keys are an error.
type Config struct {
	// Listen holds the server addresses.
	Listen ListenConfig `yaml:"listen"`
	// Policy names the routing policy: warmpath (default), random,
	// round-robin, least-request, prefix-max, affinity or dynamo-cost.
	Policy string `yaml:"policy"`
	// Models lists the served model names warmpath routes for.
	Models []ModelConfig `yaml:"models"`
	// Workers lists the vLLM servers when discovery is static (see
	// discovery.Worker for each key).
	Workers []discovery.Worker `yaml:"workers"`
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
	Telemetry telemetry.Config `yaml:"telemetry"`
	// Tenant says where a request's tenant identity comes from.
	Tenant extproc.TenantConfig `yaml:"tenant"`
	// Peers are the other warmpath replicas in front of the same workers,
	// with which this one shares its in-flight ledger (peers.Config).
	Peers peers.Config `yaml:"peers"`
	// Debug switches on the profiling endpoints of the admin port.
	Debug DebugConfig `yaml:"debug"`

	path string // the file it was loaded from, for reloads
}

// ListenConfig holds listen addresses. Port 0 picks a free port; the chosen
// address is printed on the ready line.
type ListenConfig struct {
	// ExtProc is the ext_proc gRPC address. Default "127.0.0.1:9002": an
	// address other hosts can reach needs TLS or AllowPlaintext.
	ExtProc string `yaml:"extproc"`
	// Admin is the admin HTTP address (/metrics, /healthz, /readyz, /debug/*).
	// Default ":9090".
	Admin string `yaml:"admin"`
	// TLS makes the ext_proc port mutual TLS: warmpath's certificate and
	// key, and the CA whose client certificates it accepts (Envoy's, and
	// the other replicas', which dial their peers with the same files).
	// The files are read again when they change. Relative to the config
	// file's directory. Default: none.
	TLS mtls.Files `yaml:"tls"`
	// AllowPlaintext lets the ext_proc port listen without TLS on an
	// address other hosts can reach: only behind something that
	// authenticates every connection itself (an Istio sidecar with STRICT
	// mTLS). Whoever can open ext_proc streams can load the workers and
	// feed calibration. Default false: without tls, extproc must be a
	// loopback address.
	AllowPlaintext bool `yaml:"allow_plaintext"`
}

// DebugConfig switches on Go's profiler on the admin port. Profiles show
// the code paths of every tenant's requests (never their contents), so they
// are off by default.
type DebugConfig struct {
	// Endpoints serves /debug/workers and POST /debug/lookup on the admin
	// port: "auto" (default) only when listen.admin is a loopback address,
	// "on", or "off". /debug/lookup tells how much of any prompt is cached,
	// an oracle on other tenants' prompts: on a reachable address, guard it
	// with TokenFile.
	Endpoints string `yaml:"endpoints"`
	// TokenFile names a file holding the bearer token every /debug/
	// request must carry (Authorization: Bearer TOKEN), read per request so
	// that a rotated Secret applies at once; relative to the config file's
	// directory. Required when Endpoints is "on" or PProf is set and
	// listen.admin is not a loopback address. Default "": no token.
	TokenFile string `yaml:"token_file"`
	// PProf serves net/http/pprof under /debug/pprof/ on the admin port.
	// Default false.
	PProf bool `yaml:"pprof"`
	// MutexProfileFraction samples one in this many mutex contention events
	// for /debug/pprof/mutex (runtime.SetMutexProfileFraction); 0 records
	// none. Needs pprof. Default 0.
	MutexProfileFraction int `yaml:"mutex_profile_fraction"`
	// BlockProfileRate samples one blocking event per this many nanoseconds
	// blocked for /debug/pprof/block (runtime.SetBlockProfileRate); 0
	// records none. Needs pprof. Default 0.
	BlockProfileRate int `yaml:"block_profile_rate"`
}

// ModelConfig describes one served model name.
type ModelConfig struct {
	// Name is the model name clients send in "model". Required.
	Name string `yaml:"name"`
	// Tokenizer is a directory holding tokenizer.json and
	// tokenizer_config.json, relative to the config file's directory;
	// empty means use the workers' /tokenize.
	Tokenizer string `yaml:"tokenizer"`
	// BlockSize is the engines' KV block size in tokens: the configuration's
	// one place for it. Default 16.
	BlockSize int `yaml:"block_size"`
	// TokenizerCacheMiB bounds the conversation prefix cache that lets a
	// follow-up turn re-tokenize only its new tail; the chat template's
	// render memo, which lets it render again only the messages whose
	// context changed, gets a quarter of it besides. Default 64.
	TokenizerCacheMiB int `yaml:"tokenizer_cache_mib"`
}

// ExtProcConfig is the extproc section: the ext_proc protocol's keys
// (extproc.Config) and those of the gRPC server that serves it.
type ExtProcConfig struct {
	extproc.Config `yaml:",inline"`
	// MaxRecvMsgBytes is the gRPC receive limit; it must exceed the largest
	// body chunk Envoy sends (BUFFERED sends the whole body). Default 64 MiB.
	MaxRecvMsgBytes int `yaml:"max_recv_msg_bytes"`
	// DrainDelay is how long warmpath, once told to stop (SIGTERM), keeps
	// accepting and serving new streams while its gRPC health reports
	// NOT_SERVING, so that Envoy's health checks take it out of rotation
	// before it refuses anything. It must exceed the proxy's health-check
	// interval × unhealthy threshold: the shipped Envoy configs check every
	// second and eject after 2 failures. Default 5s; 0 stops accepting at once.
	DrainDelay time.Duration `yaml:"drain_delay"`
	// DrainTimeout bounds graceful shutdown after the drain delay: in-flight
	// streams get this long to finish. Default 30s.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
}

// DiscoveryConfig is the discovery section.
type DiscoveryConfig struct {
	// StaticReload is how often the config file is checked for changes to
	// workers (static discovery). Default 1s.
	StaticReload time.Duration `yaml:"static_reload"`
	// Kubernetes, when its namespace is set, replaces the workers list with
	// the Ready pods of a label selector or an InferencePool.
	Kubernetes discovery.KubeConfig `yaml:"kubernetes"`
	// Scrape tunes the engines' /metrics scraping.
	Scrape discovery.ScrapeConfig `yaml:"scrape"`
	// Health tunes passive ejection and active /health checks.
	Health discovery.HealthConfig `yaml:"health"`
}

// KVIndexConfig is the kvindex section: the index's keys (kvindex.Config)
// and those of the KV-event subscribers that feed it (kvevents.Config).
type KVIndexConfig struct {
	Index  kvindex.Config  `yaml:",inline"`
	Events kvevents.Config `yaml:",inline"`
}

// LogConfig selects the log level ("debug", "info", "warn", "error"; default
// "info") and format ("text" default, or "json").
type LogConfig struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// DefaultConfig returns the configuration used for every key a file omits.
func DefaultConfig() Config {
	return Config{
		Listen:  ListenConfig{ExtProc: "127.0.0.1:9002", Admin: ":9090"},
		Policy:  "warmpath",
		ExtProc: ExtProcConfig{Config: extproc.DefaultConfig(), MaxRecvMsgBytes: 64 << 20, DrainDelay: 5 * time.Second, DrainTimeout: 30 * time.Second},
		Discovery: DiscoveryConfig{
			StaticReload: time.Second,
			Kubernetes:   discovery.KubeConfig{Defaults: discovery.PodDefaults{HTTPPort: 8000}},
			Scrape:       discovery.DefaultScrapeConfig(),
			Health:       discovery.DefaultHealthConfig(),
		},
		KVIndex:   KVIndexConfig{Index: kvindex.DefaultConfig(), Events: kvevents.DefaultConfig()},
		Telemetry: telemetry.DefaultConfig(),
		Scoring:   scoring.DefaultConfig(),
		Log:       LogConfig{Level: "info", Format: "text"},
		Tenant:    extproc.DefaultTenantConfig(),
		Peers:     peers.DefaultConfig(),
		Debug:     DebugConfig{Endpoints: "auto"},
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
		msg := strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  ")
		if strings.Contains(msg, "into time.Duration") {
			msg += ` (write durations like "30s" or "5m")`
		}
		return Config{}, fmt.Errorf("decode: %s", msg)
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
	for _, p := range []*string{&cfg.Debug.TokenFile, &cfg.Listen.TLS.Cert, &cfg.Listen.TLS.Key, &cfg.Listen.TLS.ClientCA} {
		if *p != "" && dir != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
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
	if err := c.Listen.TLS.Validate(); err != nil {
		bad("listen.tls: %w", err)
	}
	if !c.Listen.TLS.Enabled() && !c.Listen.AllowPlaintext && !loopback(c.Listen.ExtProc) {
		bad("listen.extproc: %q is reachable from other hosts without TLS: set listen.tls (mutual TLS with Envoy) "+
			"or, behind a proxy that authenticates every connection (an Istio sidecar), listen.allow_plaintext: true", c.Listen.ExtProc)
	}
	switch d := c.Debug; {
	case !slices.Contains([]string{"auto", "on", "off"}, d.Endpoints):
		bad("debug.endpoints: %q is not one of auto, on, off", d.Endpoints)
	case (d.Endpoints == "on" || d.PProf) && d.TokenFile == "" && !loopback(c.Listen.Admin):
		bad("debug: endpoints: on and pprof on an admin address that is not loopback (%q) need token_file: "+
			"they show every tenant's cache state to whoever reaches the port", c.Listen.Admin)
	case d.MutexProfileFraction < 0 || d.BlockProfileRate < 0:
		bad("debug: mutex_profile_fraction and block_profile_rate must not be negative")
	case !d.PProf && (d.MutexProfileFraction > 0 || d.BlockProfileRate > 0):
		bad("debug: mutex_profile_fraction and block_profile_rate need pprof: true")
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
		if w.Protocol != "" && w.Protocol != discovery.ProtocolH2C {
			bad("workers[%d].protocol: want empty (HTTP/1.1) or %s, got %q", i, discovery.ProtocolH2C, w.Protocol)
		}
	}
	errs = append(errs, within("extproc", c.ExtProc.Config.Validate())...)
	if c.ExtProc.MaxRecvMsgBytes < 1<<20 {
		bad("extproc.max_recv_msg_bytes: must be at least 1 MiB")
	}
	if c.ExtProc.DrainTimeout < 0 || c.ExtProc.DrainDelay < 0 {
		bad("extproc.drain_delay, extproc.drain_timeout: must not be negative")
	}
	d := &c.Discovery
	if d.StaticReload <= 0 {
		bad("discovery.static_reload: must be positive")
	}
	errs = append(errs, within("discovery.scrape", d.Scrape.Validate())...)
	errs = append(errs, within("discovery.health", d.Health.Validate())...)
	if k := d.Kubernetes; k.Namespace != "" {
		if len(c.Workers) > 0 {
			bad("discovery.kubernetes: set together with workers; choose one source")
		}
		errs = append(errs, within("discovery.kubernetes", k.Validate())...)
	}
	errs = append(errs, within("kvindex", c.KVIndex.Index.Validate())...)
	errs = append(errs, within("kvindex", c.KVIndex.Events.Validate())...)
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.Log.Level) {
		bad("log.level: want debug, info, warn or error, got %q", c.Log.Level)
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		bad("log.format: want text or json, got %q", c.Log.Format)
	}
	errs = append(errs, within("tenant", c.Tenant.Validate())...)
	errs = append(errs, within("peers", c.Peers.Validate())...)
	return errors.Join(errs...)
}

// DiscoveryWorkers returns a copy of the static worker list.
func (c *Config) DiscoveryWorkers() []discovery.Worker { return slices.Clone(c.Workers) }

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

// loopback reports whether addr (host:port) listens on loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// debugEndpoints reports whether /debug/workers and /debug/lookup are served.
func (d DebugConfig) debugEndpoints(admin string) bool {
	return d.Endpoints == "on" || (d.Endpoints == "auto" && loopback(admin))
}

func checkListen(addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("want host:port or :port, got %q", addr)
	}
	return nil
}

// within prefixes each of the errors joined in err (a package's Validate)
// with the configuration key of its section.
func within(key string, err error) []error {
	if err == nil {
		return nil
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = fmt.Errorf("%s.%w", key, e)
	}
	return out
}
