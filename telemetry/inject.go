package telemetry

import (
	"encoding/hex"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
)

// InjectTraceContext writes sc as W3C trace-context headers (traceparent,
// and tracestate when sc has one) and, when bag has members, the baggage
// header, through set: what the Provider's propagator writes, without
// building a context for it. An invalid sc writes nothing.
func InjectTraceContext(sc trace.SpanContext, bag baggage.Baggage, set func(key, value string)) {
	if !sc.IsValid() {
		return
	}
	// "00-" trace id "-" span id "-" flags: 2+1+32+1+16+1+2 bytes.
	var b [55]byte
	b[0], b[1], b[2] = '0', '0', '-'
	tid, sid := sc.TraceID(), sc.SpanID()
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags() & trace.FlagsSampled)})
	set("traceparent", string(b[:]))
	if ts := sc.TraceState(); ts.Len() > 0 {
		set("tracestate", ts.String())
	}
	if bag.Len() > 0 {
		set("baggage", bag.String())
	}
}
