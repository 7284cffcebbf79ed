package extproc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/warmpath/warmpath/scoring"
)

// protocolError is a message Envoy should not have sent at this point of
// the exchange. It ends the stream with a gRPC error, never a panic.
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return "ext_proc protocol: " + e.msg }

func outOfOrder(got, state string) error {
	return &protocolError{fmt.Sprintf("%s received %s", got, state)}
}

// Body modes, shortened.
const (
	modeNone       = filterv3.ProcessingMode_NONE
	modeStreamed   = filterv3.ProcessingMode_STREAMED
	modeBuffered   = filterv3.ProcessingMode_BUFFERED
	modePartial    = filterv3.ProcessingMode_BUFFERED_PARTIAL
	modeFullDuplex = filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
)

// exchange is the state of one ext_proc stream. Protocol state (what Envoy
// has sent, what we owe it) is kept apart from the routing state (the
// request as the router sees it, the decision and the assignment).
type exchange struct {
	s      *Server
	stream extprocv3.ExternalProcessor_ProcessServer
	ctx    context.Context

	// Protocol state.
	modesKnown     bool
	reqMode        filterv3.ProcessingMode_BodySendMode
	respMode       filterv3.ProcessingMode_BodySendMode
	observe        bool // observability mode: Envoy ignores replies
	gotReqHeaders  bool
	reqEnded       bool // Envoy's end of the request (headers/body eos or trailers)
	routed         bool // the routing reply was sent
	rejected       bool // an ImmediateResponse was sent
	gotRespHeaders bool
	respEnded      bool
	method, path   string
	body           []byte

	// Routing state.
	req       scoring.Request
	dec       *scoring.Decision
	asg       *Assignment
	watch     *watcher
	status    int
	code      string // final status code for the requests metric
	toldFirst bool   // the picker was told of the first token

	trace *requestTrace // spans; nil when tracing is off
}

func (ex *exchange) send(r *extprocv3.ProcessingResponse) error {
	if ex.observe {
		return nil
	}
	return ex.stream.Send(r)
}

func (ex *exchange) handle(r *extprocv3.ProcessingRequest) error {
	if !ex.modesKnown {
		ex.modesKnown = true
		ex.reqMode, ex.respMode = ex.s.cfg.DefaultRequestMode, ex.s.cfg.DefaultResponseMode
		if pc := r.GetProtocolConfig(); pc != nil {
			ex.reqMode, ex.respMode = pc.GetRequestBodyMode(), pc.GetResponseBodyMode()
		}
		ex.observe = r.GetObservabilityMode()
	}
	if ex.rejected {
		return nil // Envoy is closing the stream after our ImmediateResponse
	}
	switch m := r.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		ex.identify(r)
		return ex.requestHeaders(m.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return ex.requestBody(m.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return ex.requestTrailers()
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return ex.responseHeaders(m.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return ex.responseBody(m.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return ex.responseTrailers()
	case nil:
		return nil // a flow-control-only message; nothing to answer
	default:
		return &protocolError{fmt.Sprintf("unknown message %T", m)}
	}
}

// headerValue reads a header, preferring raw_value as Envoy ≥1.32 sends it.
func headerValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

func (ex *exchange) requestHeaders(h *extprocv3.HttpHeaders) error {
	if ex.gotReqHeaders {
		return outOfOrder("request_headers", "twice")
	}
	ex.gotReqHeaders = true
	ex.req.Arrived = ex.s.now()
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch hv.GetKey() {
		case ":path":
			ex.path = headerValue(hv)
		case ":method":
			ex.method = headerValue(hv)
		case "x-request-id":
			ex.req.ID = headerValue(hv)
		}
	}
	if ex.req.ID == "" {
		ex.req.ID = newRequestID()
	}
	ex.req.API = apiOf(ex.method, ex.path)
	ex.req.Path = ex.path
	ex.trace = ex.s.tr.start(ex.ctx, h.GetHeaders().GetHeaders(), &ex.req, ex.method)
	if h.GetEndOfStream() {
		ex.reqEnded = true
		return ex.routeReply(false)
	}
	switch ex.reqMode {
	case modeFullDuplex:
		return nil // the reply follows the whole body
	case modeBuffered, modePartial:
		return ex.send(requestHeadersReply(nil, nil))
	default:
		// STREAMED or NONE: Envoy wants the header reply before any body, so
		// the body cannot inform the decision. Route on load alone.
		ex.s.m.bodyHidden.Inc()
		ex.s.log.Warn("request body mode hides the body from routing; deciding on load alone",
			"request_id", ex.req.ID, "mode", ex.reqMode.String())
		ex.req.API = scoring.APIOther
		return ex.routeReply(false)
	}
}

func (ex *exchange) requestBody(b *extprocv3.HttpBody) error {
	if !ex.gotReqHeaders {
		return outOfOrder("request_body", "before request_headers")
	}
	if ex.reqEnded {
		return outOfOrder("request_body", "after the end of the request")
	}
	if ex.routed { // STREAMED/NONE: routed on headers; pass the body through
		ex.reqEnded = b.GetEndOfStream()
		return ex.send(emptyRequestBody)
	}
	if len(ex.body)+len(b.GetBody()) > ex.s.cfg.MaxBodyBytes {
		return ex.reject("body_too_large", 413, fmt.Sprintf(
			"request body exceeds the limit of %d bytes", ex.s.cfg.MaxBodyBytes))
	}
	ex.body = append(ex.body, b.GetBody()...)
	switch ex.reqMode {
	case modeBuffered:
		// One message holds the whole body, even when trailers follow.
		ex.reqEnded = b.GetEndOfStream()
		return ex.routeReply(true)
	case modePartial:
		if !b.GetEndOfStream() {
			return ex.reject("body_too_large", 413, "request body exceeds Envoy's buffer limit")
		}
		ex.reqEnded = true
		return ex.routeReply(true)
	}
	if b.GetEndOfStream() {
		ex.reqEnded = true
		return ex.routeReplyFullDuplex(true)
	}
	return nil
}

func (ex *exchange) requestTrailers() error {
	if !ex.gotReqHeaders {
		return outOfOrder("request_trailers", "before request_headers")
	}
	wasEnded := ex.reqEnded
	ex.reqEnded = true
	if !ex.routed && !wasEnded && ex.reqMode == modeFullDuplex {
		if err := ex.routeReplyFullDuplex(false); err != nil || ex.rejected {
			return err
		}
	}
	return ex.send(emptyRequestTrailers)
}

// routeReply decides and sends the routing reply when no body has to be
// echoed: to the request headers, or (inBody) to a BUFFERED body message.
func (ex *exchange) routeReply(inBody bool) error {
	cr, md, rej := ex.decide()
	if rej != nil {
		return ex.sendReject(rej)
	}
	ex.routed = true
	if inBody {
		return ex.send(requestBodyReply(cr, md))
	}
	return ex.send(requestHeadersReply(cr, md))
}

// routeReplyFullDuplex decides, then sends the header reply followed by the
// held body in chunks; eos marks the last chunk as the end of the request
// (false when trailers follow).
func (ex *exchange) routeReplyFullDuplex(eos bool) error {
	cr, md, rej := ex.decide()
	if rej != nil {
		return ex.sendReject(rej)
	}
	ex.routed = true
	if err := ex.send(requestHeadersReply(cr, md)); err != nil {
		return err
	}
	body := ex.body
	for {
		n := min(len(body), maxChunk)
		last := n == len(body)
		if err := ex.send(streamedChunk(false, body[:n], last && eos)); err != nil {
			return err
		}
		if last {
			break
		}
		body = body[n:]
	}
	ex.body = nil
	return nil
}

// rejection is an answer warmpath gives instead of a worker.
type rejection struct {
	reason string
	status int
	msg    string
}

func (ex *exchange) reject(reason string, status int, msg string) error {
	return ex.sendReject(&rejection{reason, status, msg})
}

func (ex *exchange) sendReject(r *rejection) error {
	ex.rejected = true
	ex.s.m.rejections.WithLabelValues(r.reason).Inc()
	ex.trace.rejected(r)
	ex.code = strconv.Itoa(r.status)
	ex.s.log.Info("request rejected", "request_id", ex.req.ID, "status", r.status, "reason", r.reason, "msg", r.msg)
	return ex.send(errorReply(ex.req.API, r.status, r.msg, ex.s.cfg.RetryAfter))
}

// decide parses the body, finds the candidates and asks the picker. It
// returns the routing mutation, or a rejection for the client.
func (ex *exchange) decide() (*extprocv3.CommonResponse, *structpb.Struct, *rejection) {
	start := ex.s.now()
	r := &ex.req
	r.Body = ex.body
	if r.API != scoring.APIOther {
		def := ""
		if ms := ex.s.pool.Models(); len(ms) == 1 {
			def = ms[0]
		}
		if err := parseBody(r, ex.body, def); err != nil {
			return nil, nil, &rejection{"invalid_request", 400, err.Error()}
		}
	}
	ws, known := ex.s.pool.Candidates(r.Model)
	if !known {
		served := slices.Sorted(slices.Values(ex.s.pool.Models()))
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
	dec, err := ex.s.picker.Pick(ex.ctx, r, ws)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, nil, &rejection{"canceled", 503, "request canceled while routing"}
		}
		return nil, nil, &rejection{"picker_error", 503, "routing failed: " + err.Error()}
	}
	ex.dec = dec
	ex.asg = ex.s.assignments.Begin(r.ID, dec)
	ex.s.m.inFlight.WithLabelValues(dec.Worker).Set(float64(ex.s.assignments.InFlight(dec.Worker)))
	ex.s.m.decision.Observe(ex.s.now().Sub(start).Seconds())
	ex.s.log.Debug("routed", "request_id", r.ID, "model", r.Model, "worker", dec.Worker,
		"policy", dec.Policy, "mode", dec.Mode, "reason", dec.Reason)
	cr, md := routeMutation(ex.s.cfg.DestinationHeader, ex.s.cfg.MetadataNamespace, dec.Address)
	ex.observeDecision(cr)
	return cr, md, nil
}

func (ex *exchange) responseHeaders(h *extprocv3.HttpHeaders) error {
	// Without request_headers this is a local reply from a filter before
	// ext_proc (jwt_authn's 401, ext_authz's 403): Envoy still sends it
	// through; pass it on untouched.
	if ex.gotRespHeaders {
		return outOfOrder("response_headers", "twice")
	}
	ex.gotRespHeaders = true
	ct := ""
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch hv.GetKey() {
		case ":status":
			ex.status, _ = strconv.Atoi(headerValue(hv))
		case "content-type":
			ct = headerValue(hv)
		}
	}
	ex.watch = newWatcher(ct, ex.s.cfg.MaxResponseBytes)
	var set []*corev3.HeaderValueOption
	if ex.s.cfg.DebugHeaders && ex.dec != nil {
		set = append(set, setHeader("x-warmpath-worker", ex.dec.Worker),
			setHeader("x-warmpath-reason", headerSafe(ex.dec.Reason)))
	}
	if err := ex.send(responseHeadersReply(set)); err != nil {
		return err
	}
	if h.GetEndOfStream() {
		ex.finish()
	}
	return nil
}

func (ex *exchange) responseBody(b *extprocv3.HttpBody) error {
	if !ex.gotRespHeaders {
		return outOfOrder("response_body", "before response_headers")
	}
	if ex.respEnded {
		return outOfOrder("response_body", "after the end of the response")
	}
	now := ex.s.now()
	ex.watch.write(b.GetBody(), now)
	if !ex.toldFirst && ex.dec != nil && !ex.watch.firstToken.IsZero() {
		ex.toldFirst = true
		if ft, ok := ex.s.picker.(FirstTokenObserver); ok {
			ft.FirstToken(ex.dec)
		}
	}
	ex.s.m.responseChunks.Inc()
	ex.s.m.chunkBytes.Add(float64(len(b.GetBody())))
	reply := emptyResponseBody
	if ex.respMode == modeFullDuplex {
		reply = streamedChunk(true, b.GetBody(), b.GetEndOfStream())
	}
	if err := ex.send(reply); err != nil {
		return err
	}
	if b.GetEndOfStream() {
		ex.finish()
	}
	return nil
}

func (ex *exchange) responseTrailers() error {
	if !ex.gotRespHeaders {
		return outOfOrder("response_trailers", "before response_headers")
	}
	if err := ex.send(emptyResponseTrailers); err != nil {
		return err
	}
	ex.finish()
	return nil
}

// finish records the end of the response.
func (ex *exchange) finish() {
	if ex.respEnded {
		return
	}
	ex.respEnded = true
	end := scoring.EndCompleted
	if ex.status >= 500 {
		end = scoring.EndAborted
	}
	ex.endAssignment(end)
}

// endAssignment ends the assignment (if any) with what the watcher saw.
func (ex *exchange) endAssignment(end scoring.End) {
	now := ex.s.now()
	o := scoring.Outcome{End: end, HTTPStatus: ex.status, PromptTokens: -1, CompletionTokens: -1, CachedTokens: -1}
	if w := ex.watch; w != nil {
		w.finish(now)
		o.PromptTokens, o.CompletionTokens, o.CachedTokens = w.usage.PromptTokens, w.usage.CompletionTokens, w.usage.CachedTokens
		if w.errMsg != "" {
			o.Error = w.errMsg
			ex.s.m.watchEvents.WithLabelValues("error_event").Inc()
			if o.End == scoring.EndCompleted {
				o.End = scoring.EndAborted
			}
		}
		if w.badEvents > 0 {
			ex.s.m.watchEvents.WithLabelValues("unparsable_event").Add(float64(w.badEvents))
		}
		if w.truncated {
			ex.s.m.watchEvents.WithLabelValues("body_over_limit").Inc()
		}
		if ex.asg != nil && !w.firstToken.IsZero() {
			o.TTFT = w.firstToken.Sub(ex.asg.Start)
			ex.s.m.ttft.WithLabelValues("decision").Observe(o.TTFT.Seconds())
			ex.s.m.ttft.WithLabelValues("arrival").Observe(w.firstToken.Sub(ex.req.Arrived).Seconds())
		}
	}
	if o.Error == "" && ex.status >= 400 {
		o.Error = "upstream status " + strconv.Itoa(ex.status)
	}
	if ex.status != 0 {
		ex.code = strconv.Itoa(ex.status)
	}
	if ex.asg != nil {
		if ex.asg.Start.Before(now) {
			o.Duration = now.Sub(ex.asg.Start)
		} else {
			o.Duration = time.Nanosecond
		}
		ex.s.assignments.End(ex.asg, o)
	}
	ex.trace.ended(ex.dec, o, ex.watch, ex.req.Stream, now)
}

// cleanup runs when the stream ends, however it ends: an unfinished
// assignment is aborted and the request is counted once.
func (ex *exchange) cleanup() {
	if !ex.gotReqHeaders {
		return
	}
	if !ex.respEnded {
		ex.endAssignment(scoring.EndAborted)
	}
	code := ex.code
	if code == "" {
		code = "0" // ended before any response: client gone or upstream unreachable
	}
	model := ex.req.Model
	if model != "" && !slices.Contains(ex.s.pool.Models(), model) {
		model = "unknown"
	}
	ex.observeFinal(code, model)
	ex.s.m.requests.WithLabelValues(string(ex.req.API), model, code).Inc()
}

// headerSafe keeps printable ASCII so a reason is a valid header value.
func headerSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = ' '
		}
	}
	if len(b) > 256 {
		b = b[:256]
	}
	return string(b)
}
