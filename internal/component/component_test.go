package component

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestZeroOptions(t *testing.T) {
	t.Parallel()
	var o Options
	if o.Log() == nil {
		t.Fatal("Log() is nil")
	}
	o.Log().Info("discarded") // must not panic
	if d := time.Since(o.Now()()); d < 0 || d > time.Hour {
		t.Fatalf("Now() is not time.Now: %v off", d)
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"})
	if err := o.Register("test", c); err != nil {
		t.Fatalf("Register without a registerer: %v", err)
	}
}

func TestRegisterReportsConflicts(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	o := Options{Registerer: reg, Clock: func() time.Time { return time.Unix(7, 0) }}
	if got := o.Now()(); !got.Equal(time.Unix(7, 0)) {
		t.Fatalf("Now() = %v, want the injected clock", got)
	}
	mk := func() prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "dup_total", Help: "dup"})
	}
	if err := o.Register("first", mk()); err != nil {
		t.Fatal(err)
	}
	err := o.Register("second", mk())
	var already prometheus.AlreadyRegisteredError
	if !errors.As(err, &already) {
		t.Fatalf("second registration: got %v, want an AlreadyRegisteredError", err)
	}
	if want := "register second metrics: "; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
		t.Fatalf("error %q does not name the component", err)
	}
}
