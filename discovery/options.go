package discovery

import (
	"net/http"
)

// Every constructor of this package takes a component.Options (logger,
// metric registerer, clock; tickers still use real time) and returns an
// error when its metrics cannot be registered.

// An Option configures an optional knob of NewPool or NewScraper.
type Option func(*options)

type options struct {
	client *http.Client
}

func buildOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
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
