package discovery

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/internal/component"
)

// Static is a Source that reads the worker list from a file and reloads it
// when the file's content changes. It does not parse the file itself: the
// application passes the loader that decodes its configuration.
//
// The file is polled: every interval Static reads it and compares a
// SHA-256 of its content with the last one it loaded, so it follows
// in-place writes, editors that write a new file and rename it over the
// old one, and Kubernetes ConfigMap symlink swaps alike. A file that
// fails to load or yields an invalid set is rejected with a log line
// naming the problem, and the previous set stays in force.
type Static struct {
	path     string
	load     func(path string) ([]Worker, error)
	interval time.Duration
	log      *slog.Logger
	reloads  *prometheus.CounterVec
}

// NewStatic returns a static source for the file at path. load decodes the
// file into workers; it is called with path on start and after each change.
// interval is the polling period; zero selects 1 s. Options: WithLogger,
// WithRegisterer.
func NewStatic(path string, load func(path string) ([]Worker, error), interval time.Duration, co component.Options) (*Static, error) {
	if load == nil {
		return nil, fmt.Errorf("static discovery: nil loader")
	}
	if interval <= 0 {
		interval = time.Second
	}
	s := &Static{
		path:     path,
		load:     load,
		interval: interval,
		log:      co.Log(),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_discovery_static_reloads_total",
			Help: "Reloads of the static worker file, by result (applied, rejected, unreadable).",
		}, []string{"result"}),
	}
	for _, r := range []string{"applied", "rejected", "unreadable"} {
		s.reloads.WithLabelValues(r)
	}
	if err := co.Register("static discovery", s.reloads); err != nil {
		return nil, fmt.Errorf("static discovery: %w", err)
	}
	return s, nil
}

// Run loads the file, publishes its workers, then polls for changes until
// ctx is done. It returns an error only when the first load fails.
func (s *Static) Run(ctx context.Context, out *Updates) error {
	sum, err := fileSum(s.path)
	if err != nil {
		return fmt.Errorf("static discovery: %w", err)
	}
	ws, err := s.loadValid()
	if err != nil {
		return fmt.Errorf("static discovery: %w", err)
	}
	s.reloads.WithLabelValues("applied").Inc()
	out.Publish(ws)
	s.log.Info("discovery: static workers loaded", "path", s.path, "workers", len(ws))

	seen := sum // content last tried, good or bad
	var lastReadErr string
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		sum, err := fileSum(s.path)
		if err != nil {
			// Mid rename or deleted: keep the set, say so once per distinct error.
			s.reloads.WithLabelValues("unreadable").Inc()
			if msg := err.Error(); msg != lastReadErr {
				lastReadErr = msg
				s.log.Warn("discovery: static worker file unreadable, keeping the current set", "path", s.path, "err", err)
			}
			continue
		}
		lastReadErr = ""
		if sum == seen {
			continue
		}
		seen = sum
		ws, err := s.loadValid()
		if err != nil {
			s.reloads.WithLabelValues("rejected").Inc()
			s.log.Error("discovery: static worker file rejected, keeping the current set", "path", s.path, "err", err)
			continue
		}
		s.reloads.WithLabelValues("applied").Inc()
		s.log.Info("discovery: static workers reloaded", "path", s.path, "workers", len(ws))
		out.Publish(ws)
	}
}

func (s *Static) loadValid() ([]Worker, error) {
	ws, err := s.load(s.path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", s.path, err)
	}
	if err := ValidateWorkers(ws); err != nil {
		return nil, fmt.Errorf("load %s: %w", s.path, err)
	}
	return ws, nil
}

func fileSum(path string) ([sha256.Size]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("read worker file: %w", err)
	}
	return sha256.Sum256(b), nil
}
