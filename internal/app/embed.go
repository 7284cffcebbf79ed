package app

import (
	"context"
	"errors"
	"io"

	"github.com/warmpath/warmpath/extproc"
)

// ServeWithPicker runs warmpath's servers in this process exactly as
// `warmpath serve` runs them (ext_proc gRPC, admin HTTP, the ready line on
// stdout, the log on stderr) until ctx ends, but routes with picker instead
// of cfg.Policy's picker (which is still built, and still answers POST
// /debug/lookup). Benchmark harnesses use it to run a picker that
// lives outside the product (an oracle reading a simulator's true state)
// through the same data path as the product's policies.
//
// cfg is validated first. A cancelled ctx is a clean exit (nil).
func ServeWithPicker(ctx context.Context, cfg Config, picker extproc.Picker, stdout, stderr io.Writer) error {
	if picker == nil {
		return errors.New("serve with picker: nil picker")
	}
	return serveEmbedded(ctx, cfg, embedOptions{override: picker}, stdout, stderr)
}

// ServeWrapped runs warmpath's servers in this process as `warmpath serve`
// does, with the picker built for cfg.Policy handed to wrap first; wrap
// returns the picker the server uses. Harnesses use it to observe every
// decision and outcome (prediction against measurement) without changing
// the policy. wrap is called once, before the servers start.
func ServeWrapped(ctx context.Context, cfg Config, wrap func(extproc.Picker) extproc.Picker, stdout, stderr io.Writer) error {
	if wrap == nil {
		return errors.New("serve wrapped: nil wrap function")
	}
	return serveEmbedded(ctx, cfg, embedOptions{wrap: wrap}, stdout, stderr)
}

func serveEmbedded(ctx context.Context, cfg Config, eo embedOptions, stdout, stderr io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	err := serve(ctx, cfg, eo, stdout, stderr)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// embedOptions are what an embedding caller changes in serve. The zero value
// is `warmpath serve`: the configured policy, unwrapped.
type embedOptions struct {
	override extproc.Picker
	wrap     func(extproc.Picker) extproc.Picker
}

// picker returns the picker serve hands to the ext_proc server: the
// override when set, else built, passed through wrap when set.
func (eo embedOptions) picker(built extproc.Picker) extproc.Picker {
	p := built
	if eo.override != nil {
		p = eo.override
	}
	if eo.wrap != nil {
		p = eo.wrap(p)
	}
	return p
}
