package app

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/warmpath/warmpath/extproc"
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
	errBuild := errors.New("no such policy")
	wrap := func(p extproc.Picker) extproc.Picker {
		return &namedPicker{Picker: p, name: "wrapped " + p.(*namedPicker).name}
	}
	tests := []struct {
		name    string
		eo      embedOptions
		buildOK bool
		want    string
		wantErr error
	}{
		{"zero value builds the configured policy", embedOptions{}, true, "built", nil},
		{"override replaces the policy and skips building", embedOptions{override: override}, false, "override", nil},
		{"wrap sees the built policy", embedOptions{wrap: wrap}, true, "wrapped built", nil},
		{"wrap sees the override", embedOptions{override: override, wrap: wrap}, false, "wrapped override", nil},
		{"build error is returned", embedOptions{wrap: wrap}, false, "", errBuild},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := tc.eo.picker(func() (extproc.Picker, error) {
				if !tc.buildOK {
					return nil, errBuild
				}
				return built, nil
			})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if got := p.(*namedPicker).name; got != tc.want {
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
			return ServeWithPicker(ctx, bad, &scoring.RoundRobin{}, io.Discard, io.Discard)
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
