package vllmsim

import (
	"errors"
	"fmt"
	"time"
)

// Config configures a simulated vLLM server: one HTTP API in front of
// DataParallelSize engines. Build it with DefaultConfig and adjust.
type Config struct {
	// Host and Port are the HTTP listen address; port 0 picks a free port
	// (read it back with Server.HTTPAddr). Default 127.0.0.1:8000.
	Host string
	Port int
	// ServedModelNames are the model names clients may send; the first is
	// reported in responses and metric labels. Default ["sim-model"].
	ServedModelNames []string
	// Engine configures every data-parallel engine (Rank is set per rank).
	Engine EngineConfig
	// DataParallelSize is the number of engines behind the API, default 1.
	DataParallelSize int
	// KVEvents is vLLM's --kv-events-config.
	KVEvents KVEventsConfig
	// Wire selects the KV-event layout; default WireMap (vLLM ≥ 0.24).
	Wire Wire
	// BytesHashes sends 32-byte digests instead of uint64 hashes
	// (vLLM with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0). Default false.
	BytesHashes bool
	// KVEventsDropFraction of batches are withheld from PUB (still
	// replayable), for gap tests. Default 0.
	KVEventsDropFraction float64
	// KVEventsRestartEvery, when positive, restarts the sequence at 0 and
	// empties the replay ring after that many batches. Default 0.
	KVEventsRestartEvery int
	// TimeScale is simulated seconds per wall second (20 runs twenty times
	// faster). Default 1.
	TimeScale float64
	// EnablePromptTokensDetails adds prompt_tokens_details.cached_tokens to
	// usage (vLLM's --enable-prompt-tokens-details). Default true here.
	EnablePromptTokensDetails bool
	// DefaultMaxTokens, when positive, replaces vLLM's default output length
	// for chat and messages requests without max tokens (max_model_len −
	// prompt length). Default 0.
	DefaultMaxTokens int
	// Faults are injected into requests; see Faults. Default none.
	Faults Faults
}

// Faults selects failures to inject, each for a fraction (0..1) of
// requests, drawn from a generator seeded by the engine seed.
type Faults struct {
	// ErrorFraction of requests get HTTP 500 with vLLM's error body.
	ErrorFraction float64
	// SpikeFraction of requests wait Spike before reaching the engine.
	SpikeFraction float64
	Spike         time.Duration
	// StallFraction of engine steps take Stall longer (simulated time), as
	// a GPU hiccup delays every running request.
	StallFraction float64
	Stall         time.Duration
	// HangFraction of requests are never answered (until the client leaves).
	HangFraction float64
	// DieFraction of streamed requests lose their connection after
	// DieAfterTokens tokens, as when a worker dies mid-stream.
	DieFraction    float64
	DieAfterTokens int
}

// DefaultConfig returns the "test" profile behind 127.0.0.1:8000 with KV
// events off.
func DefaultConfig() Config {
	p, _ := ProfileByName("test")
	kv, _ := ParseKVEventsConfig("")
	return Config{
		Host: "127.0.0.1", Port: 8000, ServedModelNames: []string{"sim-model"},
		Engine: p.Engine, DataParallelSize: 1, KVEvents: kv, Wire: WireMap,
		TimeScale: 1, EnablePromptTokensDetails: true,
		Faults: Faults{DieAfterTokens: 1},
	}
}

// Validate reports every invalid field.
func (c *Config) Validate() error {
	var errs []error
	if err := c.Engine.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(c.ServedModelNames) == 0 {
		errs = append(errs, errors.New("served model name: at least one is needed"))
	}
	if c.Port < 0 || c.Port > 65535 {
		errs = append(errs, fmt.Errorf("port %d: out of range", c.Port))
	}
	if c.DataParallelSize < 1 {
		errs = append(errs, fmt.Errorf("data parallel size %d: must be at least 1", c.DataParallelSize))
	}
	if !(c.TimeScale > 0) {
		errs = append(errs, fmt.Errorf("time scale %v: must be positive", c.TimeScale))
	}
	if _, err := ParseWire(string(c.Wire)); err != nil {
		errs = append(errs, err)
	}
	for name, f := range map[string]float64{"kv events drop fraction": c.KVEventsDropFraction,
		"error fraction": c.Faults.ErrorFraction, "spike fraction": c.Faults.SpikeFraction,
		"hang fraction": c.Faults.HangFraction, "stall fraction": c.Faults.StallFraction, "die fraction": c.Faults.DieFraction} {
		if f < 0 || f > 1 {
			errs = append(errs, fmt.Errorf("%s %v: must be within [0, 1]", name, f))
		}
	}
	if c.Faults.Spike < 0 || c.Faults.Stall < 0 || c.Faults.DieAfterTokens < 0 || c.KVEventsRestartEvery < 0 || c.DefaultMaxTokens < 0 {
		errs = append(errs, errors.New("fault durations, token counts and restart period must not be negative"))
	}
	return errors.Join(errs...)
}
