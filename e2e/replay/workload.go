package replay

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"
)

// ErrConfig is wrapped by every configuration validation error.
var ErrConfig = errors.New("invalid config")

func fieldErr(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
}

// API is the request surface the replayer speaks.
type API string

// The supported APIs.
const (
	APIChat        API = "chat"        // POST /v1/chat/completions
	APICompletions API = "completions" // POST /v1/completions
	APIMessages    API = "messages"    // POST /v1/messages (Anthropic)
)

// Path returns the HTTP path of the API.
func (a API) Path() string {
	switch a {
	case APICompletions:
		return "/v1/completions"
	case APIMessages:
		return "/v1/messages"
	default:
		return "/v1/chat/completions"
	}
}

// Duration is a time.Duration that reads and writes as text ("1.5s") in
// JSON and YAML.
type Duration time.Duration

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("parse duration: %w", err)
	}
	*d = Duration(v)
	return nil
}

// DurationDist is a distribution of durations: normal with Mean and Stdev,
// clipped to [Min, Max] (Max 0: no upper bound) and at zero.
type DurationDist struct {
	Mean  Duration `json:"mean" yaml:"mean"`
	Stdev Duration `json:"stdev,omitempty" yaml:"stdev"`
	Min   Duration `json:"min,omitempty" yaml:"min"`
	Max   Duration `json:"max,omitempty" yaml:"max"`
}

func (d DurationDist) sample(r *rand.Rand) time.Duration {
	v := float64(d.Mean)
	if d.Stdev > 0 {
		v += r.NormFloat64() * float64(d.Stdev)
	}
	v = max(v, float64(d.Min), 0)
	if d.Max > 0 {
		v = min(v, float64(d.Max))
	}
	return time.Duration(v)
}

// Session is a sequence of requests one user sends: each turn is sent after
// the previous one completed and the turn's think time passed. A
// single-request workload has one turn per session.
type Session struct {
	// ID names the session in the report ("r12", "g3p1", "proj2s0").
	ID string
	// Group names the shared prefix the session uses ("" when none), so
	// reports can show cache behaviour per prefix.
	Group string
	// Prefix is sent first in every turn: as the system message (chat,
	// messages) or at the start of the prompt (completions).
	Prefix Text
	// Turns are the user messages, in order.
	Turns []Turn
	// Accumulate makes each turn carry the previous turns and replies, as a
	// chat client does.
	Accumulate bool
	// Arrival is the session's start offset in a trace; used by trace loads.
	Arrival time.Duration
}

// Turn is one request of a session.
type Turn struct {
	// User is the new user content of this turn.
	User Text
	// MaxTokens is the requested output length.
	MaxTokens int
	// Think is how long the user waits after the previous reply before
	// sending this turn (zero for the first turn).
	Think time.Duration
}

// WorkloadKind names a workload generator.
type WorkloadKind string

// The workload generators.
const (
	WorkloadSynthetic    WorkloadKind = "synthetic"     // GuideLLM-style
	WorkloadSharedPrefix WorkloadKind = "shared-prefix" // inference-perf shared_prefix
	WorkloadChat         WorkloadKind = "chat"          // multi-turn chat sessions
	WorkloadCoding       WorkloadKind = "coding"        // sessions repeating a project context
	WorkloadMooncake     WorkloadKind = "mooncake"      // Mooncake JSONL trace
	WorkloadAzure        WorkloadKind = "azure"         // Azure LLM inference trace 2023 CSV
)

// WorkloadConfig selects and parameterises the requests a run sends. The
// same WorkloadConfig and seed always produce the same sessions.
type WorkloadConfig struct {
	// Kind selects the generator; only the matching section below is read.
	Kind WorkloadKind `json:"kind" yaml:"kind"`
	// API is the surface to call. Default chat.
	API API `json:"api,omitempty" yaml:"api"`
	// Model is the "model" field sent. Required.
	Model string `json:"model" yaml:"model"`
	// TokenIDs sends prompts as token-id lists to /v1/completions, exact
	// in length for any tokenizer. Requires API completions.
	TokenIDs bool `json:"token_ids,omitempty" yaml:"token_ids"`
	// IgnoreEOS asks vLLM to generate exactly MaxTokens tokens.
	IgnoreEOS bool `json:"ignore_eos,omitempty" yaml:"ignore_eos"`
	// CacheSalt, when set, is sent as vLLM's cache_salt, which isolates the
	// prefix cache: running the same workload once per policy against the
	// same workers with a different salt each keeps one run's cached
	// prefixes from helping the next. Not supported on the messages API.
	CacheSalt string `json:"cache_salt,omitempty" yaml:"cache_salt"`
	// PrefixSeed, when not 0, seeds the shared prefixes of the synthetic and
	// shared-prefix generators instead of the run's seed, so that runs with
	// different seeds send new prompts behind the same prefixes.
	PrefixSeed int64 `json:"prefix_seed,omitempty" yaml:"prefix_seed"`

	Synthetic    SyntheticConfig    `json:"synthetic,omitzero" yaml:"synthetic"`
	SharedPrefix SharedPrefixConfig `json:"shared_prefix,omitzero" yaml:"shared_prefix"`
	Chat         ChatConfig         `json:"chat,omitzero" yaml:"chat"`
	Coding       CodingConfig       `json:"coding,omitzero" yaml:"coding"`
	Trace        TraceConfig        `json:"trace,omitzero" yaml:"trace"`
}

// SyntheticConfig is a GuideLLM-style synthetic workload: Requests
// independent prompts of Prompt tokens, each preceded by one of PrefixCount
// shared prefixes of PrefixTokens tokens (assigned round-robin) sent as the
// system message, with a unique marker opening each prompt.
type SyntheticConfig struct {
	Requests     int  `json:"requests" yaml:"requests"`
	Prompt       Dist `json:"prompt_tokens" yaml:"prompt_tokens"`
	Output       Dist `json:"output_tokens" yaml:"output_tokens"`
	PrefixTokens int  `json:"prefix_tokens,omitempty" yaml:"prefix_tokens"`
	PrefixCount  int  `json:"prefix_count,omitempty" yaml:"prefix_count"`
}

// SharedPrefixConfig mirrors inference-perf's shared_prefix generator:
// Groups system prompts of SystemPromptLen tokens, PromptsPerGroup questions
// each. With Turns > 1 every (group, prompt) pair becomes a user session of
// Turns questions that accumulates its conversation after the group's
// system prompt.
type SharedPrefixConfig struct {
	Groups          int  `json:"num_groups" yaml:"num_groups"`
	PromptsPerGroup int  `json:"num_prompts_per_group" yaml:"num_prompts_per_group"`
	SystemPromptLen int  `json:"system_prompt_len" yaml:"system_prompt_len"`
	Question        Dist `json:"question_len" yaml:"question_len"`
	Output          Dist `json:"output_len" yaml:"output_len"`
	Turns           int  `json:"turns,omitempty" yaml:"turns"`
}

// ChatConfig is multi-turn chat: Sessions conversations under one shared
// system prompt of SystemTokens tokens, each of Turns turns; the user waits
// Think between a reply and the next message.
type ChatConfig struct {
	Sessions     int          `json:"sessions" yaml:"sessions"`
	SystemTokens int          `json:"system_tokens,omitempty" yaml:"system_tokens"`
	Turns        Dist         `json:"turns" yaml:"turns"`
	User         Dist         `json:"user_tokens" yaml:"user_tokens"`
	Output       Dist         `json:"output_tokens" yaml:"output_tokens"`
	Think        DurationDist `json:"think,omitzero" yaml:"think"`
}

// CodingConfig is coding-assistant traffic: Projects large project contexts
// of ContextTokens tokens; SessionsPerProject sessions on each, every turn
// re-sending the project context and the conversation so far.
type CodingConfig struct {
	Projects           int          `json:"projects" yaml:"projects"`
	SessionsPerProject int          `json:"sessions_per_project" yaml:"sessions_per_project"`
	ContextTokens      int          `json:"context_tokens" yaml:"context_tokens"`
	Turns              Dist         `json:"turns" yaml:"turns"`
	User               Dist         `json:"user_tokens" yaml:"user_tokens"`
	Output             Dist         `json:"output_tokens" yaml:"output_tokens"`
	Think              DurationDist `json:"think,omitzero" yaml:"think"`
}

// TraceConfig reads a public serving trace.
type TraceConfig struct {
	// Path is the trace file.
	Path string `json:"path" yaml:"path"`
	// Limit keeps only the first Limit requests; 0 keeps all.
	Limit int `json:"limit,omitempty" yaml:"limit"`
	// BlockTokens is the tokens per Mooncake hash id. Default 512.
	BlockTokens int `json:"block_tokens,omitempty" yaml:"block_tokens"`
	// MaxOutput caps each request's output tokens; 0: no cap.
	MaxOutput int `json:"max_output,omitempty" yaml:"max_output"`
	// MaxPrompt caps each request's prompt tokens (cutting its tail); 0: no cap.
	MaxPrompt int `json:"max_prompt,omitempty" yaml:"max_prompt"`
}

func (w *WorkloadConfig) setDefaults() {
	if w.API == "" {
		w.API = APIChat
	}
	if w.Trace.BlockTokens == 0 {
		w.Trace.BlockTokens = 512
	}
}

// Validate reports every problem in w, joined; each wraps ErrConfig.
func (w *WorkloadConfig) Validate() error {
	var errs []error
	if w.Model == "" {
		errs = append(errs, fieldErr("workload.model", "required"))
	}
	switch w.API {
	case APIChat, APICompletions, APIMessages, "":
	default:
		errs = append(errs, fieldErr("workload.api", "unknown %q (chat, completions, messages)", w.API))
	}
	if w.TokenIDs && w.API != APICompletions {
		errs = append(errs, fieldErr("workload.token_ids", "needs api completions"))
	}
	if w.CacheSalt != "" && w.API == APIMessages {
		errs = append(errs, fieldErr("workload.cache_salt", "not supported on api messages"))
	}
	positive := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fieldErr(name, "must be > 0"))
		}
	}
	dist := func(name string, d Dist, minMean int) {
		if err := d.validate(name, minMean); err != nil {
			errs = append(errs, err)
		}
	}
	switch w.Kind {
	case WorkloadSynthetic:
		s := w.Synthetic
		positive("workload.synthetic.requests", s.Requests)
		dist("workload.synthetic.prompt_tokens", s.Prompt, 1)
		dist("workload.synthetic.output_tokens", s.Output, 1)
		if s.PrefixTokens < 0 || s.PrefixCount < 0 || (s.PrefixTokens > 0 && s.PrefixCount == 0) {
			errs = append(errs, fieldErr("workload.synthetic.prefix_count", "must be > 0 when prefix_tokens is set"))
		}
	case WorkloadSharedPrefix:
		s := w.SharedPrefix
		positive("workload.shared_prefix.num_groups", s.Groups)
		positive("workload.shared_prefix.num_prompts_per_group", s.PromptsPerGroup)
		positive("workload.shared_prefix.system_prompt_len", s.SystemPromptLen)
		dist("workload.shared_prefix.question_len", s.Question, 1)
		dist("workload.shared_prefix.output_len", s.Output, 1)
		if s.Turns < 0 {
			errs = append(errs, fieldErr("workload.shared_prefix.turns", "must be >= 0"))
		}
	case WorkloadChat:
		c := w.Chat
		positive("workload.chat.sessions", c.Sessions)
		dist("workload.chat.turns", c.Turns, 1)
		dist("workload.chat.user_tokens", c.User, 1)
		dist("workload.chat.output_tokens", c.Output, 1)
	case WorkloadCoding:
		c := w.Coding
		positive("workload.coding.projects", c.Projects)
		positive("workload.coding.sessions_per_project", c.SessionsPerProject)
		positive("workload.coding.context_tokens", c.ContextTokens)
		dist("workload.coding.turns", c.Turns, 1)
		dist("workload.coding.user_tokens", c.User, 1)
		dist("workload.coding.output_tokens", c.Output, 1)
	case WorkloadMooncake, WorkloadAzure:
		if w.Trace.Path == "" {
			errs = append(errs, fieldErr("workload.trace.path", "required"))
		}
		if w.Trace.Limit < 0 || w.Trace.BlockTokens < 0 || w.Trace.MaxOutput < 0 || w.Trace.MaxPrompt < 0 {
			errs = append(errs, fieldErr("workload.trace", "limit, block_tokens, max_output and max_prompt must be >= 0"))
		}
	default:
		errs = append(errs, fieldErr("workload.kind", "unknown %q (synthetic, shared-prefix, chat, coding, mooncake, azure)", w.Kind))
	}
	return errors.Join(errs...)
}

// userText returns the marker of the index-th user turn followed by words
// drawn from the stream (seed, kind, a, b): n tokens in all, or just the
// marker when n is smaller.
func userText(seed int64, index int, kind string, a, b, n int) Text {
	r := newRand(seed, hashString(kind), uint64(a), uint64(b))
	return concat(marker(index), genText(r, max(n-markerTokens, 0)))
}

// Generate builds the sessions of w from seed, reading the trace file for
// trace workloads. The result depends only on w, seed and the file content.
func Generate(w WorkloadConfig, seed int64) ([]Session, error) {
	w.setDefaults()
	if err := w.Validate(); err != nil {
		return nil, err
	}
	switch w.Kind {
	case WorkloadSynthetic:
		return genSynthetic(w.Synthetic, seed, w.prefixSeed(seed)), nil
	case WorkloadSharedPrefix:
		return genSharedPrefix(w.SharedPrefix, seed, w.prefixSeed(seed)), nil
	case WorkloadChat:
		return genChat(w.Chat, seed), nil
	case WorkloadCoding:
		return genCoding(w.Coding, seed), nil
	default:
		f, err := os.Open(w.Trace.Path)
		if err != nil {
			return nil, fmt.Errorf("open trace: %w", err)
		}
		defer f.Close()
		var recs []TraceRecord
		if w.Kind == WorkloadMooncake {
			recs, err = ParseMooncake(f)
		} else {
			recs, err = ParseAzure(f)
		}
		if err != nil {
			return nil, fmt.Errorf("read trace %s: %w", w.Trace.Path, err)
		}
		return traceSessions(recs, w.Trace, seed), nil
	}
}

// prefixSeed returns the seed of w's shared prefixes for a run of seed.
func (w WorkloadConfig) prefixSeed(seed int64) int64 {
	if w.PrefixSeed != 0 {
		return w.PrefixSeed
	}
	return seed
}

func genSynthetic(c SyntheticConfig, seed, prefixSeed int64) []Session {
	prefixes := make([]Text, c.PrefixCount)
	for p := range prefixes {
		prefixes[p] = genText(newRand(prefixSeed, hashString("prefix"), uint64(p)), c.PrefixTokens)
	}
	lens := newRand(seed, hashString("synthetic-lengths"))
	out := make([]Session, c.Requests)
	for i := range out {
		s := Session{ID: fmt.Sprintf("r%d", i)}
		if c.PrefixTokens > 0 {
			p := i % c.PrefixCount
			s.Prefix, s.Group = prefixes[p], fmt.Sprintf("p%d", p)
		}
		n, o := c.Prompt.sample(lens), c.Output.sample(lens)
		s.Turns = []Turn{{User: userText(seed, i, "r", i, 0, n), MaxTokens: max(o, 1)}}
		out[i] = s
	}
	return out
}

func genSharedPrefix(c SharedPrefixConfig, seed, prefixSeed int64) []Session {
	turns := max(c.Turns, 1)
	lens := newRand(seed, hashString("shared-prefix-lengths"))
	index := 0
	out := make([]Session, 0, c.Groups*c.PromptsPerGroup)
	for g := range c.Groups {
		prefix := genText(newRand(prefixSeed, hashString("group"), uint64(g)), c.SystemPromptLen)
		for p := range c.PromptsPerGroup {
			s := Session{ID: fmt.Sprintf("g%dp%d", g, p), Group: fmt.Sprintf("g%d", g), Prefix: prefix, Accumulate: turns > 1}
			for t := range turns {
				s.Turns = append(s.Turns, Turn{
					User:      userText(seed, index, fmt.Sprintf("g%dp", g), p, t, c.Question.sample(lens)),
					MaxTokens: max(c.Output.sample(lens), 1),
				})
				index++
			}
			out = append(out, s)
		}
	}
	// Interleave groups as inference-perf's shuffle does, but deterministically.
	shuffle := newRand(seed, hashString("shared-prefix-order"))
	shuffle.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func genChat(c ChatConfig, seed int64) []Session {
	system := genText(newRand(seed, hashString("chat-system")), c.SystemTokens)
	lens := newRand(seed, hashString("chat-lengths"))
	index := 0
	out := make([]Session, c.Sessions)
	for i := range out {
		s := Session{ID: fmt.Sprintf("c%d", i), Prefix: system, Accumulate: true}
		if c.SystemTokens > 0 {
			s.Group = "system"
		}
		n := max(c.Turns.sample(lens), 1)
		for t := range n {
			turn := Turn{User: userText(seed, index, "c", i, t, c.User.sample(lens)), MaxTokens: max(c.Output.sample(lens), 1)}
			index++
			if t > 0 {
				turn.Think = c.Think.sample(lens)
			}
			s.Turns = append(s.Turns, turn)
		}
		out[i] = s
	}
	return out
}

func genCoding(c CodingConfig, seed int64) []Session {
	contexts := make([]Text, c.Projects)
	for p := range contexts {
		contexts[p] = genText(newRand(seed, hashString("project"), uint64(p)), c.ContextTokens)
	}
	lens := newRand(seed, hashString("coding-lengths"))
	index := 0
	var out []Session
	// Sessions start project by project in rotation: session k of every
	// project before session k+1 of any.
	for k := range c.SessionsPerProject {
		for p := range c.Projects {
			s := Session{ID: fmt.Sprintf("proj%ds%d", p, k), Group: fmt.Sprintf("proj%d", p), Prefix: contexts[p], Accumulate: true}
			n := max(c.Turns.sample(lens), 1)
			for t := range n {
				turn := Turn{User: userText(seed, index, fmt.Sprintf("proj%ds", p), k, t, c.User.sample(lens)), MaxTokens: max(c.Output.sample(lens), 1)}
				index++
				if t > 0 {
					turn.Think = c.Think.sample(lens)
				}
				s.Turns = append(s.Turns, turn)
			}
			out = append(out, s)
		}
	}
	return out
}
