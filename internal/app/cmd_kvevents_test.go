package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeromq/goczmq"
)

const capture = "../../kvevents/testdata/vllm031-capture-excerpt.jsonl"

func TestKVEventsDecode(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(capture)
	if err != nil {
		t.Fatal(err)
	}
	bad := `{"topic":"kv-events","seq":99,"payload_b64":"` + base64.StdEncoding.EncodeToString([]byte{0x93, 0x01}) + `"}` + "\n"
	tests := []struct {
		name    string
		args    []string
		stdin   string
		lines   int
		wantErr string
	}{
		{name: "capture file", args: []string{"decode", capture}, lines: 10},
		{name: "stdin", args: []string{"decode"}, stdin: string(data), lines: 10},
		{name: "undecodable message", args: []string{"decode"}, stdin: string(data) + bad, lines: 11, wantErr: "1 of 11 messages did not decode"},
		{name: "not JSON", args: []string{"decode"}, stdin: "nope\n", wantErr: "line 1"},
		{name: "missing file", args: []string{"decode", "/nonexistent"}, wantErr: "no such file"},
		{name: "no subcommand", args: nil, wantErr: "missing subcommand"},
		{name: "unknown subcommand", args: []string{"follow"}, wantErr: "unknown subcommand"},
		{name: "tail without endpoint", args: []string{"tail"}, wantErr: "--endpoint is required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			err := runKVEvents(t.Context(), tc.args, strings.NewReader(tc.stdin), &stdout, &stderr)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			if tc.lines == 0 {
				return
			}
			if len(lines) != tc.lines {
				t.Fatalf("%d lines, want %d", len(lines), tc.lines)
			}
			var first struct {
				Seq    uint64 `json:"seq"`
				Events []struct {
					Type        string   `json:"type"`
					BlockHashes []uint64 `json:"block_hashes"`
					TokenIDs    []uint32 `json:"token_ids"`
					ExtraKeys   []any    `json:"extra_keys"`
					Kind        string   `json:"kv_cache_spec_kind"`
				} `json:"events"`
			}
			if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
				t.Fatal(err)
			}
			ev := first.Events[0]
			if first.Seq != 0 || ev.Type != "BlockStored" || len(ev.BlockHashes) != 40 || ev.BlockHashes[0] != 9458839336253375078 ||
				len(ev.TokenIDs) != 640 || len(ev.ExtraKeys) != 40 || ev.Kind != "full_attention" {
				t.Errorf("first line decoded wrong: %.300s", lines[0])
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestKVEventsTail(t *testing.T) {
	t.Parallel()
	pub := goczmq.NewSock(goczmq.Pub)
	defer pub.Destroy()
	port, err := pub.Bind("tcp://127.0.0.1:*")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(capture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var payload []byte
	if sc := bufio.NewScanner(f); sc.Scan() {
		var c captureLine
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		payload = c.Payload
	}
	ctx, cancel := context.WithCancel(t.Context())
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runKVEvents(ctx, []string{"tail", "--endpoint", fmt.Sprintf("tcp://127.0.0.1:%d", port), "--topic", "kv-events"}, nil, &out, &errOut)
	}()
	// Publish until the subscriber has joined and printed a line; the
	// deadline only bounds a hung test.
	deadline := time.Now().Add(20 * time.Second)
	for seq := uint64(0); !strings.Contains(out.String(), `"type":"BlockStored"`); seq++ {
		if time.Now().After(deadline) {
			t.Fatalf("no output; stderr: %s", errOut.String())
		}
		if err := pub.SendMessage([][]byte{[]byte("kv-events"), binary.BigEndian.AppendUint64(nil, seq), payload}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // pacing the publisher, not an assertion
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("tail returned %v", err)
	}
	if !strings.Contains(out.String(), `"topic":"kv-events"`) {
		t.Errorf("output lacks the topic: %.200s", out.String())
	}
}
