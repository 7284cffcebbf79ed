package kvevents

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"github.com/zeromq/goczmq"
)

func TestRankEndpoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		endpoint string
		rank     int
		want     string
		wantErr  bool
	}{
		{"tcp://10.0.0.1:5557", 0, "tcp://10.0.0.1:5557", false},
		{"tcp://10.0.0.1:5557", 3, "tcp://10.0.0.1:5560", false},
		{"tcp://[::1]:5557", 1, "tcp://[::1]:5558", false},
		{"tcp://host:0", 2, "tcp://host:0", false},
		{"ipc:///tmp/kv", 1, "ipc:///tmp/kv_dp1", false},
		{"inproc://kv", 2, "inproc://kv_dp2", false},
		{"tcp://host", 1, "", true},
		{"tcp://host:65535", 1, "", true},
		{"tcp://host:x", 1, "", true},
		{"http://host:1", 1, "", true},
		{"host:1", 1, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.endpoint, func(t *testing.T) {
			t.Parallel()
			got, err := RankEndpoint(tc.endpoint, tc.rank)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("RankEndpoint(%q, %d) = %q, %v; want %q, error %v", tc.endpoint, tc.rank, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestParseFrames(t *testing.T) {
	t.Parallel()
	s7 := seq8(7)
	end := seq8(endSeq)
	tests := []struct {
		name    string
		frames  [][]byte
		replay  bool
		seq     uint64
		topic   string
		end     bool
		wantErr bool
	}{
		{name: "live", frames: [][]byte{[]byte("kv"), s7, {0x90}}, seq: 7, topic: "kv"},
		{name: "live with a 16-byte seq frame", frames: [][]byte{nil, append(s7, make([]byte, 8)...), {0x90}}, seq: 7},
		{name: "live short seq", frames: [][]byte{nil, {1}, {0x90}}, wantErr: true},
		{name: "live two frames", frames: [][]byte{s7, {0x90}}, wantErr: true},
		{name: "replay without topic", replay: true, frames: [][]byte{{}, s7, {0x90}}, seq: 7},
		{name: "replay with topic", replay: true, frames: [][]byte{{}, []byte("kv"), s7, {0x90}}, seq: 7, topic: "kv"},
		{name: "replay with empty topic", replay: true, frames: [][]byte{{}, {}, s7, {0x90}}, seq: 7},
		{name: "end marker, old", replay: true, frames: [][]byte{{}, end, {}}, seq: endSeq, end: true},
		{name: "end marker, new", replay: true, frames: [][]byte{{}, {}, end, {}}, seq: endSeq, end: true},
		{name: "replay via REQ (no delimiter)", replay: true, frames: [][]byte{s7, {0x90}}, seq: 7},
		{name: "replay one frame", replay: true, frames: [][]byte{s7}, wantErr: true},
		{name: "replay short seq", replay: true, frames: [][]byte{{}, {1, 2}, {0x90}}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var m Message
			var end bool
			var err error
			if tc.replay {
				m, end, err = parseReplay(tc.frames)
			} else {
				m, err = parseLive(tc.frames)
			}
			if tc.wantErr {
				if !errors.Is(err, ErrFrame) {
					t.Fatalf("err = %v, want ErrFrame", err)
				}
				return
			}
			if err != nil || m.Seq != tc.seq || m.Topic != tc.topic || end != tc.end || m.Replayed != tc.replay {
				t.Errorf("got %+v end=%v err=%v", m, end, err)
			}
		})
	}
}

// pubSub binds a PUB socket and dials a conn to it whose waits last wait,
// returning once a message has crossed (a SUB misses what is published
// before its subscription reaches the PUB).
func pubSub(t *testing.T, wait time.Duration) (*goczmq.Sock, *conn) {
	t.Helper()
	czmqInit()
	pub := goczmq.NewSock(goczmq.Pub)
	pub.SetSndhwm(1 << 20) // a PUB drops what its high-water mark does not hold
	port, err := pub.Bind("tcp://127.0.0.1:*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Destroy)
	c, err := dial(fmt.Sprintf("tcp://127.0.0.1:%d", port), "", "kv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	c.wait = 10 * time.Millisecond
	for ok := false; !ok; {
		if err := sendMessage(pub, []byte("kv"), seq8(endSeq), []byte{0x90}); err != nil {
			t.Fatal(err)
		}
		if _, ok, err = nextOf(c); err != nil {
			t.Fatal(err)
		}
	}
	// Drain the other probes still in flight.
	for ok := true; ok; {
		if _, ok, err = nextOf(c); err != nil {
			t.Fatal(err)
		}
	}
	c.wait = wait
	return pub, c
}

// nextOf is c.next for tests that are not about the events check: an
// empty receive (errNothingThere, an interrupted check that the conn
// survives by design) is tried again, as the stream's loop does.
func nextOf(c *conn) (Message, bool, error) {
	for {
		m, ok, err := c.next()
		if !errors.Is(err, errNothingThere) {
			return m, ok, err
		}
	}
}

// TestConnSurvivesAWrongCheck makes the events check say a message is
// there when none is, as an interrupted ZMQ_EVENTS does: the receive must
// come back empty rather than wait for a message that may never come (the
// test hangs if it waits), and the next message must still arrive.
func TestConnSurvivesAWrongCheck(t *testing.T) {
	t.Parallel()
	pub, c := pubSub(t, 10*time.Millisecond)
	c.pollin = func() bool { return true }
	empty := 0
	for range 5 {
		m, ok, err := c.next()
		switch {
		case errors.Is(err, errNothingThere):
			empty++
		case ok || err != nil:
			t.Fatalf("nothing published: got %+v, %v, %v", m, ok, err)
		}
	}
	// After an empty receive the conn waits for the descriptor's next
	// signal before it believes the check again: a lying check must not
	// make every call an empty receive.
	if empty == 0 || empty == 5 {
		t.Fatalf("%d of 5 receives came back empty, want some but not all", empty)
	}
	if err := sendMessage(pub, []byte("kv"), seq8(7), []byte{0x90}); err != nil {
		t.Fatal(err)
	}
	for {
		m, ok, err := c.next()
		if err != nil && !errors.Is(err, errNothingThere) {
			t.Fatal(err)
		}
		if ok {
			if m.Seq != 7 {
				t.Fatalf("got seq %d, want 7", m.Seq)
			}
			return
		}
	}
}

// TestConnSurvivesAnInterruptedReceive interrupts receives, as a signal
// does, leaving the message queued: libzmq signals no message it announced
// already, so a conn that waited for the next signal would wait past the
// last message. Interrupted once, the receive is tried again at once;
// interrupted twice, the next call asks the check again after doubtWait,
// well within its wait of 30 s.
func TestConnSurvivesAnInterruptedReceive(t *testing.T) {
	t.Parallel()
	for _, interrupts := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d interrupts", interrupts), func(t *testing.T) {
			t.Parallel()
			pub, c := pubSub(t, 30*time.Second)
			left := interrupts
			recv := c.recv
			c.recv = func() ([][]byte, error) {
				if left > 0 {
					left--
					return nil, errors.New("interrupted")
				}
				return recv()
			}
			if err := sendMessage(pub, []byte("kv"), seq8(7), []byte{0x90}); err != nil {
				t.Fatal(err)
			}
			calls := 0
			for {
				calls++
				m, ok, err := c.next()
				if errors.Is(err, errNothingThere) && calls == 1 {
					continue
				}
				if err != nil || !ok || m.Seq != 7 {
					t.Fatalf("call %d: seq %d, ok %v, err %v; want the message", calls, m.Seq, ok, err)
				}
				break
			}
			if want := interrupts; calls != want {
				t.Fatalf("the message came in call %d, want %d", calls, want)
			}
		})
	}
}

// TestConnCompletesACutMessage interrupts a receive after two of a
// message's three frames, as a signal can: the rest is there, and the
// message must arrive whole, not as two malformed ones.
func TestConnCompletesACutMessage(t *testing.T) {
	t.Parallel()
	pub, c := pubSub(t, 30*time.Second)
	cut := true
	recv := c.recv
	c.recv = func() ([][]byte, error) {
		if !cut {
			return recv()
		}
		cut = false
		var frames [][]byte
		for range 2 {
			f, _, err := c.sub.RecvFrame()
			if err != nil {
				return frames, err
			}
			frames = append(frames, f)
		}
		return frames, errors.New("interrupted")
	}
	if err := sendMessage(pub, []byte("kv"), seq8(7), []byte{0x90}); err != nil {
		t.Fatal(err)
	}
	m, ok, err := nextOf(c)
	if err != nil || !ok || m.Seq != 7 {
		t.Fatalf("seq %d, ok %v, err %v; want the message whole", m.Seq, ok, err)
	}
}

// TestConnFindsAnUnsignalledMessage makes the events check answer that
// nothing is there while a message is, as an interrupted ZMQ_EVENTS can
// after it took the signal. Within a long wait (30 s) the check is asked
// again after recheckWait; with short waits (20 ms, as production's are
// short), at the next one. Either way the message arrives, and counts as
// found unsignalled.
func TestConnFindsAnUnsignalledMessage(t *testing.T) {
	t.Parallel()
	for _, wait := range []time.Duration{30 * time.Second, 20 * time.Millisecond} {
		t.Run(wait.String(), func(t *testing.T) {
			t.Parallel()
			pub, c := pubSub(t, wait)
			c.takeUnsignalled() // pubSub's probes may have counted
			lies := 4
			pollin := c.pollin
			c.pollin = func() bool {
				if lies > 0 {
					lies--
					return false
				}
				return pollin()
			}
			if err := sendMessage(pub, []byte("kv"), seq8(7), []byte{0x90}); err != nil {
				t.Fatal(err)
			}
			for calls := 1; ; calls++ {
				m, ok, err := nextOf(c)
				if err != nil || (ok && m.Seq != 7) {
					t.Fatalf("seq %d, err %v; want the message", m.Seq, err)
				}
				if ok {
					break
				}
				if calls == 100 {
					t.Fatal("no message in 100 waits")
				}
			}
			if n := c.takeUnsignalled(); n != 1 {
				t.Fatalf("%d messages counted unsignalled, want 1", n)
			}
		})
	}
}

// TestConnMissesNoSignal publishes bursts of every size while the conn
// drains and waits, with waits that never time out: every message must
// arrive, in order. A message left behind by a missed ZMQ_FD signal hung
// the receive, and the test with it, about once in 75 runs under the race
// detector; the wait's re-check now finds it (TestConnFindsAnUnsignalledMessage).
func TestConnMissesNoSignal(t *testing.T) {
	t.Parallel()
	pub, c := pubSub(t, time.Hour)
	const n = 20000
	sent := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(3, 4))
		for s := uint64(0); s < n; {
			for b := rng.IntN(64) + 1; b > 0 && s < n; b-- {
				if err := sendMessage(pub, []byte("kv"), seq8(s), []byte{0x90}); err != nil {
					sent <- err
					return
				}
				s++
			}
			if rng.IntN(4) == 0 {
				time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
			}
		}
		sent <- nil
	}()
	got := make(chan error, 1)
	go func() {
		for want := uint64(0); want < n; want++ {
			m, ok, err := nextOf(c)
			if err != nil || !ok || m.Seq != want {
				got <- fmt.Errorf("receive %d: seq %d, ok %v, err %w", want, m.Seq, ok, err)
				return
			}
		}
		got <- nil
	}()
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Minute) // bounds a hang; no timing is asserted
	if d, ok := t.Deadline(); ok {
		deadline = time.After(time.Until(d) - 10*time.Second)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d of %d messages found unsignalled", c.takeUnsignalled(), n)
	case <-deadline:
		t.Fatal("a message was never received: a ZMQ_FD signal was missed")
	}
}

// TestConnWaitsHoldNoThread waits on 64 conns at once. A wait inside a cgo
// call holds an OS thread each; on Go's poller they hold none. Not
// parallel: other tests' threads would count.
func TestConnWaitsHoldNoThread(t *testing.T) {
	const streams = 64
	conns := make([]*conn, streams)
	for i := range conns {
		_, conns[i] = pubSub(t, pollInterval)
	}
	threads := pprof.Lookup("threadcreate")
	before := threads.Count()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, _, err := nextOf(c); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	time.Sleep(3 * pollInterval) // every conn has waited, and waits again
	created := threads.Count() - before
	cancel()
	wg.Wait()
	if created >= streams/2 {
		t.Errorf("%d conns waiting created %d OS threads, want far fewer than one each", streams, created)
	}
}
