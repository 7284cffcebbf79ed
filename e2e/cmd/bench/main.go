// Command bench runs warmpath's routing benchmark: each scenario once per
// routing policy (and the oracle) on fresh simulated workers behind real
// Envoy and in-process warmpath, with the same seeded workload and
// arrivals, and writes reports, plots and Markdown tables.
//
//	go run ./e2e/cmd/bench                          # every scenario, every policy
//	go run ./e2e/cmd/bench -scenarios demo -policies random,warmpath
//
// Results go to -out (default e2e/out/bench): per scenario the reports
// (JSON, simulated time), the replayer's comparison table, TTFT CDF and
// goodput plots (SVG and PNG) and every process's logs; results.md holds
// every table. -publish DIR also copies results.md and the SVG plots there.
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
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
