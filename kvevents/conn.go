package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/zeromq/goczmq"
	"golang.org/x/sys/unix"
)

// Message is one KV-event message as published: topic, sequence number and
// the msgpack KVEventBatch payload.
type Message struct {
	Topic   string
	Seq     uint64
	Payload []byte
	// Replayed is true for messages that came from the replay socket.
	Replayed bool
}

// endSeq is the replay end marker; it is never a data sequence number.
const endSeq = ^uint64(0)

// Errors of the socket layer.
var (
	// ErrFrame means a message did not have the frames vLLM sends.
	ErrFrame = errors.New("kv events: malformed message frames")
	// ErrReplayTimeout means the replay endpoint did not finish in time.
	ErrReplayTimeout = errors.New("kv events: replay timed out")
)

// pollInterval bounds how long a socket wait blocks before the context is
// checked again.
const pollInterval = 100 * time.Millisecond

// parseLive reads a live SUB message: [topic, seq(8+ bytes BE), payload].
func parseLive(frames [][]byte) (Message, error) {
	if len(frames) != 3 || len(frames[1]) < 8 {
		return Message{}, fmt.Errorf("%w: %d frames", ErrFrame, len(frames))
	}
	return Message{Topic: string(frames[0]), Seq: binary.BigEndian.Uint64(frames[1][:8]), Payload: frames[2]}, nil
}

// parseReplay reads one message a DEALER receives from vLLM's replay
// ROUTER: ["", seq, payload] (vLLM ≤ 0.23) or ["", topic, seq, payload],
// with seq all 0xFF and an empty payload at the end. end reports the marker.
func parseReplay(frames [][]byte) (m Message, end bool, err error) {
	if len(frames) > 0 && len(frames[0]) == 0 && len(frames) >= 3 {
		frames = frames[1:]
	}
	var seq []byte
	switch len(frames) {
	case 2:
		seq, m.Payload = frames[0], frames[1]
	case 3:
		m.Topic, seq, m.Payload = string(frames[0]), frames[1], frames[2]
	default:
		return Message{}, false, fmt.Errorf("%w: %d replay frames", ErrFrame, len(frames))
	}
	if len(seq) < 8 {
		return Message{}, false, fmt.Errorf("%w: replay seq of %d bytes", ErrFrame, len(seq))
	}
	m.Seq = binary.BigEndian.Uint64(seq[:8])
	m.Replayed = true
	return m, m.Seq == endSeq || len(m.Payload) == 0, nil
}

// RankEndpoint returns the endpoint of data-parallel rank r given rank 0's:
// for tcp the port is offset by r, for ipc and inproc "_dp<r>" is appended,
// as vLLM does. Rank 0 and port 0 are returned unchanged.
func RankEndpoint(endpoint string, rank int) (string, error) {
	if rank == 0 {
		return endpoint, nil
	}
	if rest, ok := strings.CutPrefix(endpoint, "tcp://"); ok {
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			return "", fmt.Errorf("endpoint %q has no port", endpoint)
		}
		port, err := strconv.Atoi(rest[i+1:])
		if err != nil || port < 0 || port+rank > 65535 {
			return "", fmt.Errorf("endpoint %q: bad port for rank %d", endpoint, rank)
		}
		if port == 0 {
			return endpoint, nil
		}
		return "tcp://" + rest[:i+1] + strconv.Itoa(port+rank), nil
	}
	if strings.HasPrefix(endpoint, "ipc://") || strings.HasPrefix(endpoint, "inproc://") {
		return endpoint + "_dp" + strconv.Itoa(rank), nil
	}
	if u, err := url.Parse(endpoint); err == nil && u.Scheme != "" {
		return "", fmt.Errorf("endpoint %q: unsupported scheme %q", endpoint, u.Scheme)
	}
	return "", fmt.Errorf("endpoint %q: want tcp://host:port, ipc:// or inproc://", endpoint)
}

// czmqInit runs CZMQ's process-wide initialisation once. CZMQ initialises
// itself lazily on the first socket and asserts if another thread creates a
// socket meanwhile, so every socket this package makes is created after it.
// This is the C library's global state, not the package's.
var czmqInit = sync.OnceFunc(func() {
	s := goczmq.NewSock(goczmq.Pub)
	s.Destroy()
})

// conn is one stream's sockets: a SUB for live messages and, when a replay
// endpoint is set, a DEALER made per replay. A conn belongs to one goroutine.
//
// Live messages are waited for on Go's network poller, not in libzmq: ready
// watches a duplicate of the SUB socket's ZMQ_FD, which libzmq signals when
// the socket's state may have changed, and ZMQ_EVENTS says whether a whole
// message is there. A wait inside a cgo call holds an OS thread per stream
// and keeps the runtime's monitor thread waking to hand the waiting
// thread's processor to other goroutines; on the poller a waiting stream
// costs neither, and the cgo calls left (the events check, the receive)
// return at once.
//
// The events check can say a message is there when none is: a test
// stack hung with a stream blocked in a receive after the check had
// promised a message. The likely cause, not reproduced in isolation, is
// that czmq's zsock_events returns an unset value when zmq_getsockopt
// fails, which it does with EINTR when a signal interrupts libzmq's
// command processing. Whatever the cause, the SUB never waits in a
// receive (ZMQ_RCVTIMEO 0), and a receive that finds nothing sends the
// stream back to waiting, this time for the descriptor's next signal
// before it believes the check again: a check that kept lying costs one
// empty receive per wait, not a spinning stream.
//
// A receive comes back empty for the other reason too: a signal
// interrupted it (goczmq hides errno, so the two look alike), and its
// message is still queued. libzmq does not signal a message it has
// announced already, so a stream that waited for the next signal then
// waited for the next message, or for ever after the last one (a test
// that waited without a time limit hung). So an empty receive is tried
// once more at once, and a doubted check is doubted for doubtWait at
// most before it is asked again.
type conn struct {
	sub    *goczmq.Sock
	ready  *os.File // a duplicate of sub's ZMQ_FD, registered with Go's poller
	raw    syscall.RawConn
	replay string
	wait   time.Duration // how long next waits: pollInterval but in tests
	// pollin reports whether sub says it holds a whole message: the
	// ZMQ_EVENTS check, a field so that tests can make it lie.
	pollin func() bool
	// recv receives a message from sub (RecvMessage), a field so that
	// tests can interrupt it.
	recv func() ([][]byte, error)
	// doubt is set when the last receive found nothing the check had
	// promised: the next wait starts with the descriptor's signal.
	doubt bool
	// badFrames counts the messages a replay round dropped as malformed
	// or cut short, for the caller to count (takeBadFrames).
	badFrames int
	// unsignalled counts the messages found by asking the events check
	// again after a wait timed out, not by a signal (takeUnsignalled);
	// timedOut is set when the last wait did.
	unsignalled int
	timedOut    bool
}

// takeBadFrames returns the messages replay rounds dropped since the last
// call.
func (c *conn) takeBadFrames() int {
	n := c.badFrames
	c.badFrames = 0
	return n
}

// takeUnsignalled returns the messages found unsignalled since the last
// call.
func (c *conn) takeUnsignalled() int {
	n := c.unsignalled
	c.unsignalled = 0
	return n
}

// errNothingThere is next's answer when the events check said a message
// was there and the receive found none.
var errNothingThere = errors.New("kv events: the socket's events check promised a message and none was there")

func dial(endpoint, replay, topic string) (*conn, error) {
	czmqInit()
	// Options first: the receive high-water mark applies to connections
	// made after it is set.
	sub := goczmq.NewSock(goczmq.Sub)
	sub.SetRcvhwm(1 << 20)
	sub.SetRcvtimeo(0) // a receive never waits: see conn
	sub.SetSubscribe(topic)
	if err := connect(sub, endpoint); err != nil {
		sub.Destroy()
		return nil, fmt.Errorf("subscribe %s: %w", endpoint, err)
	}
	ready, err := pollable(sub.Fd())
	if err != nil {
		sub.Destroy()
		return nil, fmt.Errorf("subscribe %s: %w", endpoint, err)
	}
	raw, err := ready.SyscallConn()
	if err != nil {
		ready.Close()
		sub.Destroy()
		return nil, fmt.Errorf("subscribe %s: %w", endpoint, err)
	}
	return &conn{sub: sub, ready: ready, raw: raw, replay: replay, wait: pollInterval,
		pollin: func() bool { return sub.Events()&goczmq.Pollin != 0 }, recv: sub.RecvMessage}, nil
}

// connect connects s to endpoint, trying again when it fails. A connect
// to a good endpoint failed twice in about 7,000 in a test that dialed 64
// streams at once; the likely cause is that libzmq first processes the
// socket's pending commands, and a signal (Go preempts goroutines with
// SIGURG) that interrupts that poll fails the connect with EINTR. goczmq
// hides errno, so every failure is tried again; a bad endpoint fails each
// time.
func connect(s *goczmq.Sock, endpoint string) error {
	var err error
	for range 3 {
		if err = s.Connect(endpoint); err == nil {
			return nil
		}
	}
	return err
}

// pollable returns a duplicate of libzmq's notification descriptor fd that
// Go's network poller watches. The duplicate is the conn's to close (which
// takes it off the poller first); fd stays libzmq's.
func pollable(fd int) (*os.File, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicate ZMQ_FD: %w", err)
	}
	// libzmq makes its descriptor non-blocking, and the duplicate shares
	// that flag, so os.NewFile registers it with the poller.
	f := os.NewFile(uintptr(dup), "zmq-fd")
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("ZMQ_FD is not pollable: %w", err)
	}
	return f, nil
}

func (c *conn) close() {
	c.ready.Close() // before the socket, whose descriptor it duplicates
	c.sub.Destroy()
}

// doubtWait bounds how long a check that promised a message the receive
// did not find goes unasked (see conn).
const doubtWait = 10 * time.Millisecond

// recheckWait bounds how long a wait goes without asking the events check
// again, whatever the descriptor says. An interrupted ZMQ_EVENTS can
// process the command that announced a message and still answer that
// none is there (czmq returns whatever its unset result holds), and the
// message is then never signalled: a test that waited an hour for it hung
// about once in 75 runs under the race detector.
const recheckWait = 100 * time.Millisecond

// next waits up to c.wait for a live message. ok is false on timeout.
func (c *conn) next() (m Message, ok bool, err error) {
	deadline := time.Now().Add(c.wait)
	// Read calls the function, and while it returns false waits until the
	// descriptor signals again. ZMQ_FD signals edges, not levels: a message
	// that arrives after ZMQ_EVENTS was read signals anew.
	doubt := c.doubt
	c.doubt = false
	rechecked := c.timedOut
	c.timedOut = false
	for ; ; rechecked = true {
		slice := recheckWait
		if doubt {
			slice = doubtWait
		}
		end := deadline
		if e := time.Now().Add(slice); e.Before(end) {
			end = e
		}
		if err := c.ready.SetReadDeadline(end); err != nil {
			return Message{}, false, fmt.Errorf("receive: %w", err)
		}
		checks := 0
		err = c.raw.Read(func(uintptr) bool {
			checks++
			if doubt {
				doubt = false
				return false
			}
			return c.pollin()
		})
		if err == nil {
			if rechecked && checks == 1 {
				c.unsignalled++ // found by asking, not by a signal
			}
			break
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return Message{}, false, fmt.Errorf("receive: %w", err)
		}
		if !end.Before(deadline) {
			c.timedOut = true
			return Message{}, false, nil
		}
	}
	// ZeroMQ delivers a multipart message whole: it is all here, unless
	// the check was wrong or the receive interrupted (see conn), which a
	// second receive tells apart.
	frames, err := c.recv()
	if err != nil && len(frames) == 0 && c.pollin() {
		frames, err = c.recv()
	}
	frames, err = whole(c.sub, frames, err)
	switch {
	case err != nil && len(frames) == 0:
		c.doubt = true
		return Message{}, false, errNothingThere
	case err != nil:
		// The rest would not come: it arrives as a message of its own,
		// malformed too, and the gap in seqs brings this one back by
		// replay.
		return Message{}, false, fmt.Errorf("%w: receive interrupted after %d frames", ErrFrame, len(frames))
	}
	m, err = parseLive(frames)
	return m, err == nil, err
}

// whole completes the receive from s that gave frames and err: one a
// signal interrupted after some frames gets the rest of its message
// (rest); one interrupted before its first, or whole, is returned as is.
func whole(s *goczmq.Sock, frames [][]byte, err error) ([][]byte, error) {
	if err != nil && len(frames) > 0 {
		return rest(s, frames)
	}
	return frames, err
}

// restTries bounds the receives rest tries for a message's next frame.
const restTries = 5

// rest receives from s the frames of a message whose receive was
// interrupted after frames: the frame before the interruption said more
// were coming, and ZeroMQ delivers a message whole, so they are there. A
// message cut in two once cost a gap and a replay, and on a stream without
// a replay endpoint the message itself.
func rest(s *goczmq.Sock, frames [][]byte) ([][]byte, error) {
	var err error
	for tries := 0; tries < restTries; {
		f, flag, ferr := s.RecvFrame()
		if ferr != nil {
			err = ferr
			tries++
			continue
		}
		frames = append(frames, f)
		if flag != goczmq.FlagMore {
			return frames, nil
		}
	}
	return frames, err
}

// sendMessage sends frames as one message, sending a frame again when its
// send fails: libzmq fails a send that a signal interrupts (EINTR), and Go
// preempts threads with signals. A replay request lost that way failed its
// replay, and a failed replay clears the worker's entries.
func sendMessage(s *goczmq.Sock, frames ...[]byte) error {
	var err error
	for i, f := range frames {
		flag := goczmq.FlagMore
		if i == len(frames)-1 {
			flag = goczmq.FlagNone
		}
		for range 5 {
			if err = s.SendFrame(f, flag); err == nil {
				break
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// replayRcvHWM is the replay DEALER's receive high-water mark. The
// engine's ROUTER drops what does not fit the pipe to a peer (vLLM sets no
// ROUTER_MANDATORY and sends its whole ring in one loop), so the receiving
// end is made deep enough to take a full 10,000-batch ring at once.
const replayRcvHWM = 1 << 20

// replayRound asks the replay endpoint for every buffered batch from start
// on and passes what arrives to onReplay, in order but possibly with holes
// (the engine drops what overflows its pipe), while live messages arriving
// meanwhile go to onLive. It returns ended true when the end marker
// arrives; ended false with a nil error when data came but then stopped for
// quiet without a marker (the marker, too, can be dropped); and
// ErrReplayTimeout when nothing at all came for timeout. Each round uses a
// new DEALER, so nothing a previous round left in flight arrives in it. A
// message an interrupted receive cut short is completed (rest); one still
// cut short, or malformed, is dropped and counted (takeBadFrames): a live
// one comes back through its seq's gap, a replayed one through the next
// round; it once failed the whole replay, and with it the worker's
// entries.
func (c *conn) replayRound(ctx context.Context, start uint64, timeout, quiet time.Duration, onReplay, onLive func(Message)) (ended bool, err error) {
	dealer := goczmq.NewSock(goczmq.Dealer)
	defer dealer.Destroy()
	dealer.SetLinger(0)
	dealer.SetRcvhwm(replayRcvHWM) // before Connect: it applies to later connections
	if err := dealer.Connect(c.replay); err != nil {
		return false, fmt.Errorf("replay %s: %w", c.replay, err)
	}
	poller, err := goczmq.NewPoller(dealer, c.sub)
	if err != nil {
		return false, fmt.Errorf("replay poll: %w", err)
	}
	defer poller.Destroy()
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], start)
	if err := sendMessage(dealer, nil, seq[:]); err != nil {
		return false, fmt.Errorf("replay request: %w", err)
	}
	deadline := time.Now().Add(timeout)
	data := false
	for ctx.Err() == nil {
		if time.Now().After(deadline) {
			if data {
				return false, nil
			}
			return false, ErrReplayTimeout
		}
		switch poller.Wait(int(pollInterval / time.Millisecond)) {
		case nil:
		case c.sub:
			frames, err := c.sub.RecvMessage()
			if err != nil && len(frames) == 0 {
				continue // interrupted before a frame: the message is still there
			}
			frames, err = whole(c.sub, frames, err)
			m, perr := parseLive(frames)
			if err != nil || perr != nil {
				// Cut short or malformed, as next reads it: lost, and the
				// gap in seqs brings it back.
				c.badFrames++
				continue
			}
			onLive(m)
		case dealer:
			frames, err := dealer.RecvMessage()
			if err != nil && len(frames) == 0 {
				continue
			}
			frames, err = whole(dealer, frames, err)
			m, end, perr := parseReplay(frames)
			if err != nil || perr != nil {
				c.badFrames++ // a hole the next round asks again
				continue
			}
			if end {
				return true, nil
			}
			data = true
			deadline = time.Now().Add(quiet)
			onReplay(m)
		}
	}
	return false, ctx.Err()
}

// Tail subscribes to endpoint (filtered by the topic prefix) and calls fn
// for every message until ctx ends or fn returns an error. With a replay
// endpoint it first replays the engine's buffer from seq 0, then continues
// live, skipping live messages the replay already delivered. It returns nil
// when ctx ends, and fn's error when fn fails.
func Tail(ctx context.Context, endpoint, replay, topic string, fn func(Message) error) error {
	c, err := dial(endpoint, replay, topic)
	if err != nil {
		return err
	}
	defer c.close()
	var fnErr error
	var lo, hi uint64 // seqs the replay delivered, when hi > 0
	deliver := func(m Message) {
		if fnErr != nil || (!m.Replayed && hi > 0 && m.Seq >= lo && m.Seq < hi) {
			return
		}
		if m.Replayed {
			if hi == 0 {
				lo = m.Seq
			}
			hi = m.Seq + 1
		}
		fnErr = fn(m)
	}
	if replay != "" {
		var live []Message
		// One round: an operator's tail shows what the engine sent, holes
		// included.
		_, err := c.replayRound(ctx, 0, 10*time.Second, time.Second, deliver, func(m Message) { live = append(live, m) })
		if err != nil {
			return err
		}
		for _, m := range live {
			deliver(m)
		}
	}
	for ctx.Err() == nil && fnErr == nil {
		m, ok, err := c.next()
		if err != nil {
			if errors.Is(err, ErrFrame) || errors.Is(err, errNothingThere) {
				continue
			}
			return err
		}
		if ok {
			deliver(m)
		}
	}
	return fnErr
}
