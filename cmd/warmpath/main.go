// Command warmpath routes LLM requests to vLLM workers as an Envoy external
// processor. See "warmpath --help".
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/warmpath/warmpath/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.Main(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !app.IsUsage(err) {
			fmt.Fprintln(os.Stderr, "warmpath:", err)
		}
		os.Exit(2)
	}
}
