package discovery

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpath/warmpath/internal/component"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// lineLoader stands in for the application's strict config decoder: one
// worker per line, "name address model[,model...]".
func lineLoader(path string) ([]Worker, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ws []Worker
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("line %d: want 3 fields, got %d", i+1, len(f))
		}
		ws = append(ws, Worker{Name: f[0], Address: f[1], Models: strings.Split(f[2], ",")})
	}
	return ws, nil
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
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

func testLogger(buf *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// renameReplace writes content the way many editors save: a new file renamed over the old one.
func renameReplace(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".swp"
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func nextSet(t *testing.T, u *Updates) []Worker {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // hang guard only
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			t.Fatal("no worker set published")
		case <-u.Ready():
			if ws, ok := u.Take(); ok {
				return ws
			}
		}
	}
}

func TestStaticReload(t *testing.T) {
	t.Parallel()
	type edit struct {
		write      func(t *testing.T, path, content string)
		content    string
		wantSet    []string // names of the published set; nil: rejected
		wantLog    string   // substring of the log after the edit
		wantResult string   // reload counter that moves
	}
	good := "a 10.0.0.1:8000 qwen\nb 10.0.0.2:8000 qwen\n"
	tests := []struct {
		name  string
		edits []edit
	}{
		{
			name:  "in-place good edit",
			edits: []edit{{write: writeFile, content: good + "c 10.0.0.3:8000 qwen\n", wantSet: []string{"a", "b", "c"}, wantResult: "applied"}},
		},
		{
			name:  "rename-replace good edit",
			edits: []edit{{write: renameReplace, content: "z 10.0.0.9:8000 qwen\n", wantSet: []string{"z"}, wantResult: "applied"}},
		},
		{
			name: "syntax error is rejected, then fixed",
			edits: []edit{
				{write: writeFile, content: "a 10.0.0.1:8000\n", wantLog: "line 1: want 3 fields, got 2", wantResult: "rejected"},
				{write: writeFile, content: "a 10.0.0.1:8000 llama\n", wantSet: []string{"a"}, wantResult: "applied"},
			},
		},
		{
			name:  "invalid set is rejected",
			edits: []edit{{write: renameReplace, content: "a 10.0.0.1:8000 qwen\na 10.0.0.2:8000 qwen\n", wantLog: `worker \"a\": duplicate name`, wantResult: "rejected"}},
		},
		{
			name: "deleted file keeps the set until it returns",
			edits: []edit{
				{write: func(t *testing.T, path, _ string) {
					if err := os.Remove(path); err != nil {
						t.Fatal(err)
					}
				}, wantLog: "static worker file unreadable", wantResult: "unreadable"},
				{write: writeFile, content: "b 10.0.0.2:8000 qwen\n", wantSet: []string{"b"}, wantResult: "applied"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "workers")
			writeFile(t, path, good)
			var logs syncBuffer
			s, err := NewStatic(path, lineLoader, 5*time.Millisecond, component.Options{Logger: testLogger(&logs)})
			if err != nil {
				t.Fatal(err)
			}
			u := NewUpdates()
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx, u) }()
			if got := names(nextSet(t, u)); !slices.Equal(got, []string{"a", "b"}) {
				t.Fatalf("initial set = %v", got)
			}
			for i, e := range tc.edits {
				before := testutil.ToFloat64(s.reloads.WithLabelValues(e.wantResult))
				e.write(t, path, e.content)
				if e.wantSet != nil {
					// An in-place write may be read half done; the next poll
					// sees the whole file, so wait for the set it holds.
					for got := names(nextSet(t, u)); !slices.Equal(got, e.wantSet); got = names(nextSet(t, u)) {
						t.Logf("edit %d: intermediate set %v", i, got)
					}
				}
				waitFor(t, func() bool { return testutil.ToFloat64(s.reloads.WithLabelValues(e.wantResult)) > before })
				if e.wantLog != "" {
					// The counter moves just before the line is logged.
					waitFor(t, func() bool { return strings.Contains(logs.String(), e.wantLog) })
				}
				if e.wantSet == nil {
					if ws, ok := u.Take(); ok {
						t.Fatalf("edit %d: rejected edit published %v", i, names(ws))
					}
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run = %v", err)
			}
		})
	}
}

func TestStaticFirstLoadFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name    string
		content *string
		wantErr string
	}{
		{name: "missing file", wantErr: "read worker file"},
		{name: "bad syntax", content: new("a b\n"), wantErr: "want 3 fields"},
		{name: "invalid set", content: new("a nohost qwen\n"), wantErr: "not host:port"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if tc.content != nil {
				writeFile(t, path, *tc.content)
			}
			s, err := NewStatic(path, lineLoader, time.Hour, component.Options{})
			if err != nil {
				t.Fatal(err)
			}
			err = s.Run(t.Context(), NewUpdates())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Run = %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
	if _, err := NewStatic("x", nil, 0, component.Options{}); err == nil {
		t.Fatal("NewStatic with a nil loader succeeded")
	}
}

func TestPoolWithStaticSource(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "workers")
	writeFile(t, path, "a 10.0.0.1:8000 qwen\n")
	var logs syncBuffer
	src, err := NewStatic(path, lineLoader, 5*time.Millisecond, component.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPool(src, HealthConfig{ActiveInterval: -1}, component.Options{Logger: testLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	watch := p.Watch(t.Context())
	waitFor(t, func() bool { return p.Ready() })
	renameReplace(t, path, "a 10.0.0.1:8000 qwen\nb 10.0.0.2:8000 qwen,llama\n")
	for ws := range watch {
		if slices.Equal(names(ws), []string{"a", "b"}) {
			break
		}
	}
	if got := p.Models(); !slices.Equal(got, []string{"llama", "qwen"}) {
		t.Fatalf("Models = %v", got)
	}
	if !strings.Contains(logs.String(), "added=[b]") {
		t.Errorf("set change not logged:\n%s", logs.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}
