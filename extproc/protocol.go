package extproc

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/warmpath/warmpath/scoring"
)

// The protocol room: what Envoy may send when, and what warmpath owes it in
// return, for every body mode. It decides nothing about routing: when the
// routing reply is due it asks the routing room (route.go) for the
// decision, and it hands response chunks to the routing room's watcher.

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

// exchange is the state of one ext_proc stream, owned by its loop
// (Server.Process): the protocol state, the routing state, the
// request-scoped logger and the spans. The assignment's TTL timer is the
// one other reader (see routing).
type exchange struct {
	// mu is held by the loop while it handles a message and by the body
	// timer while it answers a body that is late; closed tells the timer
	// that the stream has ended.
	mu        sync.Mutex
	closed    bool
	bodyTimer *time.Timer
	stream    extprocv3.ExternalProcessor_ProcessServer
	// log carries the request id once the request headers are in.
	log   *slog.Logger
	proto protocol
	route routing
	trace *requestTrace // nil when tracing is off
	// chunks are the streamed body replies of the request's and the
	// response's direction, made on first use.
	chunks [2]*chunkReply
}

// protocol is what Envoy has sent so far and what warmpath owes it.
type protocol struct {
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
	body           []byte  // the request body held until the routing reply
	held           holding // body's share of the buffer budget
}

func (ex *exchange) send(r *extprocv3.ProcessingResponse) error {
	if ex.proto.observe {
		return nil
	}
	return ex.stream.Send(r)
}

// sendChunk sends b back to Envoy as the next FULL_DUPLEX_STREAMED piece of
// the response's body, or of the request's, the last when eos.
func (ex *exchange) sendChunk(response bool, b []byte, eos bool) error {
	if ex.proto.observe {
		return nil
	}
	i := 0
	if response {
		i = 1
	}
	if ex.chunks[i] == nil {
		ex.chunks[i] = newChunkReply(response)
	}
	err := ex.stream.SendMsg(ex.chunks[i].fill(b, eos))
	ex.chunks[i].fill(nil, false) // sent: hold on to no body
	return err
}

func (s *Server) handle(ctx context.Context, ex *exchange, r *extprocv3.ProcessingRequest) error {
	p := &ex.proto
	if !p.modesKnown {
		p.modesKnown = true
		p.reqMode, p.respMode = s.cfg.modes()
		if pc := r.GetProtocolConfig(); pc != nil {
			p.reqMode, p.respMode = pc.GetRequestBodyMode(), pc.GetResponseBodyMode()
		}
		p.observe = r.GetObservabilityMode()
	}
	if p.rejected {
		return nil // Envoy is closing the stream after our ImmediateResponse
	}
	switch m := r.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		s.identify(ex, r)
		s.subsetHint(ex, r.GetMetadataContext())
		return s.requestHeaders(ctx, ex, m.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return s.requestBody(ctx, ex, m.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return s.requestTrailers(ctx, ex)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return s.responseHeaders(ex, r.GetMetadataContext(), m.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return s.responseBody(ex, m.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return s.responseTrailers(ex)
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

func (s *Server) requestHeaders(ctx context.Context, ex *exchange, h *extprocv3.HttpHeaders) error {
	p, req := &ex.proto, &ex.route.req
	if p.gotReqHeaders {
		return outOfOrder("request_headers", "twice")
	}
	p.gotReqHeaders = true
	req.Arrived = s.now()
	req.Source = streamSource(ctx)
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch hv.GetKey() {
		case ":path":
			p.path = headerValue(hv)
		case ":method":
			p.method = headerValue(hv)
		case "x-request-id":
			req.ID = headerValue(hv)
		case "content-length":
			// The body is gathered in one buffer of about its size, up to
			// maxBodyHint: a declared length reserves no more than that.
			if n, err := strconv.Atoi(headerValue(hv)); err == nil && n > 0 {
				p.body = make([]byte, 0, min(n, s.cfg.MaxBodyBytes, maxBodyHint))
			}
		case testSelectionHeader:
			if !s.cfg.ConformanceTestHooks {
				s.m.selectionIgnored.Inc() // a client must never choose its upstream
				continue
			}
			ex.route.selection = selectionOf(headerValue(hv))
		}
	}
	if req.ID == "" {
		req.ID = newRequestID()
	}
	ex.log = s.log.With("request_id", req.ID)
	for _, hv := range h.GetHeaders().GetHeaders() {
		if k := hv.GetKey(); k == sloTTFTHeader || k == sloTPOTHeader {
			s.sloHeader(ex, &req.SLO, k, headerValue(hv))
		}
	}
	req.API = apiOf(p.method, p.path)
	req.Path = p.path
	ex.trace = s.tr.start(ctx, h.GetHeaders().GetHeaders(), req, p.method)
	if !p.held.grow(&s.buffers, cap(p.body)) {
		return s.overBudget(ex)
	}
	if h.GetEndOfStream() {
		p.reqEnded = true
		return s.routeReply(ctx, ex, false)
	}
	switch p.reqMode {
	case modeFullDuplex:
		s.armBodyTimer(ex)
		return nil // the reply follows the whole body
	case modeBuffered, modePartial:
		s.armBodyTimer(ex)
		return ex.send(requestHeadersReply(nil, nil))
	default:
		// STREAMED or NONE: Envoy wants the header reply before any body, so
		// the body cannot inform the decision. Route on load alone.
		s.m.bodyHidden.Inc()
		ex.log.Warn("request body mode hides the body from routing; deciding on load alone", "mode", p.reqMode.String())
		req.API = scoring.APIOther
		return s.routeReply(ctx, ex, false)
	}
}

// armBodyTimer answers 408 if the request body has not ended BodyTimeout
// from now: a client trickling its body holds neither the stream nor its
// buffer for longer.
func (s *Server) armBodyTimer(ex *exchange) {
	ex.bodyTimer = time.AfterFunc(s.cfg.BodyTimeout, func() {
		ex.mu.Lock()
		defer ex.mu.Unlock()
		if p := &ex.proto; ex.closed || p.routed || p.rejected || p.reqEnded {
			return
		}
		ex.proto.body = nil
		ex.proto.held.drop(&s.buffers)
		// The loop is in Recv, which may run beside a Send; every Send is
		// made under mu.
		if err := s.reject(ex, &rejection{"body_timeout", 408, fmt.Sprintf(
			"request body not received within %v", s.cfg.BodyTimeout)}); err != nil {
			ex.log.Debug("body timeout reply", "err", err)
		}
	})
}

// stopBodyTimer ends the wait for the body: it arrived, or the request was
// answered.
func (ex *exchange) stopBodyTimer() {
	if ex.bodyTimer != nil {
		ex.bodyTimer.Stop()
	}
}

// maxBodyHint bounds the buffer a request's content-length reserves before
// its body arrives.
const maxBodyHint = 1 << 20

func (s *Server) requestBody(ctx context.Context, ex *exchange, b *extprocv3.HttpBody) error {
	p := &ex.proto
	if !p.gotReqHeaders {
		return outOfOrder("request_body", "before request_headers")
	}
	if p.reqEnded {
		return outOfOrder("request_body", "after the end of the request")
	}
	if p.routed { // STREAMED/NONE: routed on headers; pass the body through
		p.reqEnded = b.GetEndOfStream()
		return ex.send(emptyRequestBody)
	}
	if len(p.body)+len(b.GetBody()) > s.cfg.MaxBodyBytes {
		return s.reject(ex, &rejection{"body_too_large", 413, fmt.Sprintf(
			"request body exceeds the limit of %d bytes", s.cfg.MaxBodyBytes)})
	}
	if p.body == nil {
		p.body = b.GetBody() // the message's own bytes: a body in one chunk is not copied
	} else {
		p.body = append(p.body, b.GetBody()...)
	}
	if !p.held.grow(&s.buffers, cap(p.body)) {
		return s.overBudget(ex)
	}
	switch p.reqMode {
	case modeBuffered:
		// One message holds the whole body, even when trailers follow.
		p.reqEnded = b.GetEndOfStream()
		return s.routeReply(ctx, ex, true)
	case modePartial:
		if !b.GetEndOfStream() {
			return s.reject(ex, &rejection{"body_too_large", 413, "request body exceeds Envoy's buffer limit"})
		}
		p.reqEnded = true
		return s.routeReply(ctx, ex, true)
	}
	if b.GetEndOfStream() {
		p.reqEnded = true
		return s.routeReplyFullDuplex(ctx, ex, true)
	}
	return nil
}

func (s *Server) requestTrailers(ctx context.Context, ex *exchange) error {
	p := &ex.proto
	if !p.gotReqHeaders {
		return outOfOrder("request_trailers", "before request_headers")
	}
	wasEnded := p.reqEnded
	p.reqEnded = true
	if !p.routed && !wasEnded && p.reqMode == modeFullDuplex {
		if err := s.routeReplyFullDuplex(ctx, ex, false); err != nil || p.rejected {
			return err
		}
	}
	return ex.send(emptyRequestTrailers)
}

// routeReply decides and sends the routing reply when no body has to be
// echoed: to the request headers, or (inBody) to a BUFFERED body message.
func (s *Server) routeReply(ctx context.Context, ex *exchange, inBody bool) error {
	ex.stopBodyTimer()
	cr, md, rej := s.decide(ctx, ex)
	if rej != nil {
		return s.reject(ex, rej)
	}
	ex.proto.routed = true
	if inBody {
		return ex.send(requestBodyReply(cr, md))
	}
	return ex.send(requestHeadersReply(cr, md))
}

// routeReplyFullDuplex decides, then sends the header reply followed by the
// held body in chunks; eos marks the last chunk as the end of the request
// (false when trailers follow).
func (s *Server) routeReplyFullDuplex(ctx context.Context, ex *exchange, eos bool) error {
	ex.stopBodyTimer()
	cr, md, rej := s.decide(ctx, ex)
	if rej != nil {
		return s.reject(ex, rej)
	}
	ex.proto.routed = true
	if err := ex.send(requestHeadersReply(cr, md)); err != nil {
		return err
	}
	body := ex.proto.body
	for {
		n := min(len(body), maxChunk)
		last := n == len(body)
		if err := ex.sendChunk(false, body[:n], last && eos); err != nil {
			return err
		}
		if last {
			break
		}
		body = body[n:]
	}
	ex.proto.body = nil
	ex.proto.held.drop(&s.buffers)
	return nil
}

// overBudget drops the request's body and answers 503: the buffers of
// every stream together hold MaxBufferedBytes.
func (s *Server) overBudget(ex *exchange) error {
	ex.proto.body = nil
	ex.proto.held.drop(&s.buffers)
	return s.reject(ex, &rejection{"buffer_budget", 503, fmt.Sprintf(
		"warmpath holds its limit of %d bytes of request bodies in flight; retry", s.cfg.MaxBufferedBytes)})
}

// rejection is an answer warmpath gives instead of a worker.
type rejection struct {
	reason string
	status int
	msg    string
}

func (s *Server) reject(ex *exchange, r *rejection) error {
	ex.stopBodyTimer()
	ex.proto.rejected = true
	s.m.rejections.WithLabelValues(r.reason).Inc()
	ex.trace.rejected(r)
	ex.route.code = strconv.Itoa(r.status)
	// A client's own mistakes (4xx) are counted and logged at debug: a
	// client sending bad requests cannot fill the log. warmpath's own
	// refusals (5xx, 429 shedding) are logged at info.
	level := slog.LevelDebug
	if r.status >= 500 || r.status == 429 {
		level = slog.LevelInfo
	}
	ex.log.Log(context.Background(), level, "request rejected", "status", r.status, "reason", r.reason, "msg", r.msg)
	return ex.send(errorReply(ex.route.req.API, r.status, r.msg, s.cfg.RetryAfter))
}

// subsetHint reads the proxy's subset hint from the request's forwarded
// metadata, once.
func (s *Server) subsetHint(ex *exchange, md *corev3.Metadata) {
	if ex.proto.gotReqHeaders {
		return
	}
	set, form := subsetHint(md, s.cfg.subsetNamespace())
	if form != hintNone {
		s.m.subsetHints.WithLabelValues(string(form)).Inc()
	}
	ex.route.subset = set
}

func (s *Server) responseHeaders(ex *exchange, md *corev3.Metadata, h *extprocv3.HttpHeaders) error {
	// Without request_headers this is a local reply from a filter before
	// ext_proc (jwt_authn's 401, ext_authz's 403): Envoy still sends it
	// through; pass it on untouched.
	p := &ex.proto
	if p.gotRespHeaders {
		return outOfOrder("response_headers", "twice")
	}
	p.gotRespHeaders = true
	s.servedBy(ex, servedEndpoint(md, s.cfg.servedNamespace()))
	ct := ""
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch hv.GetKey() {
		case ":status":
			ex.route.status, _ = strconv.Atoi(headerValue(hv))
		case "content-type":
			ct = headerValue(hv)
		}
	}
	ex.route.watch = newWatcher(ct, s.cfg.MaxResponseBytes)
	var set []*corev3.HeaderValueOption
	if d := ex.route.dec; s.cfg.DebugHeaders && d != nil {
		set = append(set, setHeader("x-warmpath-worker", ex.route.attributedTo().Worker),
			setHeader("x-warmpath-reason", headerSafe(d.Reason)))
	}
	if s.cfg.ConformanceTestHooks && ex.route.served != "" {
		set = append(set, setHeader(testServedHeader, headerSafe(ex.route.served)))
	}
	if err := ex.send(responseHeadersReply(set)); err != nil {
		return err
	}
	if h.GetEndOfStream() {
		s.finish(ex)
	}
	return nil
}

func (s *Server) responseBody(ex *exchange, b *extprocv3.HttpBody) error {
	p := &ex.proto
	if !p.gotRespHeaders {
		return outOfOrder("response_body", "before response_headers")
	}
	if p.respEnded {
		return outOfOrder("response_body", "after the end of the response")
	}
	start := s.now()
	s.watch(ex, b.GetBody())
	var err error
	if p.respMode == modeFullDuplex {
		err = ex.sendChunk(true, b.GetBody(), b.GetEndOfStream())
	} else {
		err = ex.send(emptyResponseBody)
	}
	if err != nil {
		return err
	}
	s.m.chunkDuration.Observe(s.now().Sub(start).Seconds())
	if b.GetEndOfStream() {
		s.finish(ex)
	}
	return nil
}

func (s *Server) responseTrailers(ex *exchange) error {
	if !ex.proto.gotRespHeaders {
		return outOfOrder("response_trailers", "before response_headers")
	}
	if err := ex.send(emptyResponseTrailers); err != nil {
		return err
	}
	s.finish(ex)
	return nil
}

// finish records the end of the response.
func (s *Server) finish(ex *exchange) {
	if ex.proto.respEnded {
		return
	}
	ex.proto.respEnded = true
	end := scoring.EndCompleted
	if ex.route.status >= 500 {
		end = scoring.EndAborted
	}
	s.endAssignment(ex, end)
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
