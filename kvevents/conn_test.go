package kvevents

import (
	"errors"
	"testing"
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
