package extproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/warmpath/warmpath/scoring"
)

// The routing room: one request's way through warmpath. parse (the body,
// once) → candidates (the pool) → pick (the Picker) → the assignment →
// watching the response → the end, exactly once: completed, aborted or
// expired, with the outcome handed back to the Picker and observed.

// routing is the request as the router sees it and what became of it.
type routing struct {
	req scoring.Request
	// input is the request's messages (or prompt) JSON, for span capture.
	input []byte
	dec   *scoring.Decision
	// routedAt is when the assignment began. ttl expires it AssignmentTTL
	// later, on the timer's goroutine, unless it ended first; expiredDone
	// is closed when that expiry has run. ended is set by whichever ends
	// the assignment, once. dec, routedAt and the exchange's logger do not
	// change once the timer is armed, so the expiry reads nothing else.
	routedAt    time.Time
	ttl         *time.Timer
	expiredDone chan struct{}
	ended       atomic.Bool
	watch       *watcher
	status      int    // upstream response status, 0 before one
	code        string // final status code for the requests metric
	// toldFirst is set once the picker heard of the first token.
	toldFirst bool
}

// stopTTL disarms the assignment's TTL, waiting for its expiry to finish
// when it already fired.
func (r *routing) stopTTL() {
	if r.ttl == nil {
		return
	}
	if !r.ttl.Stop() {
		<-r.expiredDone
	}
	r.ttl = nil
}

// decide parses the body, finds the candidates and asks the picker. It
// returns the routing mutation, or a rejection for the client.
func (s *Server) decide(ctx context.Context, ex *exchange) (*extprocv3.CommonResponse, *structpb.Struct, *rejection) {
	start := s.now()
	rt := &ex.route
	r := &rt.req
	if r.API != scoring.APIOther {
		def := ""
		if ms := s.pool.Models(); len(ms) == 1 {
			def = ms[0]
		}
		input, err := parseBody(r, ex.proto.body, def)
		if err != nil {
			return nil, nil, &rejection{"invalid_request", 400, err.Error()}
		}
		rt.input = input
	}
	ws, known := s.pool.Candidates(r.Model)
	if !known {
		served := slices.Sorted(slices.Values(s.pool.Models()))
		return nil, nil, &rejection{"unknown_model", 404, fmt.Sprintf(
			"The model `%s` does not exist. Served models: %s.", r.Model, strings.Join(served, ", "))}
	}
	if len(ws) == 0 {
		what := "any model"
		if r.Model != "" {
			what = "model `" + r.Model + "`"
		}
		return nil, nil, &rejection{"no_healthy_worker", 503, "No healthy worker serves " + what + " right now; retry later."}
	}
	dec, err := s.picker.Pick(ctx, r, ws)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, nil, &rejection{"canceled", 503, "request canceled while routing"}
		}
		return nil, nil, &rejection{"picker_error", 503, "routing failed: " + err.Error()}
	}
	rt.dec = dec
	rt.routedAt = s.now()
	s.inFlight.Add(1)
	s.m.inFlight.WithLabelValues(dec.Worker).Inc()
	rt.expiredDone = make(chan struct{})
	rt.ttl = time.AfterFunc(s.cfg.AssignmentTTL, func() {
		defer close(rt.expiredDone)
		s.expire(ex)
	})
	s.m.decision.Observe(s.now().Sub(start).Seconds())
	if ex.log.Enabled(ctx, slog.LevelDebug) { // the arguments would allocate even when not logged
		ex.log.Debug("routed", "model", r.Model, "worker", dec.Worker, "policy", dec.Policy, "mode", dec.Mode, "reason", dec.Reason)
	}
	cr, md := routeMutation(s.cfg.DestinationHeader, s.cfg.metadataNamespace(), dec.Address)
	s.observeDecision(ex, cr)
	return cr, md, nil
}

// watch hands one response chunk to the watcher, and tells the picker when
// the first content token went by.
func (s *Server) watch(ex *exchange, chunk []byte) {
	rt := &ex.route
	rt.watch.write(chunk, s.now())
	if !rt.toldFirst && rt.dec != nil && !rt.ended.Load() && !rt.watch.firstToken.IsZero() {
		rt.toldFirst = true
		if ft, ok := s.picker.(FirstTokenObserver); ok {
			ft.FirstToken(rt.dec)
		}
	}
	s.m.responseChunks.Inc()
	s.m.chunkBytes.Add(float64(len(chunk)))
}

// endAssignment ends the request's assignment, if any is live, with what
// the watcher saw, and records the outcome on the span.
func (s *Server) endAssignment(ex *exchange, end scoring.End) {
	rt := &ex.route
	now := s.now()
	o := scoring.Outcome{End: end, HTTPStatus: rt.status, PromptTokens: -1, CompletionTokens: -1, CachedTokens: -1}
	if w := rt.watch; w != nil {
		w.finish(now)
		o.PromptTokens, o.CompletionTokens, o.CachedTokens = w.usage.PromptTokens, w.usage.CompletionTokens, w.usage.CachedTokens
		if w.errMsg != "" {
			o.Error = w.errMsg
			s.m.watchEvents.WithLabelValues("error_event").Inc()
			if o.End == scoring.EndCompleted {
				o.End = scoring.EndAborted
			}
		}
		if w.badEvents > 0 {
			s.m.watchEvents.WithLabelValues("unparsable_event").Add(float64(w.badEvents))
		}
		if w.truncated {
			s.m.watchEvents.WithLabelValues("body_over_limit").Inc()
		}
		if rt.dec != nil && !w.firstToken.IsZero() {
			o.TTFT = w.firstToken.Sub(rt.routedAt)
			o.Decode = w.lastToken.Sub(w.firstToken)
			s.m.ttft.Observe(o.TTFT.Seconds())
		}
	}
	if o.Error == "" && rt.status >= 400 {
		o.Error = "upstream status " + strconv.Itoa(rt.status)
	}
	if rt.status != 0 {
		rt.code = strconv.Itoa(rt.status)
	}
	rt.stopTTL()
	if rt.dec != nil && rt.ended.CompareAndSwap(false, true) {
		o.Duration = max(now.Sub(rt.routedAt), time.Nanosecond)
		s.ended(ex, o)
	}
	ex.trace.ended(rt.dec, o, rt.watch, rt.req.Stream, now)
}

// expire ends an assignment that outlived AssignmentTTL, on the timer's
// goroutine. The stream goes on, passing the response through; only the
// reservation and the outcome end. What the response showed so far is the
// stream's and is not read: the outcome says only that it expired.
func (s *Server) expire(ex *exchange) {
	rt := &ex.route
	if !rt.ended.CompareAndSwap(false, true) {
		return
	}
	ex.log.Info("assignment expired: no end of the response within the assignment TTL",
		"worker", rt.dec.Worker, "ttl", s.cfg.AssignmentTTL)
	s.ended(ex, scoring.Outcome{End: scoring.EndExpired, Duration: s.now().Sub(rt.routedAt),
		PromptTokens: -1, CompletionTokens: -1, CachedTokens: -1})
}

// ended is the one end of an assignment, by whoever set rt.ended: metrics,
// health and the picker's feedback. It reads only what does not change
// after the pick.
func (s *Server) ended(ex *exchange, o scoring.Outcome) {
	rt := &ex.route
	s.inFlight.Add(-1)
	s.m.ended.WithLabelValues(string(o.End)).Inc()
	s.m.inFlight.WithLabelValues(rt.dec.Worker).Dec()
	s.om.outcome(rt.dec, o)
	// An assignment that ended before any response (the client left, or
	// the upstream never answered) says nothing certain about the worker;
	// the active health check judges those.
	if s.health != nil && o.HTTPStatus != 0 {
		s.health.ReportResult(rt.dec.Worker, o.HTTPStatus, nil)
	}
	s.picker.Done(rt.dec, o)
}

// cleanup runs when the stream ends, however it ends: an unfinished
// assignment is aborted and the request is counted once.
func (s *Server) cleanup(ex *exchange) {
	if !ex.proto.gotReqHeaders {
		return
	}
	if !ex.proto.respEnded {
		s.endAssignment(ex, scoring.EndAborted)
	}
	ex.route.stopTTL()
	code := ex.route.code
	if code == "" {
		code = "0" // ended before any response: client gone or upstream unreachable
	}
	model := ex.route.req.Model
	if model != "" && !slices.Contains(s.pool.Models(), model) {
		model = "unknown"
	}
	s.observeFinal(ex, code, model)
	s.m.requests.WithLabelValues(string(ex.route.req.API), model, code).Inc()
}
