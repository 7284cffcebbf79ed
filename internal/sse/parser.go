package sse

import (
	"bytes"
	"errors"
)

var (
	// ErrEventTooLarge is returned by Feed when a line, or the data of one
	// event, exceeds Parser.MaxEventBytes.
	ErrEventTooLarge = errors.New("sse: event exceeds size limit")
	// ErrTruncated is returned by Finish when the body ended inside an
	// event: in a line without its line ending, or before the blank line
	// that dispatches an event with data.
	ErrTruncated = errors.New("sse: stream ended inside an event")
)

// Parser splits a text/event-stream body into events incrementally: Feed
// takes the body in pieces cut anywhere, and Finish or Flush ends it.
//
// The zero value is ready to use and buffers without bound. A Parser is not
// safe for concurrent use. It never modifies the bytes it is fed and keeps
// no reference to them once Feed returns; it copies what a line or event
// needs across Feed calls into buffers it reuses, so a long stream costs no
// allocation per event once the buffers have grown to the largest event.
type Parser struct {
	// MaxEventBytes bounds, in bytes, one line (without its line ending)
	// and the data of one event (its data values joined by LF): Feed
	// returns ErrEventTooLarge when either would exceed it. The default, 0,
	// is no bound: the Parser holds whatever one line or event carries.
	MaxEventBytes int

	line      []byte // the current line, when it spans Feed calls
	data      []byte // the current event's data values, joined by LF
	hasData   bool   // a data line was seen (data may still be empty)
	event     []byte // the current event's name, from its last event line
	crPending bool   // the last byte fed was a CR ending a line: a leading LF belongs to it
}

// Feed parses b, the next piece of the body, and calls emit for each event
// it completes, in order, with the event's name (empty when the stream sent
// none) and its data. Both slices are valid only until emit returns and
// must not be modified. emit must not call the Parser's methods.
//
// Feed returns the first error from emit, or ErrEventTooLarge, and leaves
// the rest of b unread; the Parser's state is then unspecified until
// Finish or Flush resets it.
func (p *Parser) Feed(b []byte, emit func(event, data []byte) error) error {
	if p.crPending && len(b) > 0 {
		p.crPending = false
		if b[0] == '\n' {
			b = b[1:]
		}
	}
	// cr and lf index the next CR and LF at or after off, or are -1 when
	// the rest of b has none; each is searched for again only once passed,
	// so b is scanned at most twice whatever its line endings.
	off, cr, lf := 0, bytes.IndexByte(b, '\r'), bytes.IndexByte(b, '\n')
	for off < len(b) {
		if cr >= 0 && cr < off {
			cr = indexFrom(b, off, '\r')
		}
		if lf >= 0 && lf < off {
			lf = indexFrom(b, off, '\n')
		}
		end := lf
		if cr >= 0 && (lf < 0 || cr < lf) {
			end = cr
		}
		if end < 0 {
			if p.tooLarge(len(p.line) + len(b) - off) {
				return ErrEventTooLarge
			}
			p.line = append(p.line, b[off:]...)
			return nil
		}
		line := b[off:end]
		if p.tooLarge(len(p.line) + len(line)) {
			return ErrEventTooLarge
		}
		if len(p.line) > 0 {
			p.line = append(p.line, line...)
			line = p.line
		}
		off = end + 1
		if b[end] == '\r' {
			if off == len(b) {
				p.crPending = true
			} else if b[off] == '\n' {
				off++
			}
		}
		err := p.field(line, emit)
		p.line = p.line[:0]
		if err != nil {
			return err
		}
	}
	return nil
}

// Finish ends the body and resets the Parser for another. It returns
// ErrTruncated when a partial line or an event with data but without its
// blank line remains; as the event-stream rules require, that remainder is
// discarded, not emitted.
func (p *Parser) Finish() error {
	truncated := len(p.line) > 0 || p.hasData
	p.reset()
	if truncated {
		return ErrTruncated
	}
	return nil
}

// Flush ends the body as though a line ending and a blank line followed it,
// for a caller that wants what a cut-off stream did send: a partial line is
// taken as complete, and an event with data is emitted as Feed would. It
// then resets the Parser for another body, and returns the error from emit,
// or ErrEventTooLarge when the partial line overflows the event's data.
func (p *Parser) Flush(emit func(event, data []byte) error) error {
	var err error
	if len(p.line) > 0 {
		err = p.field(p.line, emit)
	}
	if err == nil {
		err = p.dispatch(emit)
	}
	p.reset()
	return err
}

// field applies one complete line.
func (p *Parser) field(line []byte, emit func(event, data []byte) error) error {
	if len(line) == 0 {
		return p.dispatch(emit)
	}
	if line[0] == ':' { // a comment, or a keep-alive
		return nil
	}
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) {
	case "data":
		n := len(p.data) + len(value)
		if p.hasData {
			n++
		}
		if p.tooLarge(n) {
			return ErrEventTooLarge
		}
		if p.hasData {
			p.data = append(p.data, '\n')
		}
		p.data = append(p.data, value...)
		p.hasData = true
	case "event":
		p.event = append(p.event[:0], value...)
	}
	return nil
}

// dispatch ends the current event at a blank line, emitting it if it has
// data.
func (p *Parser) dispatch(emit func(event, data []byte) error) error {
	var err error
	if p.hasData {
		err = emit(p.event, p.data)
	}
	p.data, p.hasData, p.event = p.data[:0], false, p.event[:0]
	return err
}

func (p *Parser) reset() {
	p.line, p.data, p.event = p.line[:0], p.data[:0], p.event[:0]
	p.hasData, p.crPending = false, false
}

func (p *Parser) tooLarge(n int) bool { return p.MaxEventBytes > 0 && n > p.MaxEventBytes }

// indexFrom is bytes.IndexByte(b[off:], c) as an index into b.
func indexFrom(b []byte, off int, c byte) int {
	if i := bytes.IndexByte(b[off:], c); i >= 0 {
		return off + i
	}
	return -1
}
