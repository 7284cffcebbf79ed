// Package sse splits a text/event-stream body (Server-Sent Events) into
// events, incrementally, following the WHATWG event-stream rules: lines end
// in LF, CRLF or CR; a line starting with a colon is a comment; "data" lines
// accumulate, joined by LF; "event" names the event; a blank line dispatches
// the event when it has data. Other fields ("id", "retry", unknown names) are
// ignored.
//
// A Parser is fed the body as it arrives, split anywhere — between the CR
// and LF of a line ending, inside a field name, inside a UTF-8 sequence — and
// hands each complete event to a callback without copying the body more
// than once. It only reads what it is fed, so a proxy can watch a stream
// that it passes on unchanged.
//
// Two callers share it: extproc's response watcher, which sees every chunk
// vLLM sends through Envoy and must never fail a response, and the replay
// client, which bounds each event and fails a response that exceeds the
// bound or stops inside an event.
package sse
