package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// TestMain lets the test binary act as vllm-sim when re-executed with
// VLLM_SIM_RUN_MAIN=1, so the process test needs no separate build.
func TestMain(m *testing.M) {
	if os.Getenv("VLLM_SIM_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestProcessServesUntilSIGTERM runs vllm-sim as a process on :0
// listeners, waits for its ready line, checks /health and that SIGTERM is
// a clean exit.
func TestProcessServesUntilSIGTERM(t *testing.T) {
	t.Parallel()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "--port", "0",
		"--kv-events-config", `{"enable_kv_cache_events":true,"endpoint":"tcp://*:0","replay_endpoint":"tcp://*:0"}`)
	cmd.Env = append(os.Environ(), "VLLM_SIM_RUN_MAIN=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, _ := os.CreateTemp(t.TempDir(), "stderr")
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dumpOnFailure := func() {
		if t.Failed() {
			b, _ := os.ReadFile(stderr.Name())
			t.Logf("vllm-sim stderr:\n%s", b)
		}
	}
	defer dumpOnFailure()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var ready struct {
		HTTP     string   `json:"http"`
		KVEvents []string `json:"kv_events"`
	}
	if err := json.Unmarshal([]byte(line), &ready); err != nil || ready.HTTP == "" || len(ready.KVEvents) != 1 {
		t.Fatalf("ready line %q: %v", line, err)
	}
	resp, err := http.Get("http://" + ready.HTTP + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/health: %d", resp.StatusCode)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}
