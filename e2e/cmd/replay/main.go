// Command replay sends a reproducible LLM workload to one or more
// OpenAI/Anthropic-compatible targets and writes JSON reports, a Markdown
// comparison and plots. Run it with -help for usage.
//
//	replay run --config examples/synthetic-goodput.yaml \
//		--target random=http://127.0.0.1:10000 --target warmpath=http://127.0.0.1:10001
//	replay compare --baseline random out/random.json out/warmpath.json
//
// Every target gets the same requests at the same offsets (same seed). The
// config file is a replay.Config in YAML or JSON, decoded strictly.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "replay:", err)
		os.Exit(1)
	}
}
