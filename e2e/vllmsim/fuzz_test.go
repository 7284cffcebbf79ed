package vllmsim

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/zeromq/goczmq"
)

// FuzzParsePrompt checks that any completions prompt either parses into
// exactly one non-empty form or fails with a 400, never panicking.
func FuzzParsePrompt(f *testing.F) {
	for _, s := range []string{`"hello"`, `["a","b"]`, `[1,2,3]`, `[[1,2],[3]]`, `[]`, `null`, `[1,"a"]`,
		`[[1],"a"]`, `[-1]`, `[4294967296]`, `{"x":1}`, `[[]]`, `1.5`, `[1.5]`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		texts, ids, err := parsePrompt(raw)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.status != 400 {
				t.Fatalf("error %v is not a 400", err)
			}
			return
		}
		if (texts == nil) == (ids == nil) {
			t.Fatalf("texts %v ids %v: want exactly one", texts, ids)
		}
		if !json.Valid(raw) {
			t.Fatalf("accepted invalid JSON %q", raw)
		}
	})
}

// FuzzParseGenRequest checks request validation on arbitrary bodies.
func FuzzParseGenRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":[1,2],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":0}`,
		`{"stream_options":{}}`, `{"n":2}`, `{"cache_salt":""}`, `{"model":"x"}`, `[]`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		g, err := parseGenRequest(body, []string{"m"})
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || (ae.status != 400 && ae.status != 404) {
				t.Fatalf("error %v is not a 4xx apiError", err)
			}
			return
		}
		if g.maxTokens(16) < 1 {
			t.Fatalf("accepted max tokens %d", g.maxTokens(16))
		}
		if g.Model != "" && g.Model != "m" {
			t.Fatalf("accepted model %q", g.Model)
		}
	})
}

// FuzzParseReplayRequest checks the ROUTER's request parser on arbitrary
// frames: only [identity, "", 8 bytes] is accepted.
func FuzzParseReplayRequest(f *testing.F) {
	f.Add([]byte("id"), []byte{}, binary.BigEndian.AppendUint64(nil, 7), 3)
	f.Add([]byte("id"), []byte{1}, []byte{1, 2}, 2)
	f.Fuzz(func(t *testing.T, a, b, c []byte, n int) {
		frames := [][]byte{a, b, c}
		if n >= 0 && n < 3 {
			frames = frames[:n]
		}
		_, start, err := parseReplayRequest(frames)
		ok := len(frames) == 3 && len(b) == 0 && len(c) == 8
		if ok != (err == nil) {
			t.Fatalf("frames %q: err %v", frames, err)
		}
		if ok && start != binary.BigEndian.Uint64(c) {
			t.Fatalf("start %d", start)
		}
		if !ok && !errors.Is(err, ErrBadReplayRequest) {
			t.Fatalf("error %v is not ErrBadReplayRequest", err)
		}
	})
}

// FuzzParseKVEventsConfig checks the --kv-events-config decoder.
func FuzzParseKVEventsConfig(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"enable_kv_cache_events":true}`, `{"publisher":"kafka"}`,
		`{"buffer_steps":-1}`, `{"unknown":1}`, `{"endpoint":"tcp://*:0","topic":"t"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseKVEventsConfig(s)
		if err != nil {
			return
		}
		if c.Publisher != "zmq" && c.Publisher != "null" || c.BufferSteps < 0 || c.Endpoint == "" {
			t.Fatalf("accepted %+v", c)
		}
	})
}

func TestRankEndpoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		rank int
		want string
	}{
		{"tcp://*:5557", 0, "tcp://*:5557"},
		{"tcp://*:5557", 2, "tcp://*:5559"},
		{"tcp://*:0", 3, "tcp://*:0"},
		{"tcp://127.0.0.1:*", 2, "tcp://127.0.0.1:*"},
		{"tcp://router.local:6000", 1, "tcp://router.local:6001"},
		{"inproc://kv", 1, "inproc://kv_dp1"},
		{"ipc:///tmp/kv", 1, "ipc:///tmp/kv"},
	}
	for _, tt := range tests {
		got, err := rankEndpoint(tt.in, tt.rank)
		if err != nil || got != tt.want {
			t.Errorf("rankEndpoint(%q, %d) = %q, %v; want %q", tt.in, tt.rank, got, err, tt.want)
		}
	}
	if binds("tcp://router.local:6000") || !binds("tcp://*:5557") || !binds("tcp://127.0.0.1:*") || binds("tcp://127.0.0.1:0") {
		t.Error("binds: wrong mode")
	}
}

// TestAttachEphemeral: a loopback endpoint with port * binds a real port
// that clients can reach; one with port 0 is vLLM's connect form, which
// reaches nothing and is refused rather than silently publishing nowhere.
func TestAttachEphemeral(t *testing.T) {
	s := goczmq.NewSock(goczmq.Pub)
	defer s.Destroy()
	got, err := attach(s, "tcp://127.0.0.1:*", binds("tcp://127.0.0.1:*"))
	if err != nil || !strings.HasPrefix(got, "tcp://127.0.0.1:") || strings.HasSuffix(got, ":*") || strings.HasSuffix(got, ":0") {
		t.Errorf("attach tcp://127.0.0.1:* = %q, %v; want a bound port", got, err)
	}
	c := goczmq.NewSock(goczmq.Pub)
	defer c.Destroy()
	if got, err := attach(c, "tcp://127.0.0.1:0", binds("tcp://127.0.0.1:0")); err == nil {
		t.Errorf("attach tcp://127.0.0.1:0 = %q; want an error", got)
	}
}

func TestReplayRing(t *testing.T) {
	t.Parallel()
	r := replayRing{n: 3}
	for s := range uint64(5) {
		r.add(s, []byte{byte(s)})
	}
	tests := []struct {
		start uint64
		want  []uint64
	}{{0, []uint64{2, 3, 4}}, {3, []uint64{3, 4}}, {9, nil}}
	for _, tt := range tests {
		var got []uint64
		for _, it := range r.from(tt.start) {
			got = append(got, it.seq)
		}
		if len(got) != len(tt.want) {
			t.Errorf("from(%d) = %v, want %v", tt.start, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("from(%d) = %v, want %v", tt.start, got, tt.want)
			}
		}
	}
}

func TestReplayFrames(t *testing.T) {
	t.Parallel()
	id := []byte("client")
	seq7 := binary.BigEndian.AppendUint64(nil, 7)
	end := binary.BigEndian.AppendUint64(nil, replayEnd)
	tests := []struct {
		name      string
		withTopic bool
		data, fin [][]byte
	}{
		{"array era", false, [][]byte{id, {}, seq7, []byte("p")}, [][]byte{id, {}, end, {}}},
		{"map era", true, [][]byte{id, {}, []byte("kv"), seq7, []byte("p")}, [][]byte{id, {}, {}, end, {}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := replayFrames(id, "kv", tt.withTopic, 7, []byte("p")); !equalFrames(got, tt.data) {
				t.Errorf("data frames %q, want %q", got, tt.data)
			}
			if got := replayEndFrames(id, tt.withTopic); !equalFrames(got, tt.fin) {
				t.Errorf("end frames %q, want %q", got, tt.fin)
			}
		})
	}
}

func equalFrames(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if string(a[i]) != string(b[i]) {
			return false
		}
	}
	return true
}
