// Package component holds what every warmpath constructor takes besides its
// own configuration and collaborators: where it logs, where it registers
// its metrics and which clock it reads. Main builds one Options value and
// hands it down; tests build their own.
//
// The convention, for every package: a constructor takes its Config, the
// collaborators it consumes (small interfaces) and an Options, and returns
// an error when its metrics cannot be registered. Nothing registers into
// Prometheus' global registry and nothing panics on a registration
// conflict.
package component

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Options are a component's logger, metric registry and clock. The zero
// value is usable: it discards logs, keeps metrics without exporting them
// and reads time.Now.
type Options struct {
	// Logger receives the component's logs; nil discards them. A component
	// adds its own attributes (With) and never replaces the handler.
	Logger *slog.Logger
	// Registerer receives the component's metrics; nil keeps them
	// unexported, which tests and read-only tools use.
	Registerer prometheus.Registerer
	// Clock replaces time.Now, for tests; nil means time.Now.
	Clock func() time.Time
}

// Log returns the logger, never nil.
func (o Options) Log() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

// Now returns the clock, never nil.
func (o Options) Now() func() time.Time {
	if o.Clock == nil {
		return time.Now
	}
	return o.Clock
}

// Register registers every collector with the Registerer, or does nothing
// when there is none. It stops at the first failure and returns it,
// wrapped with what (the component's name): a second component
// registering the same series, or a series registered twice, is a wiring
// error the caller returns, never a panic.
func (o Options) Register(what string, cs ...prometheus.Collector) error {
	if o.Registerer == nil {
		return nil
	}
	for _, c := range cs {
		if err := o.Registerer.Register(c); err != nil {
			return fmt.Errorf("register %s metrics: %w", what, err)
		}
	}
	return nil
}
