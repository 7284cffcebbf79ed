package vllmsim

import (
	"context"
	"errors"
	"fmt"

	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/warmpath/warmpath/discovery"
)

// PromptTokenizer turns request bodies into prompt token ids exactly as
// the served model's tokenizer and chat template do, and token ids back
// into text. The simulator uses it for text prompts; token-id prompts
// need none. Implementations must be safe for concurrent use.
type PromptTokenizer interface {
	// ChatPrompt renders an OpenAI chat-completions request body with the
	// chat template and returns its token ids.
	ChatPrompt(body []byte) ([]uint32, error)
	// AnthropicPrompt does the same for an Anthropic messages body.
	AnthropicPrompt(body []byte) ([]uint32, error)
	// TextPrompt tokenizes a completion prompt.
	TextPrompt(text string, addSpecialTokens bool) ([]uint32, error)
	// Decode returns the text of token ids.
	Decode(ids []uint32) (string, error)
}

// Option configures a Server.
type Option func(*Server)

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithRegistry sets the registry the metrics are registered in and served
// from on /metrics (default: a new registry per server).
func WithRegistry(r *prometheus.Registry) Option { return func(s *Server) { s.reg = r } }

// WithTokenizer sets the tokenizer for text prompts (default: none; text
// prompts are then refused as vLLM refuses them without a tokenizer).
func WithTokenizer(t PromptTokenizer) Option { return func(s *Server) { s.tok = t } }

// WithListener serves HTTP on l instead of listening on Config.Host:Port.
func WithListener(l net.Listener) Option { return func(s *Server) { s.ln = l } }

// Server is a simulated `vllm serve`: the HTTP API, DataParallelSize
// engines each running on the scaled clock, and their KV-event
// publishers. NewServer binds every socket, so addresses can be read back
// before Run; Run serves until its context ends. Methods are safe for
// concurrent use.
type Server struct {
	cfg   Config
	log   *slog.Logger
	reg   *prometheus.Registry
	met   *metrics
	tok   PromptTokenizer
	ln    net.Listener
	ranks []*rank
	pubs  []*publisher
	model string

	faults atomic.Pointer[Faults]
	rngMu  sync.Mutex
	rng    *rand.Rand
	ids    atomic.Uint64
	ran    atomic.Bool
}

// NewServer validates cfg, creates the engines and binds the HTTP
// listener and the ZMQ sockets. Call Run to serve, or Close to release
// the sockets without serving.
func NewServer(cfg Config, opts ...Option) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("vllm-sim config: %w", err)
	}
	s := &Server{cfg: cfg, model: cfg.ServedModelNames[0], rng: rand.New(rand.NewPCG(cfg.Engine.Seed, 0x5eed))}
	for _, o := range opts {
		o(s)
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
	}
	f := cfg.Faults
	s.faults.Store(&f)
	var err error
	if s.met, err = newMetrics(s.reg); err != nil {
		return nil, fmt.Errorf("vllm-sim metrics: %w", err)
	}
	clock := scaledClock{start: time.Now(), scale: cfg.TimeScale}
	for i := range cfg.DataParallelSize {
		ecfg := cfg.Engine
		ecfg.Rank = i
		ecfg.Seed = cfg.Engine.Seed + uint64(i)
		eng, err := NewEngine(ecfg)
		if err != nil {
			s.Close()
			return nil, err
		}
		met := s.met.rank(s.model, i, ecfg)
		var pub *publisher
		if cfg.KVEvents.Enabled() {
			pub, err = newPublisher(cfg.KVEvents, i, publisherOptions{
				wire: cfg.Wire, bytesHashes: cfg.BytesHashes, dropFraction: cfg.KVEventsDropFraction,
				restartEvery: cfg.KVEventsRestartEvery, seed: cfg.Engine.Seed,
			}, s.log.With("engine", i), met)
			if err != nil {
				s.Close()
				return nil, err
			}
			s.pubs = append(s.pubs, pub)
		}
		s.ranks = append(s.ranks, newRank(i, eng, clock, pub, met, s.faults.Load))
	}
	if s.ln == nil {
		s.ln, err = net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("vllm-sim listen: %w", err)
		}
	}
	return s, nil
}

// Close releases the sockets of a server whose Run was never called.
func (s *Server) Close() {
	if s.ran.Load() {
		return
	}
	for _, p := range s.pubs {
		p.close()
	}
	if s.ln != nil {
		s.ln.Close()
	}
}

// Config returns the server's configuration (engine parameters included),
// for harnesses that model the workers they drive.
func (s *Server) Config() Config { return s.cfg }

// HTTPAddr returns the host:port the HTTP API listens on.
func (s *Server) HTTPAddr() string { return s.ln.Addr().String() }

// KVEventsEndpoints returns the PUB endpoint of each data-parallel rank
// (nil when events are off).
func (s *Server) KVEventsEndpoints() []string {
	var out []string
	for _, p := range s.pubs {
		out = append(out, p.pubEndpoint)
	}
	return out
}

// ReplayEndpoints returns the ROUTER replay endpoint of each rank (nil
// when replay is off).
func (s *Server) ReplayEndpoints() []string {
	var out []string
	for _, p := range s.pubs {
		if p.replayEndpoint != "" {
			out = append(out, p.replayEndpoint)
		}
	}
	return out
}

// Worker describes the server as a member of a warmpath worker pool.
func (s *Server) Worker(name string) discovery.Worker {
	w := discovery.Worker{Name: name, Address: s.HTTPAddr(), Models: append([]string(nil), s.cfg.ServedModelNames...),
		DataParallelSize: s.cfg.DataParallelSize}
	if ev := s.KVEventsEndpoints(); len(ev) > 0 {
		w.KVEvents = ev[0]
	}
	if rep := s.ReplayEndpoints(); len(rep) > 0 {
		w.KVReplay = rep[0]
	}
	return w
}

// Registry returns the registry holding the server's metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// State returns the true queue and cache state of every rank.
func (s *Server) State() []RankState {
	out := make([]RankState, len(s.ranks))
	for i, r := range s.ranks {
		out[i] = r.state()
	}
	return out
}

// CachedPrefix returns the prefix-cache hit, in tokens, that a request
// with this prompt and cache salt would get on rank now.
func (s *Server) CachedPrefix(rank int, prompt []uint32, salt string) int {
	return s.ranks[rank].cachedPrefix(prompt, salt)
}

// CachedHashes returns the 64-bit wire hashes of every block cached on
// rank now, in no particular order.
func (s *Server) CachedHashes(rank int) []uint64 {
	r := s.ranks[rank]
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.eng.CachedHashes()
}

// SetFaults replaces the injected faults for requests arriving from now on.
func (s *Server) SetFaults(f Faults) { s.faults.Store(&f) }

// ResetPrefixCache resets every rank's prefix cache, reporting whether all
// succeeded (a rank with running requests refuses, as vLLM does).
func (s *Server) ResetPrefixCache(ctx context.Context) bool {
	ok := true
	for _, r := range s.ranks {
		ok = r.resetPrefixCache(ctx) && ok
	}
	return ok
}

// RestartKVEvents makes every publisher start again at sequence 0 with an
// empty replay ring, as a restarted engine's publisher would.
func (s *Server) RestartKVEvents(ctx context.Context) {
	for _, p := range s.pubs {
		p.restart(ctx)
	}
}

// Run serves until ctx ends, then shuts the HTTP server down and stops
// the engines and publishers. It returns nil on a clean shutdown.
func (s *Server) Run(ctx context.Context) error {
	if !s.ran.CompareAndSwap(false, true) {
		return errors.New("vllm-sim: Run called twice")
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, r := range s.ranks {
		g.Go(func() error { return r.run(gctx) })
	}
	for _, p := range s.pubs {
		g.Go(func() error { return p.run(gctx) })
	}
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return gctx }}
	g.Go(func() error {
		if err := hs.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("vllm-sim http: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil {
			hs.Close()
		}
		return nil
	})
	return g.Wait()
}

// Handler returns the HTTP API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v1/models", s.models)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST /reset_prefix_cache", func(w http.ResponseWriter, r *http.Request) {
		if !s.ResetPrefixCache(r.Context()) {
			s.log.Warn("failed to reset prefix cache: some blocks are not freed yet")
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("POST /tokenize", s.tokenize)
	mux.HandleFunc("POST /detokenize", s.detokenize)
	mux.HandleFunc("POST /v1/completions", s.completions)
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("POST /v1/messages", s.messages)
	return mux
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	type card struct {
		ID          string  `json:"id"`
		Object      string  `json:"object"`
		Created     int64   `json:"created"`
		OwnedBy     string  `json:"owned_by"`
		Root        string  `json:"root"`
		Parent      *string `json:"parent"`
		MaxModelLen int     `json:"max_model_len"`
	}
	list := struct {
		Object string `json:"object"`
		Data   []card `json:"data"`
	}{Object: "list"}
	for _, m := range s.cfg.ServedModelNames {
		list.Data = append(list.Data, card{ID: m, Object: "model", Created: time.Now().Unix(), OwnedBy: "vllm", Root: m, MaxModelLen: s.cfg.Engine.MaxModelLen})
	}
	writeJSON(w, http.StatusOK, list)
}

// pickRank returns the rank with the lowest 4·waiting + running, as vLLM's
// data-parallel load balancer scores engines.
func (s *Server) pickRank() *rank {
	best, bestLoad := s.ranks[0], -1
	for _, r := range s.ranks {
		if l := r.load(); bestLoad < 0 || l < bestLoad {
			best, bestLoad = r, l
		}
	}
	return best
}

// fault draws the fault for one request.
type fault int

const (
	faultNone fault = iota
	faultError
	faultHang
	faultDie
)

func (s *Server) drawFault() (fault, time.Duration, int) {
	f := s.faults.Load()
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	var spike time.Duration
	if f.SpikeFraction > 0 && s.rng.Float64() < f.SpikeFraction {
		spike = f.Spike
	}
	switch {
	case f.ErrorFraction > 0 && s.rng.Float64() < f.ErrorFraction:
		return faultError, spike, 0
	case f.HangFraction > 0 && s.rng.Float64() < f.HangFraction:
		return faultHang, spike, 0
	case f.DieFraction > 0 && s.rng.Float64() < f.DieFraction:
		return faultDie, spike, f.DieAfterTokens
	}
	return faultNone, spike, 0
}
