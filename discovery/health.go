package discovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// HealthConfig configures health checking. The zero value of each field
// selects its default.
type HealthConfig struct {
	// FailureThreshold is how many consecutive failures (5xx, or no
	// response) eject a worker. A failure to connect ejects at once.
	// Default 3.
	FailureThreshold int `yaml:"failure_threshold"`
	// BaseEjection is the first ejection period; each further ejection
	// without a success in between doubles it. Default 1 s.
	BaseEjection time.Duration `yaml:"base_ejection"`
	// MaxEjection caps the ejection period. Default 30 s.
	MaxEjection time.Duration `yaml:"max_ejection"`
	// ActiveInterval is the period of active GET /health checks. Zero
	// selects 5 s; a negative value disables active checking.
	ActiveInterval time.Duration `yaml:"active_interval"`
	// ActiveTimeout bounds one /health request. Default 2 s.
	ActiveTimeout time.Duration `yaml:"active_timeout"`
	// ActivePath is the path checked. Default "/health".
	ActivePath string `yaml:"active_path"`
}

// DefaultHealthConfig returns the defaults documented on HealthConfig,
// written out: what the discovery.health section of warmpath's
// configuration starts from.
func DefaultHealthConfig() HealthConfig {
	return HealthConfig{FailureThreshold: 3, BaseEjection: time.Second, MaxEjection: 30 * time.Second, ActiveInterval: 5 * time.Second}
}

// Validate reports every invalid field, joined. Zero fields are valid
// except where a written configuration must say something positive.
func (c HealthConfig) Validate() error {
	var errs []error
	if c.FailureThreshold < 1 {
		errs = append(errs, fmt.Errorf("failure_threshold: %d, want at least 1", c.FailureThreshold))
	}
	if c.BaseEjection <= 0 || c.MaxEjection < c.BaseEjection {
		errs = append(errs, fmt.Errorf("base_ejection, max_ejection: %v, %v, want 0 < base_ejection ≤ max_ejection", c.BaseEjection, c.MaxEjection))
	}
	if c.ActiveTimeout < 0 {
		errs = append(errs, fmt.Errorf("active_timeout: %v is negative", c.ActiveTimeout))
	}
	return errors.Join(errs...)
}

func (c HealthConfig) withDefaults() HealthConfig {
	if c.FailureThreshold <= 0 {
		c.FailureThreshold = 3
	}
	if c.BaseEjection <= 0 {
		c.BaseEjection = time.Second
	}
	if c.MaxEjection <= 0 {
		c.MaxEjection = 30 * time.Second
	}
	c.MaxEjection = max(c.MaxEjection, c.BaseEjection)
	if c.ActiveInterval == 0 {
		c.ActiveInterval = 5 * time.Second
	}
	if c.ActiveTimeout <= 0 {
		c.ActiveTimeout = 2 * time.Second
	}
	if c.ActivePath == "" {
		c.ActivePath = "/health"
	}
	return c
}

// Active check states.
const (
	activeUnknown int32 = iota // not checked yet: usable, but not proof of readiness
	activePass
	activeFail
)

// workerState is the health of one worker. Readers use the atomics without
// locking; mu serialises the read-modify-write of passive results.
type workerState struct {
	ejectedUntil atomic.Int64 // unix nanoseconds; 0 or past means not ejected
	active       atomic.Int32

	mu        sync.Mutex
	failures  int // consecutive failures since the last success or ejection
	ejections int // ejections since the last success; sets the back-off
	lastErr   string
}

func (s *workerState) ejected(now time.Time) bool {
	return now.UnixNano() < s.ejectedUntil.Load()
}

func (s *workerState) usable(now time.Time) bool {
	return !s.ejected(now) && s.active.Load() != activeFail
}

// ReportResult records the outcome of a request sent to worker, from the
// response path: status is the HTTP status (0 when no response arrived) and
// err the reason no response arrived (nil when one did). Its argument order
// matches extproc.HealthReporter.
//
// A failure is a 5xx status or a non-nil err. A failure to connect
// (connection refused or any other dial error, see IsDialError) ejects the
// worker at once; FailureThreshold consecutive other failures eject it,
// and any failure that does not eject makes Run's active checker (when
// enabled) check every worker at once, which ejects a worker that refuses
// connections (Envoy reports a refused upstream as a plain 503).
// The ejection lasts BaseEjection, doubling with each further ejection up
// to MaxEjection; after it ends the worker gets requests again and a single
// further failure ejects it anew. Any response below 500 clears the
// failure history. context.Canceled (the client went away) is not the
// worker's fault and is ignored, as are unknown workers. Callers should pass
// context.Canceled, not a generic error, when the client left first.
func (p *Pool) ReportResult(worker string, status int, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	s := p.snap.Load()
	i, ok := s.byName[worker]
	if !ok {
		return
	}
	st := s.states[i]
	now := p.now()
	st.mu.Lock()
	if err == nil && status > 0 && status < 500 {
		st.failures, st.ejections = 0, 0
		st.mu.Unlock()
		return
	}
	st.failures++
	reason := fmt.Sprintf("status %d", status)
	if err != nil {
		reason = err.Error()
	}
	st.lastErr = reason
	eject := IsDialError(err) || st.failures >= p.health.FailureThreshold || st.ejections > 0
	var d time.Duration
	if eject && !st.ejected(now) {
		st.ejections++
		st.failures = 0
		d = p.health.BaseEjection << min(st.ejections-1, 30)
		if d <= 0 || d > p.health.MaxEjection {
			d = p.health.MaxEjection
		}
		st.ejectedUntil.Store(now.Add(d).UnixNano())
	}
	st.mu.Unlock()
	if d > 0 {
		p.ejections.Inc()
		p.log.Warn("discovery: worker ejected", "worker", worker, "for", d, "reason", reason)
		return
	}
	if !eject {
		// Behind Envoy a refused connection arrives as a 503 local reply,
		// indistinguishable here from an engine's 503: let the active
		// checker look now, so a dead worker is ejected after one failed
		// request rather than FailureThreshold of them.
		select {
		case p.suspect <- struct{}{}:
		default: // a round is already due
		}
	}
}

// IsDialError reports whether err is a failure to open a connection
// (refused, unreachable, DNS or dial timeout), as opposed to a failure on
// an established one.
func IsDialError(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

func (p *Pool) runActive(ctx context.Context) error {
	t := time.NewTicker(p.health.ActiveInterval)
	defer t.Stop()
	watch := p.Watch(ctx)
	for {
		p.CheckNow(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-watch: // a new set: check newcomers at once
		case <-p.suspect: // the response path saw a failure
		}
	}
}

// CheckNow runs one round of active health checks on every worker of the
// current set, concurrently, and returns when all are done. A worker that
// fails is unusable until it passes again; one whose connection is refused
// is also ejected, as ReportResult ejects on a dial error. Run calls it
// every ActiveInterval, and at once after ReportResult records a failure
// that did not eject; it is exported for tests and tools.
func (p *Pool) CheckNow(ctx context.Context) {
	s := p.snap.Load()
	var wg sync.WaitGroup
	for i, w := range s.workers {
		wg.Go(func() {
			err := p.check(ctx, clientFor(&w, p.client, p.h2c), w.Address)
			if ctx.Err() != nil {
				return
			}
			st := s.states[i]
			if err != nil {
				p.checks.WithLabelValues("fail").Inc()
				if IsDialError(err) {
					p.ReportResult(w.Name, 0, err) // nothing listens: eject, as on the response path
				}
				if st.active.Swap(activeFail) != activeFail {
					p.log.Warn("discovery: worker failed its health check", "worker", w.Name, "err", err)
				}
				return
			}
			p.checks.WithLabelValues("pass").Inc()
			if st.active.Swap(activePass) == activeFail {
				// It was down (its health endpoint failed) and is back, a
				// restarted engine say: the ejections its death earned,
				// which doubled with each failed check, end now rather
				// than keep a healthy worker out for up to MaxEjection.
				// A worker ejected for failing requests while its health
				// endpoint passed is not released here.
				st.mu.Lock()
				st.failures, st.ejections = 0, 0
				st.ejectedUntil.Store(0)
				st.mu.Unlock()
				p.log.Info("discovery: worker passed its health check again", "worker", w.Name)
			}
		})
	}
	wg.Wait()
}

func (p *Pool) check(ctx context.Context, client *http.Client, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, p.health.ActiveTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+p.health.ActivePath, nil)
	if err != nil {
		return fmt.Errorf("build health request: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("health request: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health status %d", resp.StatusCode)
	}
	return nil
}

// WorkerHealth is the health of one worker, as shown in debug views.
type WorkerHealth struct {
	// Usable reports whether the worker may get new requests now.
	Usable bool `json:"usable"`
	// EjectedUntil is when the current passive ejection ends; zero when
	// the worker is not ejected.
	EjectedUntil time.Time `json:"ejected_until,omitzero"`
	// Active is the last active check result: "unknown", "pass" or "fail".
	Active string `json:"active"`
	// LastFailure describes the last failure reported by the response path.
	LastFailure string `json:"last_failure,omitempty"`
}

// Health returns the health of the named worker; ok is false when the
// worker is not in the current set.
func (p *Pool) Health(worker string) (h WorkerHealth, ok bool) {
	s := p.snap.Load()
	i, ok := s.byName[worker]
	if !ok {
		return WorkerHealth{}, false
	}
	st := s.states[i]
	now := p.now()
	h.Usable = st.usable(now)
	if st.ejected(now) {
		h.EjectedUntil = time.Unix(0, st.ejectedUntil.Load())
	}
	h.Active = [...]string{"unknown", "pass", "fail"}[st.active.Load()]
	st.mu.Lock()
	h.LastFailure = st.lastErr
	st.mu.Unlock()
	return h, true
}
