package replay

import (
	"bytes"
	"errors"
)

// maxEventBytes bounds one SSE event (all its data lines together) and one
// pending line. A response that exceeds it is failed with errEventTooLarge
// rather than buffered without limit.
const maxEventBytes = 8 << 20

var (
	errEventTooLarge = errors.New("sse: event exceeds size limit")
	errTruncated     = errors.New("sse: stream ended inside an event")
)

// sseParser splits a text/event-stream body into events, incrementally: the
// body may arrive split anywhere, including between the CR and LF of a line
// ending or inside a UTF-8 sequence. It follows the WHATWG event-stream
// rules: lines end in LF, CRLF or CR; "data" lines accumulate joined by LF;
// "event" sets the event name; comments (":") and other fields are ignored;
// a blank line dispatches the event if it has data.
//
// The zero value is ready to use. An sseParser is not safe for concurrent use.
type sseParser struct {
	line    []byte // bytes of the current, unterminated line
	data    []byte // data of the current event, each line followed by LF
	hasData bool
	event   string
	// crPending records that the last byte fed was a CR ending a line, so a
	// following LF belongs to the same line ending.
	crPending bool
}

// feed parses b and calls emit for each complete event, with the event name
// ("" when the stream sent none) and its data, which emit must not retain.
// It returns the first error from emit, or errEventTooLarge.
func (p *sseParser) feed(b []byte, emit func(event string, data []byte) error) error {
	for len(b) > 0 {
		if p.crPending {
			p.crPending = false
			if b[0] == '\n' {
				b = b[1:]
				continue
			}
		}
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			if len(p.line)+len(b) > maxEventBytes {
				return errEventTooLarge
			}
			p.line = append(p.line, b...)
			return nil
		}
		if len(p.line)+i > maxEventBytes {
			return errEventTooLarge
		}
		var line []byte
		if len(p.line) > 0 {
			p.line = append(p.line, b[:i]...)
			line = p.line
		} else {
			line = b[:i]
		}
		if b[i] == '\r' {
			p.crPending = true
		}
		b = b[i+1:]
		if err := p.processLine(line, emit); err != nil {
			return err
		}
		p.line = p.line[:0]
	}
	return nil
}

// finish reports whether the stream ended cleanly: errTruncated when a
// partial line or an undispatched event remains. Per the event-stream rules
// such an event is discarded, not emitted.
func (p *sseParser) finish() error {
	if len(p.line) > 0 || p.hasData {
		return errTruncated
	}
	return nil
}

func (p *sseParser) processLine(line []byte, emit func(string, []byte) error) error {
	if len(line) == 0 {
		if !p.hasData {
			p.event = ""
			return nil
		}
		data := p.data[:len(p.data)-1] // drop the final LF
		err := emit(p.event, data)
		p.data = p.data[:0]
		p.hasData = false
		p.event = ""
		return err
	}
	if line[0] == ':' {
		return nil
	}
	field, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		field, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(field) {
	case "data":
		if len(p.data)+len(value)+1 > maxEventBytes {
			return errEventTooLarge
		}
		p.data = append(p.data, value...)
		p.data = append(p.data, '\n')
		p.hasData = true
	case "event":
		p.event = string(value)
	}
	return nil
}
