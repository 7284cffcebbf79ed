package extproc

import (
	"math"
	"strconv"
	"time"

	"github.com/warmpath/warmpath/scoring"
)

// The request headers that carry a request's own latency targets, in
// milliseconds, for the slo objective (scoring.ObjectiveSLO).
const (
	sloTTFTHeader = "x-slo-ttft-ms"
	sloTPOTHeader = "x-slo-tpot-ms"
)

// maxSLO bounds a target a header may set.
const maxSLO = time.Hour

// parseSLO reads a target header's value: a positive decimal number of
// milliseconds, at most an hour.
func parseSLO(v string) (time.Duration, bool) {
	ms, err := strconv.ParseFloat(v, 64)
	if err != nil || !(ms > 0) || math.IsInf(ms, 0) || ms > float64(maxSLO/time.Millisecond) {
		return 0, false
	}
	return time.Duration(ms * float64(time.Millisecond)), true
}

// sloHeader applies one target header to the request's targets when the
// configuration trusts them; an invalid value is ignored and counted, the
// request routed on the model's targets.
func (s *Server) sloHeader(ex *exchange, slo *scoring.SLO, name, value string) {
	if !s.cfg.SLOHeaders {
		s.m.sloHeaders.WithLabelValues("ignored").Inc()
		return
	}
	d, ok := parseSLO(value)
	if !ok {
		s.m.sloHeaders.WithLabelValues("invalid").Inc()
		ex.log.Info("latency target header ignored: want a positive number of milliseconds up to an hour", "header", name, "value", headerSafe(value))
		return
	}
	s.m.sloHeaders.WithLabelValues("ok").Inc()
	if name == sloTTFTHeader {
		slo.TTFT = d
	} else {
		slo.TPOT = d
	}
}
