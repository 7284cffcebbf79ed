package extproc

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// chunkReply is the FULL_DUPLEX_STREAMED body piece warmpath sends back for
// each chunk of one direction of an exchange: a response streams one chunk
// per token, so the reply is built once per exchange and direction and
// refilled chunk by chunk (gRPC has encoded a message when Send returns).
//
// It is the ProcessingResponse of streamedChunk, which any proto codec
// marshals, and it writes its own wire form (grpcbuf.WireAppender), which
// warmpath's codec sends without proto's reflection.
type chunkReply struct {
	*extprocv3.ProcessingResponse
	piece *extprocv3.StreamedBodyResponse
	field protowire.Number // ProcessingResponse's request_body or response_body
}

// The field numbers of the path from a ProcessingResponse to its streamed
// body (envoy/service/ext_proc/v3/external_processor.proto).
const (
	replyRequestBody      protowire.Number = 3 // ProcessingResponse.request_body
	replyResponseBody     protowire.Number = 4 // ProcessingResponse.response_body
	fieldCommonResponse   protowire.Number = 1 // BodyResponse.response
	fieldBodyMutation     protowire.Number = 3 // CommonResponse.body_mutation
	fieldStreamedResponse protowire.Number = 3 // BodyMutation.streamed_response
	fieldPieceBody        protowire.Number = 1 // StreamedBodyResponse.body
	fieldPieceEndOfStream protowire.Number = 2 // StreamedBodyResponse.end_of_stream
)

func newChunkReply(response bool) *chunkReply {
	m := streamedChunk(response, nil, false)
	field, br := replyRequestBody, m.GetRequestBody()
	if response {
		field, br = replyResponseBody, m.GetResponseBody()
	}
	return &chunkReply{
		ProcessingResponse: m,
		piece:              br.GetResponse().GetBodyMutation().GetStreamedResponse(),
		field:              field,
	}
}

// fill makes the reply carry b, the end of the stream when eos.
func (c *chunkReply) fill(b []byte, eos bool) *chunkReply {
	c.piece.Body, c.piece.EndOfStream = b, eos
	return c
}

// sizes returns the lengths of the nested messages, innermost first: the
// streamed piece, the body mutation, the common response and the body
// response. Proto3 leaves out an empty body and a false end of stream.
func (c *chunkReply) sizes() (piece, mutation, common, body int) {
	if n := len(c.piece.Body); n > 0 {
		piece = protowire.SizeTag(fieldPieceBody) + protowire.SizeBytes(n)
	}
	if c.piece.EndOfStream {
		piece += protowire.SizeTag(fieldPieceEndOfStream) + protowire.SizeVarint(1)
	}
	mutation = protowire.SizeTag(fieldStreamedResponse) + protowire.SizeBytes(piece)
	common = protowire.SizeTag(fieldBodyMutation) + protowire.SizeBytes(mutation)
	body = protowire.SizeTag(fieldCommonResponse) + protowire.SizeBytes(common)
	return piece, mutation, common, body
}

// WireSize is the length of the reply's wire form.
func (c *chunkReply) WireSize() int {
	_, _, _, body := c.sizes()
	return protowire.SizeTag(c.field) + protowire.SizeBytes(body)
}

// AppendWire appends what proto.Marshal writes for the reply.
func (c *chunkReply) AppendWire(b []byte) []byte {
	piece, mutation, common, body := c.sizes()
	for _, f := range [...]struct {
		num protowire.Number
		len int
	}{{c.field, body}, {fieldCommonResponse, common}, {fieldBodyMutation, mutation}, {fieldStreamedResponse, piece}} {
		b = protowire.AppendTag(b, f.num, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(f.len))
	}
	if len(c.piece.Body) > 0 {
		b = protowire.AppendTag(b, fieldPieceBody, protowire.BytesType)
		b = protowire.AppendBytes(b, c.piece.Body)
	}
	if c.piece.EndOfStream {
		b = protowire.AppendTag(b, fieldPieceEndOfStream, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return b
}

// received is the ProcessingRequest an exchange's loop receives into,
// reused message to message. A response body chunk that carries nothing
// else but an empty metadata context (Envoy sends one when it forwards no
// namespace), which Envoy sends once per token, it reads itself into
// wrappers and a buffer of its own (grpcbuf.WireReader): nothing of such
// a chunk is kept past its handling (the watcher copies what it keeps, and
// the echo is encoded before Send returns). Every other message warmpath's
// codec, or any other, unmarshals into the ProcessingRequest, which proto
// resets first without touching the messages it held.
type received struct {
	*extprocv3.ProcessingRequest
	chunk extprocv3.ProcessingRequest_ResponseBody
	body  extprocv3.HttpBody
	meta  corev3.Metadata
	buf   []byte
}

// The fields of a response body chunk (envoy/service/ext_proc/v3/external_processor.proto).
const (
	chunkResponseBody    protowire.Number = 5 // ProcessingRequest.response_body
	chunkMetadata        protowire.Number = 8 // ProcessingRequest.metadata_context
	fieldHTTPBody        protowire.Number = 1 // HttpBody.body
	fieldHTTPEndOfStream protowire.Number = 2 // HttpBody.end_of_stream
)

func newReceived() *received {
	r := &received{ProcessingRequest: &extprocv3.ProcessingRequest{}}
	r.chunk.ResponseBody = &r.body
	return r
}

// ReadWire reads data when it is a ProcessingRequest of a response_body
// and at most an empty metadata_context, whose HttpBody has at most a body
// and an end of stream, each field at most once; it declines anything
// else, untouched.
func (r *received) ReadWire(data []byte) bool {
	var chunk []byte
	var sawChunk, sawMeta bool
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 || typ != protowire.BytesType {
			return false
		}
		v, m := protowire.ConsumeBytes(data[n:])
		switch {
		case m < 0:
			return false
		case num == chunkResponseBody && !sawChunk:
			chunk, sawChunk = v, true
		case num == chunkMetadata && !sawMeta && len(v) == 0:
			sawMeta = true
		default:
			return false
		}
		data = data[n+m:]
	}
	if !sawChunk {
		return false
	}
	body, eos, ok := readHTTPBody(chunk)
	if !ok {
		return false
	}
	r.ProcessingRequest.Reset()
	r.body.Reset()
	r.buf = append(r.buf[:0], body...)
	r.body.Body, r.body.EndOfStream = r.buf, eos
	r.Request = &r.chunk
	if sawMeta {
		r.meta.Reset()
		r.MetadataContext = &r.meta
	}
	return true
}

// readHTTPBody reads an HttpBody of at most a body and an end of stream,
// each at most once.
func readHTTPBody(data []byte) (body []byte, eos, ok bool) {
	var sawBody, sawEOS bool
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return nil, false, false
		}
		data = data[n:]
		switch {
		case num == fieldHTTPBody && typ == protowire.BytesType && !sawBody:
			body, n = protowire.ConsumeBytes(data)
			sawBody = true
		case num == fieldHTTPEndOfStream && typ == protowire.VarintType && !sawEOS:
			var v uint64
			v, n = protowire.ConsumeVarint(data)
			eos, sawEOS = v != 0, true
		default:
			return nil, false, false
		}
		if n < 0 {
			return nil, false, false
		}
		data = data[n:]
	}
	return body, eos, true
}
