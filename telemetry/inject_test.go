package telemetry

import (
	"context"
	"maps"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TestInjectTraceContextMatchesPropagator checks InjectTraceContext against
// the OpenTelemetry propagator it stands in for.
func TestInjectTraceContextMatchesPropagator(t *testing.T) {
	t.Parallel()
	ts, _ := trace.ParseTraceState("vendor=a,other=b")
	bag, _ := baggage.Parse("tenant=acme,class=gold")
	tid := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	sid := trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
	for _, tc := range []struct {
		name  string
		flags trace.TraceFlags
		ts    trace.TraceState
		bag   baggage.Baggage
	}{
		{name: "sampled", flags: trace.FlagsSampled},
		{name: "not sampled", flags: 0},
		{name: "trace state and baggage", flags: trace.FlagsSampled, ts: ts, bag: bag},
	} {
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: tc.flags, TraceState: tc.ts})
		got := map[string]string{}
		InjectTraceContext(sc, tc.bag, func(k, v string) { got[k] = v })
		want := propagation.MapCarrier{}
		ctx := baggage.ContextWithBaggage(trace.ContextWithSpanContext(context.Background(), sc), tc.bag)
		newPropagator().Inject(ctx, want)
		// Baggage members have no order: compare them parsed.
		gotBag, wantBag := got["baggage"], want["baggage"]
		delete(got, "baggage")
		delete(want, "baggage")
		if !maps.Equal(got, map[string]string(want)) || !sameBaggage(t, gotBag, wantBag) {
			t.Errorf("%s: wrote %v baggage %q, the propagator writes %v baggage %q", tc.name, got, gotBag, want, wantBag)
		}
	}
	var none []string
	InjectTraceContext(trace.SpanContext{}, baggage.Baggage{}, func(k, _ string) { none = append(none, k) })
	if len(none) != 0 {
		t.Errorf("an invalid span context wrote %v", none)
	}
}

// sameBaggage reports whether two baggage headers hold the same members.
func sameBaggage(t *testing.T, a, b string) bool {
	t.Helper()
	pa, err := baggage.Parse(a)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := baggage.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if pa.Len() != pb.Len() {
		return false
	}
	for _, m := range pa.Members() {
		if pb.Member(m.Key()).Value() != m.Value() {
			return false
		}
	}
	return true
}
