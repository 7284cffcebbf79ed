package app

import (
	"context"
	"io"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/extproc"
	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/scoring"
)

// namedPicker is a Picker identified by name; it never picks.
type namedPicker struct {
	extproc.Picker
	name string
}

func TestEmbedOptionsPicker(t *testing.T) {
	t.Parallel()
	built := &namedPicker{name: "built"}
	override := &namedPicker{name: "override"}
	wrap := func(p extproc.Picker) extproc.Picker {
		return &namedPicker{Picker: p, name: "wrapped " + p.(*namedPicker).name}
	}
	tests := []struct {
		name string
		eo   embedOptions
		want string
	}{
		{"zero value uses the configured policy", embedOptions{}, "built"},
		{"override replaces the policy", embedOptions{override: override}, "override"},
		{"wrap sees the configured policy", embedOptions{wrap: wrap}, "wrapped built"},
		{"wrap sees the override", embedOptions{override: override, wrap: wrap}, "wrapped override"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.eo.picker(built).(*namedPicker).name; got != tc.want {
				t.Fatalf("picker %q, want %q", got, tc.want)
			}
		})
	}
}

func TestServeEmbeddedRefusesBadInput(t *testing.T) {
	t.Parallel()
	good := DefaultConfig()
	good.Listen = ListenConfig{ExtProc: "127.0.0.1:0", Admin: "127.0.0.1:0"}
	bad := good
	bad.Policy = "nope"
	tests := []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"nil picker", func(ctx context.Context) error { return ServeWithPicker(ctx, good, nil, io.Discard, io.Discard) }},
		{"nil wrap", func(ctx context.Context) error { return ServeWrapped(ctx, good, nil, io.Discard, io.Discard) }},
		{"invalid config", func(ctx context.Context) error {
			rr, err := scoring.New("round-robin", scoring.DefaultConfig(), scoring.Sources{}, component.Options{Registerer: prometheus.NewRegistry()})
			if err != nil {
				return nil // the case would pass for the wrong reason
			}
			return ServeWithPicker(ctx, bad, rr, io.Discard, io.Discard)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := tc.run(t.Context()); err == nil {
				t.Fatal("no error")
			}
		})
	}
}
