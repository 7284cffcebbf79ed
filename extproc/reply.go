package extproc

import (
	"encoding/json"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/warmpath/warmpath/scoring"
)

// maxChunk is the largest body chunk sent back to Envoy in one
// streamed_response; Envoy recommends at most 64 KiB.
const maxChunk = 64 << 10

// setHeader builds an overwriting header mutation entry. Envoy reads only
// raw_value and overwrites when append is unset.
func setHeader(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}}
}

// errorReply is an ImmediateResponse carrying a JSON error body shaped like
// the API the client used: Anthropic's on /v1/messages, OpenAI's elsewhere.
func errorReply(api scoring.API, status int, msg string, retryAfter int) *extprocv3.ProcessingResponse {
	body := errorBody(api, status, msg)
	hs := []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}
	if (status == 503 || status == 429) && retryAfter > 0 {
		hs = append(hs, setHeader("retry-after", strconv.Itoa(retryAfter)))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: hs},
			Body:    body,
			Details: "warmpath_" + strconv.Itoa(status),
		},
	}}
}

// errorBody renders the error object. OpenAI clients (and vLLM) use
// {"error": {"message", "type", "param", "code"}}; Anthropic clients use
// {"type": "error", "error": {"type", "message"}}.
func errorBody(api scoring.API, status int, msg string) []byte {
	var v any
	if api == scoring.APIMessages {
		v = map[string]any{"type": "error", "error": map[string]any{"type": anthropicErrorType(status), "message": msg}}
	} else {
		v = map[string]any{"error": map[string]any{"message": msg, "type": openAIErrorType(status), "param": nil, "code": status}}
	}
	b, _ := json.Marshal(v) // maps of strings and ints always marshal
	return b
}

func openAIErrorType(status int) string {
	switch status {
	case 400, 413:
		return "invalid_request_error"
	case 404:
		return "NotFoundError"
	case 429:
		return "RateLimitError"
	case 503:
		return "ServiceUnavailableError"
	}
	return "InternalServerError"
}

func anthropicErrorType(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 503:
		return "overloaded_error"
	}
	return "api_error"
}

// routeMutation is the common response that sends the request to dest (one
// ip:port, or an ordered ip:port,ip:port list): the destination header
// (overwriting anything the client sent), the clear_route_cache bit (Envoy
// honours it only next to a header mutation) and dynamic metadata under ns
// unless ns is empty, carrying the same value as the header and, when
// scores is not nil, the per-endpoint scores.
func routeMutation(header, ns, dest string, scores *structpb.Value) (*extprocv3.CommonResponse, *structpb.Struct) {
	cr := &extprocv3.CommonResponse{
		HeaderMutation:  &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader(header, dest)}},
		ClearRouteCache: true,
	}
	if ns == "" {
		return cr, nil
	}
	fields := map[string]*structpb.Value{header: structpb.NewStringValue(dest)}
	if scores != nil {
		fields[scoresKey] = scores
	}
	md := &structpb.Struct{Fields: map[string]*structpb.Value{
		ns: structpb.NewStructValue(&structpb.Struct{Fields: fields}),
	}}
	return cr, md
}

func requestHeadersReply(cr *extprocv3.CommonResponse, md *structpb.Struct) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{
		Response:        &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: cr}},
		DynamicMetadata: md,
	}
}

func requestBodyReply(cr *extprocv3.CommonResponse, md *structpb.Struct) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{
		Response:        &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: cr}},
		DynamicMetadata: md,
	}
}

// streamedChunk is one FULL_DUPLEX_STREAMED body piece for either direction.
func streamedChunk(response bool, b []byte, eos bool) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
		BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: eos},
		}},
	}}
	if response {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
}

var (
	emptyRequestBody = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{}}}
	emptyRequestTrailers = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
		RequestTrailers: &extprocv3.TrailersResponse{}}}
	emptyResponseBody = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{}}}
	emptyResponseTrailers = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extprocv3.TrailersResponse{}}}
)

func responseHeadersReply(set []*corev3.HeaderValueOption) *extprocv3.ProcessingResponse {
	hr := &extprocv3.HeadersResponse{}
	if len(set) > 0 {
		hr.Response = &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: hr}}
}
