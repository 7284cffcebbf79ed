package vllmsim

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Main runs the vllm-sim command: it parses args (flags named as `vllm
// serve` names them where vLLM has them), starts a Server, prints one
// ready line with its addresses as JSON to stdout, and serves until ctx
// ends. A canceled context is a clean exit.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("vllm-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := DefaultConfig()
	var (
		host        = fs.String("host", def.Host, "HTTP listen host")
		port        = fs.Int("port", def.Port, "HTTP listen port (0 picks a free port)")
		served      = fs.String("served-model-name", strings.Join(def.ServedModelNames, ","), "comma-separated model names clients may send; the first is reported")
		tokenizer   = fs.String("tokenizer", "", "directory with tokenizer.json and tokenizer_config.json, for text prompts")
		profile     = fs.String("profile", "test", "engine profile: "+profileNames())
		blockSize   = fs.Int("block-size", 0, "tokens per KV-cache block (default: the profile's)")
		numBlocks   = fs.Int("num-gpu-blocks-override", 0, "KV-cache size in blocks, including the null block (default: the profile's)")
		budget      = fs.Int("max-num-batched-tokens", 0, "token budget of one engine step (default: the profile's)")
		maxSeqs     = fs.Int("max-num-seqs", 0, "maximum running requests per engine (default: the profile's)")
		maxModelLen = fs.Int("max-model-len", 0, "maximum prompt plus output tokens (default: the profile's)")
		dp          = fs.Int("data-parallel-size", 1, "number of engines behind the API; rank r publishes KV events on port+r")
		kvJSON      = fs.String("kv-events-config", "", `vLLM's KV-events JSON, e.g. {"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558","topic":"kv-events","buffer_steps":10000}`)
		wire        = fs.String("kv-events-wire", string(WireMap), "KV-event layout: map (vLLM >= 0.24), array (0.21-0.23) or array-v0.11")
		bytesHashes = fs.Bool("kv-events-bytes-hashes", false, "send 32-byte digests instead of uint64 hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0)")
		dropFrac    = fs.Float64("kv-events-drop-fraction", 0, "fraction of KV-event batches withheld from PUB (still replayable), for gap tests")
		restartN    = fs.Int("kv-events-restart-every", 0, "restart the KV-event sequence at 0 after this many batches (0: never)")
		hashAlgo    = fs.String("prefix-caching-hash-algo", "sha256_cbor", "block hash algorithm; only sha256_cbor is reproducible")
		hashSeed    = fs.String("hash-seed", DefaultHashSeed, "NONE_HASH seed: the engine's PYTHONHASHSEED (\"0\" for the 0.31 capture)")
		overheadMS  = optFloatVar(fs, "step-overhead-ms", "step time: fixed milliseconds per step (default: the profile's)")
		prefillUS   = optFloatVar(fs, "prefill-us-per-token", "step time: microseconds per prefill token (default: the profile's)")
		decodeUS    = optFloatVar(fs, "decode-us-per-seq", "step time: microseconds per decoding sequence (default: the profile's)")
		contextNS   = optFloatVar(fs, "context-ns-per-token", "step time: nanoseconds per context token read (default: the profile's)")
		timeScale   = fs.Float64("time-scale", 1, "simulated seconds per wall second (20 runs twenty times faster)")
		seed        = fs.Uint64("seed", 0, "seed of generated tokens and injected faults")
		details     = fs.Bool("enable-prompt-tokens-details", true, "report usage.prompt_tokens_details.cached_tokens")
		defMax      = fs.Int("default-max-tokens", 0, "output length of chat/messages requests without max tokens (0: max_model_len - prompt, as vLLM)")
		errFrac     = fs.Float64("fault-error-fraction", 0, "fraction of requests answered with HTTP 500")
		spikeFrac   = fs.Float64("fault-latency-spike-fraction", 0, "fraction of requests delayed before reaching the engine")
		spike       = fs.Duration("fault-latency-spike", time.Second, "delay of a latency spike (wall time)")
		hangFrac    = fs.Float64("fault-hang-fraction", 0, "fraction of requests never answered")
		stallFrac   = fs.Float64("fault-stall-fraction", 0, "fraction of engine steps lengthened by --fault-stall")
		stall       = fs.Duration("fault-stall", 500*time.Millisecond, "extra simulated time of a stalled engine step")
		dieFrac     = fs.Float64("fault-die-fraction", 0, "fraction of streamed requests whose connection is cut mid-stream")
		dieAfter    = fs.Int("fault-die-after-tokens", 1, "tokens sent before a dying stream is cut")
		logLevel    = fs.String("log-level", "info", "debug, info, warn or error")
	)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: vllm-sim [flags]\n\nA simulated vLLM server (OpenAI/Anthropic HTTP API, KV events over ZeroMQ, metrics).\nStep time = overhead + prefill tokens x prefill-us + decoding seqs x decode-us + context tokens x context-ns.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("log level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	var errs []error
	p, err := ProfileByName(*profile)
	if err != nil {
		errs = append(errs, err)
	}
	cfg := def
	cfg.Host, cfg.Port, cfg.DataParallelSize = *host, *port, *dp
	cfg.ServedModelNames = splitNames(*served)
	cfg.Engine = p.Engine
	cfg.Engine.HashSeed, cfg.Engine.Seed = *hashSeed, *seed
	for _, o := range []struct {
		v   int
		dst *int
	}{{*blockSize, &cfg.Engine.BlockSize}, {*numBlocks, &cfg.Engine.NumGPUBlocks}, {*budget, &cfg.Engine.MaxNumBatchedTokens},
		{*maxSeqs, &cfg.Engine.MaxNumSeqs}, {*maxModelLen, &cfg.Engine.MaxModelLen}} {
		if o.v != 0 {
			*o.dst = o.v
		}
	}
	if overheadMS.set {
		cfg.Engine.Step.Overhead = time.Duration(overheadMS.v * float64(time.Millisecond))
	}
	if prefillUS.set {
		cfg.Engine.Step.PrefillPerToken = time.Duration(prefillUS.v * float64(time.Microsecond))
	}
	if decodeUS.set {
		cfg.Engine.Step.DecodePerSeq = time.Duration(decodeUS.v * float64(time.Microsecond))
	}
	if contextNS.set {
		cfg.Engine.Step.ContextPicosPerToken = int64(contextNS.v * 1000)
	}
	if cfg.KVEvents, err = ParseKVEventsConfig(*kvJSON); err != nil {
		errs = append(errs, err)
	}
	if cfg.Wire, err = ParseWire(*wire); err != nil {
		errs = append(errs, err)
	}
	if *hashAlgo != "sha256_cbor" {
		errs = append(errs, fmt.Errorf("prefix-caching-hash-algo %q: the simulator reproduces only sha256_cbor", *hashAlgo))
	}
	cfg.BytesHashes, cfg.KVEventsDropFraction, cfg.KVEventsRestartEvery = *bytesHashes, *dropFrac, *restartN
	cfg.TimeScale, cfg.EnablePromptTokensDetails, cfg.DefaultMaxTokens = *timeScale, *details, *defMax
	cfg.Faults = Faults{ErrorFraction: *errFrac, SpikeFraction: *spikeFrac, Spike: *spike, HangFraction: *hangFrac, StallFraction: *stallFrac, Stall: *stall,
		DieFraction: *dieFrac, DieAfterTokens: *dieAfter}
	opts := []Option{WithLogger(log)}
	if *tokenizer != "" {
		tok, err := loadTokenizer(*tokenizer)
		if err != nil {
			errs = append(errs, err)
		} else {
			opts = append(opts, WithTokenizer(tok))
		}
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}

	srv, err := NewServer(cfg, opts...)
	if err != nil {
		return err
	}
	ready, _ := json.Marshal(struct {
		Msg       string   `json:"msg"`
		HTTP      string   `json:"http"`
		KVEvents  []string `json:"kv_events,omitempty"`
		KVReplay  []string `json:"kv_replay,omitempty"`
		Profile   string   `json:"profile"`
		TimeScale float64  `json:"time_scale"`
	}{"vllm-sim ready", srv.HTTPAddr(), srv.KVEventsEndpoints(), srv.ReplayEndpoints(), p.Name, cfg.TimeScale})
	fmt.Fprintf(stdout, "%s\n", ready)
	if err := srv.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// optFloat is a float flag that records whether it was set, so an
// explicit value can override a profile's.
type optFloat struct {
	v   float64
	set bool
}

func (o *optFloat) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.FormatFloat(o.v, 'g', -1, 64)
}

func (o *optFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return err
	}
	if v < 0 {
		return errors.New("must not be negative")
	}
	o.v, o.set = v, true
	return nil
}

func optFloatVar(fs *flag.FlagSet, name, usage string) *optFloat {
	o := &optFloat{}
	fs.Var(o, name, usage)
	return o
}

func splitNames(s string) []string {
	var out []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

func profileNames() string {
	var names []string
	for _, p := range Profiles() {
		names = append(names, p.Name+" ("+p.Description+")")
	}
	return strings.Join(names, "; ")
}
