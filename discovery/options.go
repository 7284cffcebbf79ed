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

// h2cClient returns c speaking HTTP/2 over cleartext with prior knowledge,
// for workers whose Protocol is ProtocolH2C: a clone of c with its
// transport's protocols set to unencrypted HTTP/2 alone. A client whose
// transport is not an *http.Transport is returned as it is.
func h2cClient(c *http.Client) *http.Client {
	var t *http.Transport
	switch rt := c.Transport.(type) {
	case nil:
		t = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		t = rt.Clone()
	default:
		return c
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	t.Protocols = &p
	h := *c
	h.Transport = t
	return &h
}

// clientFor picks, of the two clients, the one that speaks w's protocol.
func clientFor(w *Worker, http1, h2c *http.Client) *http.Client {
	if w.Protocol == ProtocolH2C {
		return h2c
	}
	return http1
}
