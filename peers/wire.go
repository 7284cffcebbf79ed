package peers

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/warmpath/warmpath/scoring"
)

// The wire format. A frame is one gRPC message (a BytesValue) from a
// replica to a follower: a version byte, a kind byte, then the kind's
// body. Integers are varints; times are signed nanoseconds relative to the
// moment the frame was encoded, so the receiver maps them onto its own
// clock by adding the moment it decoded the frame (clock skew between
// replicas drops out; transit time, milliseconds, does not).
//
//	hello:  id u64, name str, advertise str, nonce [16] (follower's) or proof [32] (replica's)
//	events: base age uvarint (ns), n uvarint, then n events:
//	  reserved:    'R' id, worker str, decided, start, first, firstAt (0: none), prompt,
//	               uncached (float32 bits), blocks, ownBlocks, stream, seqs (version 3
//	               on), keys n + n×u64
//	  first token: 'F' id, at
//	  ended:       'E' id
//	  ended, with what its outcome taught (scoring.Lesson):
//	               'L' id, source str, ratio, fits (bit 0: TTFT, bit 1: decode),
//	               then per fit X[0..4], Y (and for TTFT, Seen); every float is float32 bits
//
// An events frame with no event is a heartbeat. Version 2 added 'L';
// version 3 the sequences a reservation decodes (n choices × prompts),
// which version 2 and older take as one. A replica speaks the follower's
// version, as its hello names it, down to version 1 (downgrade drops what
// the older version lacks), and a follower whose version a replica refuses
// says hello again one version older, so that replicas of any two versions
// share their ledgers during a rolling upgrade.

const (
	wireVersion = 3
	// minWireVersion is the oldest version spoken.
	minWireVersion = 1
)

// Frame kinds.
const (
	kindHello  byte = 'H'
	kindEvents byte = 'V'
)

// Event tags.
const (
	tagReserved byte = 'R'
	tagFirst    byte = 'F'
	tagEnded    byte = 'E'
	tagLesson   byte = 'L'
)

// Bits of a lesson's fits byte.
const (
	fitTTFT   byte = 1
	fitDecode byte = 2
)

// maxLessonSeconds bounds a lesson's times, as calibration bounds the
// outcomes it believes (an hour).
const maxLessonSeconds = 3600

// Limits a decoder enforces, so a bad frame cannot make it allocate
// without bound.
const (
	maxFrameEvents = 1 << 16
	maxString      = 1 << 10
	maxSpecKeys    = 1 << 20
	maxSeqs        = scoring.MaxSequences
)

// ErrFrame is wrapped by every decoding error.
var ErrFrame = errors.New("peers: malformed frame")

// hello opens a stream in each direction: the follower's carries a nonce,
// the replica's the proof that it knows the token (HMAC of the nonce).
type hello struct {
	// Version is the wire version the hello is in (0: wireVersion): the
	// follower's is the one it speaks, the replica's the one it answers in.
	Version   byte
	ID        uint64
	Name      string
	Advertise string
	// Nonce (from a follower) or Proof (from a replica).
	Nonce [16]byte
	Proof [32]byte
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendHello encodes h; proof selects which of Nonce and Proof is sent.
func appendHello(b []byte, h hello, proof bool) []byte {
	v := h.Version
	if v == 0 {
		v = wireVersion
	}
	b = append(b, v, kindHello)
	b = binary.AppendUvarint(b, h.ID)
	b = appendString(b, h.Name)
	b = appendString(b, h.Advertise)
	if proof {
		return append(b, h.Proof[:]...)
	}
	return append(b, h.Nonce[:]...)
}

// encoder builds events frames. It is not safe for concurrent use.
type encoder struct {
	b  []byte
	n  int
	at time.Time // the moment times are relative to
	// v is the wire version it encodes (0: wireVersion); an older one's
	// events leave out what it lacks.
	v byte
}

func (e *encoder) version() byte {
	if e.v == 0 {
		return wireVersion
	}
	return e.v
}

// reset starts a frame whose times are relative to at.
func (e *encoder) reset(at time.Time) {
	e.b, e.n, e.at = e.b[:0], 0, at
}

func (e *encoder) rel(t time.Time) {
	if t.IsZero() {
		e.b = binary.AppendVarint(e.b, math.MinInt64)
		return
	}
	e.b = binary.AppendVarint(e.b, int64(t.Sub(e.at)))
}

func (e *encoder) reserved(a *scoring.SharedAssignment) {
	e.n++
	e.b = append(e.b, tagReserved)
	e.b = binary.AppendUvarint(e.b, a.ID)
	e.b = appendString(e.b, a.Worker)
	e.rel(a.Decided)
	e.rel(a.Start)
	e.rel(a.First)
	e.rel(a.FirstAt)
	e.b = binary.AppendUvarint(e.b, uint64(max(a.Prompt, 0)))
	e.b = binary.LittleEndian.AppendUint32(e.b, math.Float32bits(float32(a.Uncached)))
	e.b = binary.AppendUvarint(e.b, uint64(max(a.Blocks, 0)))
	e.b = binary.AppendUvarint(e.b, uint64(max(a.OwnBlocks, 0)))
	s := byte(0)
	if a.Stream {
		s = 1
	}
	e.b = append(e.b, s)
	if e.version() >= 3 {
		e.b = binary.AppendUvarint(e.b, uint64(min(max(a.Seqs, 0), maxSeqs)))
	}
	e.b = binary.AppendUvarint(e.b, uint64(len(a.SpecKeys)))
	for _, k := range a.SpecKeys {
		e.b = binary.LittleEndian.AppendUint64(e.b, k)
	}
}

func (e *encoder) firstToken(id uint64, at time.Time) {
	e.n++
	e.b = append(e.b, tagFirst)
	e.b = binary.AppendUvarint(e.b, id)
	e.rel(at)
}

// ended encodes the end of id, with l when it teaches anything and the
// version has lessons.
func (e *encoder) ended(id uint64, l *scoring.Lesson) {
	e.n++
	if l == nil || !l.Teaches() || e.version() < 2 {
		e.b = append(e.b, tagEnded)
		e.b = binary.AppendUvarint(e.b, id)
		return
	}
	e.b = append(e.b, tagLesson)
	e.b = binary.AppendUvarint(e.b, id)
	e.b = appendString(e.b, l.Source)
	e.f32(l.Ratio)
	var fits byte
	if l.TTFT.OK {
		fits |= fitTTFT
	}
	if l.Decode.OK {
		fits |= fitDecode
	}
	e.b = append(e.b, fits)
	if l.TTFT.OK {
		e.fit(&l.TTFT)
		e.f32(l.TTFT.Seen)
	}
	if l.Decode.OK {
		e.fit(&l.Decode)
	}
}

func (e *encoder) f32(v float64) {
	e.b = binary.LittleEndian.AppendUint32(e.b, math.Float32bits(float32(v)))
}

func (e *encoder) fit(f *scoring.Fit) {
	for _, x := range f.X {
		e.f32(x)
	}
	e.f32(f.Y)
}

// frame returns the events frame, sent at now: header, the age of the
// times' base (now − the reset's moment), count, events. The result is a
// new slice the caller owns.
func (e *encoder) frame(now time.Time) []byte {
	out := make([]byte, 0, len(e.b)+20)
	out = append(out, e.version(), kindEvents)
	out = binary.AppendUvarint(out, uint64(max(now.Sub(e.at), 0)))
	out = binary.AppendUvarint(out, uint64(e.n))
	return append(out, e.b...)
}

// reader decodes a frame.
type reader struct {
	b   []byte
	off int
	err error
	// version is the frame's, once its header is read.
	version byte
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: byte %d: %s", ErrFrame, r.off, fmt.Sprintf(format, args...))
	}
}

func (r *reader) byte1() byte {
	if r.err != nil || r.off >= len(r.b) {
		r.fail("short")
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail("bad uvarint")
		return 0
	}
	r.off += n
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.off += n
	return v
}

func (r *reader) take(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b)-r.off {
		r.fail("short by %d bytes", n-(len(r.b)-r.off))
		return nil
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p
}

func (r *reader) str() string {
	n := r.uvarint()
	if n > maxString {
		r.fail("string of %d bytes", n)
		return ""
	}
	return string(r.take(int(n)))
}

func (r *reader) f32() float64 {
	if b := r.take(4); b != nil {
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	}
	return 0
}

// lesson decodes the body of an 'L' event into l. Features must be finite
// and not negative, times in (0, maxLessonSeconds], the ratio finite and
// not negative, and at least one fit present.
func (r *reader) lesson(l *scoring.Lesson) {
	l.Source = r.str()
	l.Ratio = r.f32()
	fits := r.byte1()
	if r.err == nil && (fits == 0 || fits&^(fitTTFT|fitDecode) != 0) {
		r.fail("lesson fits %#x", fits)
		return
	}
	if !(l.Ratio >= 0) || math.IsInf(l.Ratio, 0) {
		r.fail("lesson ratio %v", l.Ratio)
	}
	if fits&fitTTFT != 0 {
		r.fit(&l.TTFT)
		l.TTFT.Seen = r.f32()
		r.seconds(l.TTFT.Seen)
	}
	if fits&fitDecode != 0 {
		r.fit(&l.Decode)
		l.Decode.Seen = l.Decode.Y
	}
}

func (r *reader) fit(f *scoring.Fit) {
	f.OK = true
	for i := range f.X {
		f.X[i] = r.f32()
		if x := f.X[i]; !(x >= 0) || math.IsInf(x, 0) {
			r.fail("lesson feature %v", x)
		}
	}
	f.Y = r.f32()
	r.seconds(f.Y)
}

func (r *reader) seconds(v float64) {
	if r.err == nil && !(v > 0 && v <= maxLessonSeconds) {
		r.fail("lesson time %v s", v)
	}
}

// at maps a relative time onto base; math.MinInt64 is the zero time.
func (r *reader) at(base time.Time) time.Time {
	v := r.varint()
	if v == math.MinInt64 || r.err != nil {
		return time.Time{}
	}
	return base.Add(time.Duration(v))
}

// header checks the version and returns the frame's kind.
func (r *reader) header() byte {
	if r.version = r.byte1(); r.err == nil && (r.version < minWireVersion || r.version > wireVersion) {
		r.fail("version %d, want %d to %d", r.version, minWireVersion, wireVersion)
	}
	k := r.byte1()
	if r.err == nil && k != kindHello && k != kindEvents {
		r.fail("kind %q", k)
	}
	return k
}

// decodeHello decodes a hello frame; proof says which of nonce and proof
// it carries.
func decodeHello(b []byte, proof bool) (hello, error) {
	r := reader{b: b}
	var h hello
	if k := r.header(); r.err == nil && k != kindHello {
		r.fail("kind %q, want hello", k)
	}
	h.Version = r.version
	h.ID = r.uvarint()
	h.Name = r.str()
	h.Advertise = r.str()
	if proof {
		copy(h.Proof[:], r.take(len(h.Proof)))
	} else {
		copy(h.Nonce[:], r.take(len(h.Nonce)))
	}
	if r.err == nil && r.off != len(b) {
		r.fail("%d trailing bytes", len(b)-r.off)
	}
	return h, r.err
}

// decodeEvents appends the events of an events frame to dst, with times on
// the receiver's clock: arrived is when the frame arrived. It returns dst
// unchanged and an error wrapping ErrFrame when the frame is malformed.
func decodeEvents(dst []scoring.PeerEvent, b []byte, arrived time.Time) ([]scoring.PeerEvent, error) {
	r := reader{b: b}
	if k := r.header(); r.err == nil && k != kindEvents {
		r.fail("kind %q, want events", k)
	}
	base := arrived.Add(-time.Duration(min(r.uvarint(), math.MaxInt64)))
	n := r.uvarint()
	if n > maxFrameEvents {
		r.fail("%d events", n)
	}
	out := dst
	for i := uint64(0); i < n && r.err == nil; i++ {
		switch tag := r.byte1(); tag {
		case tagReserved:
			var a scoring.SharedAssignment
			a.ID = r.uvarint()
			a.Worker = r.str()
			a.Decided, a.Start, a.First, a.FirstAt = r.at(base), r.at(base), r.at(base), r.at(base)
			a.Prompt = int(min(r.uvarint(), math.MaxInt32))
			if u := r.take(4); u != nil {
				a.Uncached = float64(math.Float32frombits(binary.LittleEndian.Uint32(u)))
			}
			a.Blocks = int(min(r.uvarint(), math.MaxInt32))
			a.OwnBlocks = int(min(r.uvarint(), math.MaxInt32))
			a.Stream = r.byte1() == 1
			if r.version >= 3 {
				seqs := r.uvarint()
				if seqs > maxSeqs {
					r.fail("%d sequences", seqs)
					break
				}
				a.Seqs = int(seqs)
			}
			k := r.uvarint()
			if k > maxSpecKeys {
				r.fail("%d speculated keys", k)
				break
			}
			if raw := r.take(int(k) * 8); raw != nil && k > 0 {
				a.SpecKeys = make([]uint64, k)
				for j := range a.SpecKeys {
					a.SpecKeys[j] = binary.LittleEndian.Uint64(raw[8*j:])
				}
			}
			if !(a.Uncached >= 0) || math.IsInf(a.Uncached, 0) {
				r.fail("uncached tokens %v", a.Uncached)
			}
			if a.Worker == "" {
				r.fail("reservation without a worker")
			}
			out = append(out, scoring.PeerEvent{Kind: scoring.PeerReserved, Assignment: a})
		case tagFirst:
			id := r.uvarint()
			at := r.at(base)
			out = append(out, scoring.PeerEvent{Kind: scoring.PeerFirstToken, ID: id, At: at})
		case tagEnded:
			out = append(out, scoring.PeerEvent{Kind: scoring.PeerEnded, ID: r.uvarint()})
		case tagLesson:
			if r.version < 2 {
				r.fail("a lesson in a version %d frame", r.version)
				break
			}
			ev := scoring.PeerEvent{Kind: scoring.PeerEnded, ID: r.uvarint()}
			r.lesson(&ev.Lesson)
			out = append(out, ev)
		default:
			r.fail("event tag %q", tag)
		}
	}
	if r.err == nil && r.off != len(b) {
		r.fail("%d trailing bytes", len(b)-r.off)
	}
	if r.err != nil {
		return dst, r.err
	}
	return out, nil
}

// downgrade re-encodes events frame f for a follower of wire version v:
// the same events, without what v lacks (lessons before version 2, a
// reservation's sequences before 3). Times keep their offsets from the
// frame's send time.
func downgrade(f []byte, v byte) ([]byte, error) {
	at := time.Unix(0, 0)
	evs, err := decodeEvents(nil, f, at)
	if err != nil {
		return nil, err
	}
	e := encoder{v: v}
	e.reset(at)
	e.events(evs)
	return e.frame(at), nil
}

// events encodes decoded events again.
func (e *encoder) events(evs []scoring.PeerEvent) {
	for i := range evs {
		switch ev := &evs[i]; ev.Kind {
		case scoring.PeerReserved:
			e.reserved(&ev.Assignment)
		case scoring.PeerFirstToken:
			e.firstToken(ev.ID, ev.At)
		case scoring.PeerEnded:
			e.ended(ev.ID, &ev.Lesson)
		}
	}
}
