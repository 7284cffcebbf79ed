package discovery

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// An Option configures an optional knob of a constructor in this package
// (NewPool, NewStatic, NewKubernetes, NewScraper). Options that do not apply
// to a constructor are ignored by it.
type Option func(*options)

type options struct {
	logger *slog.Logger
	reg    prometheus.Registerer
	now    func() time.Time
	client *http.Client
}

func buildOptions(opts []Option) options {
	o := options{
		logger: slog.New(slog.DiscardHandler),
		now:    time.Now,
	}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithLogger sets the logger. The default discards everything.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithRegisterer registers the component's metrics with reg. Without it the
// metrics are kept but not exposed.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(o *options) { o.reg = reg }
}

// WithClock replaces time.Now, for tests. Tickers still use real time.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.now = now
		}
	}
}

// WithHTTPClient sets the client used for /health and /metrics requests.
// The default is a client with its own transport; per-request timeouts come
// from the component's configuration.
func WithHTTPClient(c *http.Client) Option {
	return func(o *options) {
		if c != nil {
			o.client = c
		}
	}
}

func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 2
	t.DisableCompression = false
	return &http.Client{Transport: t}
}

// register registers cs with reg, if any, and returns the first error.
func register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
