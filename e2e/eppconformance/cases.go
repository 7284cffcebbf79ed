package eppconformance

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"
)

// Level says how binding a case is.
type Level string

// Levels, from the protocol's MUSTs down.
const (
	// Required cases check what the Endpoint Picker protocol (v1.0.0)
	// requires, or what any picker in front of an LLM pool must do to keep
	// the HTTP exchange whole (bodies, trailers, early closes).
	Required Level = "required"
	// Optional cases check what the protocol allows but does not demand
	// (fallback lists, v0.4) or what it proposes (v1.1).
	Optional Level = "optional"
	// Hook cases check the Inference Extension conformance suite's
	// test-only hooks, which a picker must never enable in production.
	Hook Level = "test hook"
)

// Case is one conformance check.
type Case struct {
	// ID names the case: area/what.
	ID string
	// Checks says in one line what passing means.
	Checks string
	Level  Level
	run    func(e *env, ctx context.Context) error
}

// errSkip marks a case that could not be run against this target; its
// message says why.
type errSkip struct{ why string }

func (e *errSkip) Error() string { return e.why }

// Cases returns the suite, in the order it runs.
func Cases() []Case { return cases }

var cases = []Case{
	// Protocol modes.
	{ID: "mode/full-duplex-sse", Level: Required,
		Checks: "FULL_DUPLEX_STREAMED both ways, streamed chat: 200 from the picked endpoint, request body and SSE response byte for byte",
		run: func(e *env, ctx context.Context) error {
			return e.routedOnce(ctx, request{listener: "fdx", stream: true})
		}},
	{ID: "mode/full-duplex-json", Level: Required,
		Checks: "FULL_DUPLEX_STREAMED, non-streamed chat: the JSON response byte for byte",
		run:    func(e *env, ctx context.Context) error { return e.routedOnce(ctx, request{listener: "fdx"}) }},
	{ID: "mode/buffered", Level: Required,
		Checks: "BUFFERED request, STREAMED response: routed, bodies intact",
		run: func(e *env, ctx context.Context) error {
			return e.routedOnce(ctx, request{listener: "buffered", stream: true})
		}},
	{ID: "mode/headers-only", Level: Required,
		Checks: "a request without a body (GET /v1/models, end_of_stream on the headers) is routed to a pool endpoint",
		run: func(e *env, ctx context.Context) error {
			return e.routedOnce(ctx, request{listener: "main", method: http.MethodGet, path: "/v1/models"})
		}},

	// The destination.
	{ID: "destination/header-metadata-agree", Level: Required,
		Checks: "direct: the routing reply sets x-gateway-destination-endpoint (raw_value, overwriting, with clear_route_cache) and envoy.lb metadata to the same pool endpoints",
		run:    (*env).headerMetadataAgree},
	{ID: "destination/metadata-path", Level: Required,
		Checks: "a proxy that routes by the envoy.lb metadata alone reaches the picked endpoint",
		run: func(e *env, ctx context.Context) error {
			return e.routedOnce(ctx, request{listener: "meta", stream: true})
		}},
	{ID: "destination/client-cannot-choose", Level: Required,
		Checks: "a client's own x-gateway-destination-endpoint (the canary, in the proxy's cluster) is overwritten: the canary is never reached",
		run:    (*env).clientCannotChoose},

	// The subset hint.
	{ID: "subset/list", Level: Required,
		Checks: "a list hint naming one endpoint: every request goes there, and the destination names nothing else",
		run: func(e *env, ctx context.Context) error {
			ep := e.pool.Endpoints[len(e.pool.Endpoints)-1]
			return e.withinSubset(ctx, map[string]string{hdrSubsetList: subsetList(ep)}, ep)
		}},
	{ID: "subset/list-two", Level: Required,
		Checks: "a list hint naming two endpoints: requests stay within them, fallbacks included",
		run: func(e *env, ctx context.Context) error {
			eps := e.pool.Endpoints[1:3]
			return e.withinSubset(ctx, map[string]string{hdrSubsetList: subsetList(eps...)}, eps...)
		}},
	{ID: "subset/string", Level: Required,
		Checks: "a comma-string hint (as header_to_metadata writes it): requests stay within it",
		run: func(e *env, ctx context.Context) error {
			eps := e.pool.Endpoints[:2]
			return e.withinSubset(ctx, map[string]string{hdrSubset: strings.Join(eps, ",")}, eps...)
		}},
	{ID: "subset/empty", Level: Required,
		Checks: "an empty list hint is answered 503",
		run: func(e *env, ctx context.Context) error {
			return e.rejected(ctx, request{listener: "main", headers: map[string]string{hdrSubsetList: subsetList()}}, http.StatusServiceUnavailable)
		}},
	{ID: "subset/none-eligible", Level: Required,
		Checks: "a hint naming only an endpoint outside the pool is answered 503, and nothing reaches it",
		run: func(e *env, ctx context.Context) error {
			return e.rejected(ctx, request{listener: "main", headers: map[string]string{hdrSubsetList: subsetList(e.pool.Canary)}}, http.StatusServiceUnavailable)
		}},

	{ID: "subset/direct-list", Level: Required,
		Checks: "direct: with a list hint naming one endpoint, the routing reply names that endpoint only",
		run:    (*env).directSubset},
	{ID: "subset/direct-empty", Level: Required,
		Checks: "direct: an empty list hint is answered with an ImmediateResponse 503 (not a gRPC error, which Envoy turns into a 500)",
		run:    (*env).directSubsetEmpty},

	// Fallbacks and the served endpoint.
	{ID: "fallback/list", Level: Optional,
		Checks: "direct: the destination is an ordered list of distinct pool endpoints, more than one (protocol v0.4)",
		run:    (*env).fallbackList},
	{ID: "fallback/walk", Level: Optional,
		Checks: "the picked endpoint refuses (503): the proxy retries on the next endpoint of the picker's list, which answers 200",
		run:    (*env).fallbackWalk},
	{ID: "served/echo", Level: Hook,
		Checks: "x-conformance-test-served-endpoint on the response is the endpoint that served (read from envoy.lb served metadata)",
		run:    (*env).servedEcho},
	{ID: "served/after-retry", Level: Hook,
		Checks: "after the proxy walked the list, the picker reports the endpoint that really served, not the one it picked",
		run:    (*env).servedAfterRetry},
	{ID: "served/direct-echo", Level: Hook,
		Checks: "direct: response headers reporting another pool endpoint as served get it back in x-conformance-test-served-endpoint",
		run:    (*env).directServedEcho},
	{ID: "hook/endpoint-selection", Level: Hook,
		Checks: "test-epp-endpoint-selection steers every request to the endpoint it names",
		run: func(e *env, ctx context.Context) error {
			ep := e.pool.Endpoints[1]
			return e.withinSubset(ctx, map[string]string{"test-epp-endpoint-selection": ep}, ep)
		}},

	// Rejections.
	{ID: "reject/503-body", Level: Required,
		Checks: "the 503 for no eligible endpoint carries a body a client can read (valid JSON when it says application/json)",
		run: func(e *env, ctx context.Context) error {
			return e.rejectedWithBody(ctx, request{listener: "main", headers: map[string]string{hdrSubsetList: subsetList(e.pool.Canary)}}, http.StatusServiceUnavailable)
		}},
	{ID: "reject/429-body", Level: Required,
		Checks: "a shed request is answered 429 with a readable body (needs a picker configured to shed)",
		run: func(e *env, ctx context.Context) error {
			if e.target.Shed == "" {
				return &errSkip{"no shedding picker given (Target.Shed)"}
			}
			return e.rejectedWithBody(ctx, request{listener: "shed", stream: true}, http.StatusTooManyRequests)
		}},

	// Health.
	healthCase(""), healthCase("liveness"), healthCase("readiness"),
	healthCase("envoy.service.ext_proc.v3.ExternalProcessor"), healthCase("inference-extension"),

	// Early closes.
	{ID: "early-close/client-mid-response", Level: Required,
		Checks: "the client leaves in the middle of a streamed response; the next request is served",
		run:    (*env).clientLeavesMidResponse},
	{ID: "early-close/mid-request-body", Level: Required,
		Checks: "direct: the stream ends after half the request body; the next stream is routed",
		run: func(e *env, ctx context.Context) error {
			return e.closeThenRoute(ctx, func(d *directStream) error {
				if err := d.headers(nil, false); err != nil {
					return err
				}
				b := chatBody(false, 64)
				return d.body(b[:len(b)/2], false)
			})
		}},
	{ID: "early-close/after-routing", Level: Required,
		Checks: "direct: the stream ends right after the routing reply, before any response; the next stream is routed",
		run: func(e *env, ctx context.Context) error {
			return e.closeThenRoute(ctx, func(d *directStream) error {
				if err := d.headers(nil, false); err != nil {
					return err
				}
				if err := d.body(chatBody(false, 64), true); err != nil {
					return err
				}
				_, err := d.routing()
				return err
			})
		}},

	// Large bodies and trailers.
	{ID: "large-body/full-duplex-2MiB", Level: Required,
		Checks: "a 2 MiB request body (twice Envoy's buffer limit) in FULL_DUPLEX_STREAMED arrives whole",
		run: func(e *env, ctx context.Context) error {
			return e.routedOnce(ctx, request{listener: "fdx", stream: true, pad: 2 << 20})
		}},
	{ID: "large-body/buffered-512KiB", Level: Required,
		Checks: "a 512 KiB request body in BUFFERED mode arrives whole",
		run: func(e *env, ctx context.Context) error {
			return e.routedOnce(ctx, request{listener: "buffered", stream: true, pad: 512 << 10})
		}},
	{ID: "trailers/request", Level: Required,
		Checks: "HTTP/2 request trailers pass through the picker to an h2c pool (appProtocol kubernetes.io/h2c)",
		run:    (*env).requestTrailers},
	{ID: "trailers/response", Level: Required,
		Checks: "HTTP/2 response trailers from an h2c pool reach the client",
		run:    (*env).responseTrailers},

	{ID: "concurrency/32-streams", Level: Required,
		Checks: "32 streamed requests at once are all served, bodies intact",
		run:    (*env).concurrent},
}

func healthCase(svc string) Case {
	name := svc
	if name == "" {
		name = `"" (server)`
	}
	id := svc
	if id == "" {
		id = "server"
	}
	return Case{ID: "health/" + id, Level: Required,
		Checks: "gRPC health service " + name + " answers SERVING",
		run:    func(e *env, ctx context.Context) error { return e.healthServing(ctx, svc) }}
}

// routedOnce sends r and checks it was served as routed.
func (e *env) routedOnce(ctx context.Context, r request) error {
	resp, err := e.do(ctx, r)
	if err != nil {
		return err
	}
	_, _, err = e.served(resp, r.stream)
	return err
}

func (e *env) headerMetadataAgree(ctx context.Context) error {
	r, err := e.directRoute(ctx, nil)
	if err != nil {
		return err
	}
	if ir := r.GetImmediateResponse(); ir != nil {
		return fmt.Errorf("answered %d instead of routing: %.200q", ir.GetStatus().GetCode(), ir.GetBody())
	}
	header, hv, meta := destination(r)
	var errs []error
	switch {
	case hv == nil:
		errs = append(errs, errors.New("no x-gateway-destination-endpoint in the header mutation"))
	case len(hv.GetHeader().GetRawValue()) == 0:
		errs = append(errs, errors.New("the header is set in value, not raw_value: Envoy ≥ 1.32 would set it empty"))
	case hv.GetAppend().GetValue(): //nolint:staticcheck // ext_proc honours only the deprecated append; append_action is ignored
		errs = append(errs, errors.New("the header is appended, not overwritten: a client's own value would stay first"))
	}
	if meta == "" {
		errs = append(errs, errors.New("no envoy.lb/x-gateway-destination-endpoint metadata"))
	}
	if header != meta {
		errs = append(errs, fmt.Errorf("header %q and metadata %q differ", header, meta))
	}
	if !r.GetRequestHeaders().GetResponse().GetClearRouteCache() {
		errs = append(errs, errors.New("clear_route_cache is not set"))
	}
	for _, ep := range splitList(header) {
		if !slices.Contains(e.pool.Endpoints, ep) {
			errs = append(errs, fmt.Errorf("destination names %s, not a pool endpoint", ep))
		}
	}
	return errors.Join(errs...)
}

func (e *env) directSubset(ctx context.Context) error {
	ep := e.pool.Endpoints[len(e.pool.Endpoints)-1]
	for range 3 {
		r, err := e.directRoute(ctx, subsetMetadata(ep))
		if err != nil {
			return err
		}
		if ir := r.GetImmediateResponse(); ir != nil {
			return fmt.Errorf("answered %d instead of routing", ir.GetStatus().GetCode())
		}
		if h, _, _ := destination(r); !slices.Equal(splitList(h), []string{ep}) {
			return fmt.Errorf("destination %q, want only %s", h, ep)
		}
	}
	return nil
}

func (e *env) directSubsetEmpty(ctx context.Context) error {
	r, err := e.directRoute(ctx, subsetMetadata())
	if err != nil {
		return err
	}
	if got := r.GetImmediateResponse().GetStatus().GetCode(); got != http.StatusServiceUnavailable {
		h, _, _ := destination(r)
		return fmt.Errorf("ImmediateResponse status %d (destination %q), want 503", got, h)
	}
	return nil
}

func (e *env) directServedEcho(ctx context.Context) error {
	d, err := e.openDirect(ctx)
	if err != nil {
		return err
	}
	defer d.close()
	if err := d.headers(nil, false); err != nil {
		return err
	}
	if err := d.body(chatBody(false, 16), true); err != nil {
		return err
	}
	r, err := d.routing()
	if err != nil {
		return err
	}
	h, _, _ := destination(r)
	served := e.pool.Endpoints[0]
	if dst := splitList(h); len(dst) > 0 && dst[0] == served {
		served = e.pool.Endpoints[1]
	}
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.lb": {Fields: map[string]*structpb.Value{
		destinationHeader: structpb.NewStringValue(h), "x-gateway-destination-endpoint-served": structpb.NewStringValue(served)}}}}
	if err := d.responseHeaders(md); err != nil {
		return err
	}
	rh, err := d.until("the response-headers reply", func(r *extprocv3.ProcessingResponse) bool { return r.GetResponseHeaders() != nil })
	if err != nil {
		return err
	}
	for _, hv := range rh.GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if hv.GetHeader().GetKey() == testServedHeader {
			if got := string(hv.GetHeader().GetRawValue()); got != served {
				return fmt.Errorf("%s = %q, want %s (routed to %q)", testServedHeader, got, served, h)
			}
			return nil
		}
	}
	return fmt.Errorf("no %s in the response-headers reply", testServedHeader)
}

func (e *env) clientCannotChoose(ctx context.Context) error {
	before := e.pool.canaryHits()
	for range 4 {
		r, err := e.do(ctx, request{listener: "main", stream: true, headers: map[string]string{destinationHeader: e.pool.Canary}})
		if err != nil {
			return err
		}
		if be, _ := r.backend(); be == e.pool.Canary || e.pool.canaryHits() != before {
			return fmt.Errorf("the client's destination header reached the canary %s", e.pool.Canary)
		}
		if _, _, err := e.served(r, true); err != nil {
			return err
		}
	}
	return nil
}

// withinSubset sends four requests with headers and checks each is served
// by one of eps, with a destination list naming only eps.
func (e *env) withinSubset(ctx context.Context, headers map[string]string, eps ...string) error {
	for range 4 {
		r, err := e.do(ctx, request{listener: "main", stream: true, headers: headers})
		if err != nil {
			return err
		}
		be, dst, err := e.served(r, true)
		if err != nil {
			return err
		}
		if !slices.Contains(eps, be) {
			return fmt.Errorf("served by %s, outside %v", be, eps)
		}
		for _, d := range dst {
			if !slices.Contains(eps, d) {
				return fmt.Errorf("destination %v names %s, outside %v", dst, d, eps)
			}
		}
	}
	return nil
}

// rejected sends r and wants status, with nothing reaching the canary.
func (e *env) rejected(ctx context.Context, r request, status int) error {
	before := e.pool.canaryHits()
	resp, err := e.do(ctx, r)
	if err != nil {
		return err
	}
	if resp.status != status {
		be, _ := resp.backend()
		return fmt.Errorf("status %d (served by %q), want %d", resp.status, be, status)
	}
	if e.pool.canaryHits() != before {
		return errors.New("the canary was reached")
	}
	return nil
}

func (e *env) rejectedWithBody(ctx context.Context, r request, status int) error {
	resp, err := e.do(ctx, r)
	if err != nil {
		return err
	}
	if resp.status != status {
		return fmt.Errorf("status %d, want %d", resp.status, status)
	}
	if strings.TrimSpace(resp.body) == "" {
		return fmt.Errorf("%d with an empty body", status)
	}
	if strings.Contains(resp.header.Get("Content-Type"), "json") && !json.Valid([]byte(resp.body)) {
		return fmt.Errorf("content-type %s but the body is not JSON: %.200q", resp.header.Get("Content-Type"), resp.body)
	}
	return nil
}

func (e *env) fallbackList(ctx context.Context) error {
	r, err := e.directRoute(ctx, nil)
	if err != nil {
		return err
	}
	header, _, _ := destination(r)
	dst := splitList(header)
	if len(dst) < 2 {
		return fmt.Errorf("one endpoint (%q): no fallbacks offered", header)
	}
	seen := map[string]bool{}
	for _, d := range dst {
		if seen[d] || !slices.Contains(e.pool.Endpoints, d) {
			return fmt.Errorf("destination %q: %s repeated or not a pool endpoint", header, d)
		}
		seen[d] = true
	}
	return nil
}

// walk is what the fallback walk observed, for served/after-retry.
type walk struct {
	list   []string // the destination the refusing endpoint received
	served string   // the backend that answered
	echo   string   // x-conformance-test-served-endpoint
	err    error
}

// fallbackWalk makes the first endpoint refuse and sends requests whose
// subset hint names it and the second until one was picked there first.
func (e *env) fallbackWalk(ctx context.Context) error {
	w := e.doWalk(ctx)
	e.walked = &w
	return w.err
}

func (e *env) doWalk(ctx context.Context) walk {
	refuser, next := e.pool.backend(e.pool.Endpoints[0]), e.pool.Endpoints[1]
	refuser.refusing.Store(true)
	defer refuser.refusing.Store(false)
	hint := map[string]string{hdrSubsetList: subsetList(refuser.addr, next)}
	for range 12 {
		before := refuser.refused.Load()
		r, err := e.do(ctx, request{listener: "meta", stream: true, headers: hint})
		if err != nil {
			return walk{err: err}
		}
		if refuser.refused.Load() == before {
			continue // picked the other one first
		}
		w := walk{list: splitList(refuser.lastRefused()), echo: r.header.Get(testServedHeader)}
		w.served, _ = r.backend()
		switch {
		case r.status != http.StatusOK:
			w.err = fmt.Errorf("the picked endpoint refused and the client got %d: %.200q (destination %q)", r.status, r.body, w.list)
		case len(w.list) < 2:
			w.err = fmt.Errorf("the picker sent one endpoint (%q): the proxy's retry left its list and went to %s by its own load balancer", w.list, w.served)
		case w.served != w.list[1]:
			w.err = fmt.Errorf("served by %s, not the list's next endpoint %s", w.served, w.list[1])
		}
		return w
	}
	return walk{err: fmt.Errorf("in 12 requests the picker never chose %s first; the walk could not be observed", refuser.addr)}
}

const testServedHeader = "x-conformance-test-served-endpoint"

func (e *env) servedEcho(ctx context.Context) error {
	r, err := e.do(ctx, request{listener: "main", stream: true})
	if err != nil {
		return err
	}
	be, _, err := e.served(r, true)
	if err != nil {
		return err
	}
	if got := r.header.Get(testServedHeader); got != be {
		return fmt.Errorf("%s = %q, want the serving endpoint %s", testServedHeader, got, be)
	}
	return nil
}

func (e *env) servedAfterRetry(context.Context) error {
	w := e.walked
	if w == nil || len(w.list) < 2 || w.served == "" {
		return &errSkip{"no fallback walk was observed (fallback/walk)"}
	}
	if w.echo != w.served {
		return fmt.Errorf("%s = %q after the retry, want the endpoint that served, %s (picked %s)", testServedHeader, w.echo, w.served, w.list[0])
	}
	return nil
}

func (e *env) healthServing(ctx context.Context, svc string) error {
	var got []string
	for _, addr := range e.target.healthAddrs() {
		conn, err := dial(addr)
		if err != nil {
			return err
		}
		r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		conn.Close()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if err != nil {
			got = append(got, addr+": "+err.Error())
		} else {
			got = append(got, addr+": "+r.GetStatus().String())
		}
	}
	return fmt.Errorf("not SERVING: %s", strings.Join(got, "; "))
}

func (e *env) clientLeavesMidResponse(ctx context.Context) error {
	cctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, e.dp.url("main")+"/v1/chat/completions?stream=1",
		strings.NewReader(string(chatBody(true, 16))))
	if err != nil {
		cancel()
		return err
	}
	req.Header.Set(hdrSlow, "40")
	resp, err := e.http.Do(req)
	if err != nil {
		cancel()
		return err
	}
	buf := make([]byte, 64)
	_, err = resp.Body.Read(buf)
	cancel()
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("read the first chunk: %w", err)
	}
	return e.routedOnce(ctx, request{listener: "main", stream: true})
}

func (e *env) closeThenRoute(ctx context.Context, until func(*directStream) error) error {
	d, err := e.openDirect(ctx)
	if err != nil {
		return err
	}
	err = until(d)
	d.close()
	if err != nil {
		return err
	}
	r, err := e.directRoute(ctx, nil)
	if err != nil {
		return fmt.Errorf("after the early close: %w", err)
	}
	if h, _, _ := destination(r); h == "" {
		return fmt.Errorf("after the early close, no destination: %v", r)
	}
	return nil
}

func (e *env) requestTrailers(ctx context.Context) error {
	r, err := e.do(ctx, request{listener: "h2c", stream: true, headers: map[string]string{hdrTrailers: "1"},
		trailer: map[string]string{trlRequest: "t-1"}})
	if err != nil {
		return err
	}
	if _, _, err := e.served(r, true); err != nil {
		return err
	}
	if got := r.trailer.Get(trlEcho); got != "t-1" {
		return fmt.Errorf("the backend saw request trailer %q, want t-1 (response trailers %v)", got, r.trailer)
	}
	return nil
}

func (e *env) responseTrailers(ctx context.Context) error {
	r, err := e.do(ctx, request{listener: "h2c", stream: true, headers: map[string]string{hdrTrailers: "1"}})
	if err != nil {
		return err
	}
	if _, _, err := e.served(r, true); err != nil {
		return err
	}
	if got := r.trailer.Get(trlBackend); got != "done" {
		return fmt.Errorf("response trailer %s = %q, want done (got %v)", trlBackend, got, r.trailer)
	}
	return nil
}

func (e *env) concurrent(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, 32)
	for i := range errs {
		wg.Go(func() { errs[i] = e.routedOnce(ctx, request{listener: "main", stream: true, pad: 1024 * i}) })
	}
	wg.Wait()
	n, first := 0, error(nil)
	for _, err := range errs {
		if err != nil {
			n++
			first = cmp.Or(first, err)
		}
	}
	if n > 0 {
		return fmt.Errorf("%d of %d failed; the first: %w", n, len(errs), first)
	}
	return nil
}
