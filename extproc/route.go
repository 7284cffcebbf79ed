package extproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/warmpath/warmpath/discovery"
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
	watchHeld   holding // the watcher's response body's share of the buffer budget
	status      int     // upstream response status, 0 before one
	code        string  // final status code for the requests metric
	// toldFirst is set once the picker heard of the first token.
	toldFirst bool

	// subset and selection restrict the candidates: the proxy's subset
	// hint, and the test selection header (conformance hooks only).
	subset, selection endpointSet
	// served is the endpoint the proxy reported as the one that served the
	// request, "" before or without a report.
	served string
	// attributed is the candidate the assignment belongs to: the chosen
	// one, until the proxy reports that another of the decision's
	// candidates served (a fallback, after a retry). attrMu guards it: the
	// TTL timer reads it when it ends the assignment.
	attrMu     sync.Mutex
	attributed scoring.Candidate
}

// attributedTo returns the candidate the assignment belongs to.
func (r *routing) attributedTo() scoring.Candidate {
	r.attrMu.Lock()
	defer r.attrMu.Unlock()
	return r.attributed
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
// returns the routing mutation, or a rejection for the client. In a
// runtime execution trace (/debug/pprof/trace) it is the region
// "warmpath.decide", so a slow decision's time can be split into running,
// waiting for a processor and blocked.
func (s *Server) decide(ctx context.Context, ex *exchange) (*extprocv3.CommonResponse, *structpb.Struct, *rejection) {
	defer trace.StartRegion(ctx, "warmpath.decide").End()
	start := s.now()
	rt := &ex.route
	r := &rt.req
	if r.API != scoring.APIOther {
		def := ""
		if ms := s.pool.Models(); len(ms) == 1 {
			def = ms[0]
		}
		input, err := parseBody(r, ex.proto.body, def, s.bodies)
		if err != nil {
			return nil, nil, &rejection{"invalid_request", 400, err.Error()}
		}
		rt.input = input
	}
	ws, known := s.pool.Candidates(r.Model)
	if !known {
		served := slices.Sorted(slices.Values(s.pool.Models()))
		return nil, nil, &rejection{"unknown_model", 404, fmt.Sprintf(
			"The model `%s` does not exist. Served models: %s.", clip(r.Model), strings.Join(served, ", "))}
	}
	if len(ws) == 0 {
		what := "any model"
		if r.Model != "" {
			what = "model `" + clip(r.Model) + "`"
		}
		return nil, nil, &rejection{"no_healthy_worker", 503, "No healthy worker serves " + what + " right now; retry later."}
	}
	ws, rej := restrict(ws, &rt.subset, &rt.selection)
	if rej != nil {
		return nil, nil, rej
	}
	dec, err := s.picker.Pick(ctx, r, ws)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, nil, &rejection{"canceled", 503, "request canceled while routing"}
		}
		return nil, nil, &rejection{"picker_error", 503, "routing failed: " + err.Error()}
	}
	if s.cfg.ShedTTFT > 0 && sheds(dec, s.cfg.ShedTTFT) {
		// Never an assignment: the reservation Pick made is released at once.
		s.picker.Done(dec, scoring.Outcome{End: scoring.EndAborted, PromptTokens: -1, CompletionTokens: -1, CachedTokens: -1, Error: "shed"})
		return nil, nil, &rejection{"shed", 429, fmt.Sprintf(
			"Every worker's predicted time to first token exceeds %s; the request was shed. Retry later.", s.cfg.ShedTTFT)}
	}
	rt.dec = dec
	rt.attributed = dec.Chosen
	rt.attributed.Worker, rt.attributed.Address = dec.Worker, dec.Address
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
	var scores *structpb.Value
	if s.cfg.EndpointScores {
		scores = scoresValue(dec)
	}
	dest := dec.Address
	if s.cfg.Fallbacks > 0 {
		dest = strings.Join(destinations(dec, s.cfg.Fallbacks), ",")
	}
	cr, md := routeMutation(s.cfg.DestinationHeader, s.cfg.metadataNamespace(), dest, scores)
	s.observeDecision(ex, cr)
	return cr, md, nil
}

// restrict keeps the candidates the subset hint and the test selection
// allow. A hint that names no endpoint, or none of the eligible ones (those
// healthy and serving the model), is answered 503, as the protocol asks.
func restrict(ws []discovery.Worker, subset, selection *endpointSet) ([]discovery.Worker, *rejection) {
	for _, r := range [...]struct {
		set  *endpointSet
		name string
	}{{subset, "subset"}, {selection, "test_selection"}} {
		if !r.set.present {
			continue
		}
		if r.set.empty() {
			return nil, &rejection{r.name + "_empty", 503, "The " + strings.ReplaceAll(r.name, "_", " ") +
				" names no endpoint; none can be picked."}
		}
		if ws = filterWorkers(ws, r.set); len(ws) == 0 {
			return nil, &rejection{r.name + "_none_eligible", 503, "No endpoint of the " + strings.ReplaceAll(r.name, "_", " ") +
				" is a healthy worker serving the model right now; retry later."}
		}
	}
	return ws, nil
}

// sheds reports whether every candidate of d is predicted to take longer
// than limit to the first token (a decision without predictions never
// sheds).
func sheds(d *scoring.Decision, limit time.Duration) bool {
	if len(d.Candidates) == 0 {
		return d.Chosen.PredictedTTFT > limit
	}
	for _, c := range d.Candidates {
		if c.PredictedTTFT <= limit {
			return false
		}
	}
	return true
}

// servedBy records the endpoint the proxy reports as the one that served
// the request. When it is another of the decision's candidates than the
// chosen one (the proxy walked the fallback list), the assignment is moved
// to that worker: its in-flight count, the picker's ledger (a Reassigner
// picker) and, at the end, the outcome and the health report. The
// endpoints the proxy walked past before it (the chosen one, and earlier
// fallbacks) failed to take the request: each is reported to health as a
// failure (ErrRetriedPast), so a dead worker is ejected after a few such
// requests rather than tried in turn until a periodic check finds it.
func (s *Server) servedBy(ex *exchange, addr string) {
	rt := &ex.route
	if rt.dec == nil {
		return // a local reply, or a request warmpath answered itself
	}
	rt.served = addr
	switch {
	case addr == "":
		s.m.served.WithLabelValues("absent").Inc()
		return
	case sameEndpoint(rt.dec.Address, addr):
		s.m.served.WithLabelValues("chosen").Inc()
		return
	}
	i := slices.IndexFunc(rt.dec.Candidates, func(c scoring.Candidate) bool { return sameEndpoint(c.Address, addr) })
	if i < 0 {
		s.m.served.WithLabelValues("unknown").Inc()
		ex.log.Warn("the proxy reports an endpoint that was no candidate as the one that served",
			"served", addr, "chosen", rt.dec.Address)
		return
	}
	s.m.served.WithLabelValues("fallback").Inc()
	c := rt.dec.Candidates[i]
	if s.health != nil {
		for _, addr := range destinations(rt.dec, s.cfg.Fallbacks) {
			if sameEndpoint(addr, c.Address) {
				break
			}
			if j := slices.IndexFunc(rt.dec.Candidates, func(cand scoring.Candidate) bool { return cand.Address == addr }); j >= 0 {
				s.health.ReportResult(rt.dec.Candidates[j].Worker, 0, ErrRetriedPast)
			}
		}
	}
	rt.attrMu.Lock()
	defer rt.attrMu.Unlock()
	if rt.ended.Load() || rt.attributed.Worker == c.Worker {
		return
	}
	s.m.inFlight.WithLabelValues(rt.attributed.Worker).Dec()
	s.m.inFlight.WithLabelValues(c.Worker).Inc()
	if ra, ok := s.picker.(Reassigner); ok {
		ra.Reassign(rt.dec, c.Worker)
	}
	rt.attributed = c
}

// watch hands one response chunk to the watcher, and tells the picker when
// the first content token went by.
func (s *Server) watch(ex *exchange, chunk []byte) {
	rt := &ex.route
	rt.watch.write(chunk, s.now())
	if w := rt.watch; w.jsonBody == nil {
		rt.watchHeld.drop(&s.buffers)
	} else if !rt.watchHeld.grow(&s.buffers, cap(w.jsonBody)) {
		// Pass the body on without reading its usage.
		w.truncated, w.jsonBody = true, nil
		rt.watchHeld.drop(&s.buffers)
		s.m.watchEvents.WithLabelValues("buffer_budget").Inc()
	}
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
		"worker", rt.attributedTo().Worker, "ttl", s.cfg.AssignmentTTL)
	s.ended(ex, scoring.Outcome{End: scoring.EndExpired, Duration: s.now().Sub(rt.routedAt),
		PromptTokens: -1, CompletionTokens: -1, CachedTokens: -1})
}

// ended is the one end of an assignment, by whoever set rt.ended: metrics,
// health and the picker's feedback. It reads only what does not change
// after the pick.
func (s *Server) ended(ex *exchange, o scoring.Outcome) {
	rt := &ex.route
	c := rt.attributedTo()
	s.inFlight.Add(-1)
	s.m.ended.WithLabelValues(string(o.End)).Inc()
	s.m.inFlight.WithLabelValues(c.Worker).Dec()
	s.om.outcome(rt.dec, c, o)
	// An assignment that ended before any response (the client left, or
	// the upstream never answered) says nothing certain about the worker;
	// the active health check judges those.
	if s.health != nil && o.HTTPStatus != 0 {
		s.health.ReportResult(c.Worker, o.HTTPStatus, nil)
	}
	s.picker.Done(rt.dec, o)
}

// cleanup runs when the stream ends, however it ends: an unfinished
// assignment is aborted and the request is counted once.
func (s *Server) cleanup(ex *exchange) {
	ex.mu.Lock()
	ex.closed = true // the body timer does nothing from now on
	ex.stopBodyTimer()
	ex.mu.Unlock()
	ex.proto.held.drop(&s.buffers)
	ex.route.watchHeld.drop(&s.buffers)
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

// maxEcho bounds how much of a client's own input an error message (and
// the log line that records it) repeats.
const maxEcho = 256

// clip returns s, or its first maxEcho bytes (cut at a character
// boundary) and how long it was.
func clip(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	n := maxEcho
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:n], len(s))
}
