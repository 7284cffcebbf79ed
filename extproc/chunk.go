package extproc

import (
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
	fieldRequestBody      protowire.Number = 3 // ProcessingResponse.request_body
	fieldResponseBody     protowire.Number = 4 // ProcessingResponse.response_body
	fieldCommonResponse   protowire.Number = 1 // BodyResponse.response
	fieldBodyMutation     protowire.Number = 3 // CommonResponse.body_mutation
	fieldStreamedResponse protowire.Number = 3 // BodyMutation.streamed_response
	fieldPieceBody        protowire.Number = 1 // StreamedBodyResponse.body
	fieldPieceEndOfStream protowire.Number = 2 // StreamedBodyResponse.end_of_stream
)

func newChunkReply(response bool) *chunkReply {
	m := streamedChunk(response, nil, false)
	field, br := fieldRequestBody, m.GetRequestBody()
	if response {
		field, br = fieldResponseBody, m.GetResponseBody()
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
