// Command accuracy pools the prediction accuracy of several routing
// benchmark runs: it reads the decision logs that `go run ./e2e/cmd/bench`
// writes (decisions-<policy>.jsonl, one JSON record per routed request)
// and prints, as a Markdown table, each run's TTFT and TPOT errors as the
// benchmark's own tables give them, then those of every run's predictions
// together. A single run's p90 rests on its few worst predictions (7 or 8
// of Mooncake's 75), so two builds are compared over pooled runs.
//
//	go run ./e2e/cmd/accuracy -warmup 25 -ahead 500 runs/*/mooncake/decisions-warmpath.jsonl
//
// With -ahead N the pooled predictions are also split by the work the
// chosen worker had queued ahead of the request: more than N tokens, or
// not.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/warmpath/warmpath/e2e/harness"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "accuracy:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("accuracy", flag.ContinueOnError)
	warmup := fs.Int("warmup", 25, "leading decisions of each run left out (the benchmark's accuracy warm-up)")
	ahead := fs.Int("ahead", 0, "also split the pooled predictions by work queued ahead: more than this many tokens, or not (0: no split)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("no decision logs given")
	}
	var runs [][]harness.Record
	fmt.Fprintln(stdout, "| run | TTFT samples | TTFT median | TTFT p90 | TTFT bias | TPOT samples | TPOT median | TPOT p90 | TPOT bias |")
	fmt.Fprintln(stdout, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, path := range fs.Args() {
		rs, err := readRecords(path)
		if err != nil {
			return err
		}
		runs = append(runs, rs)
		row(stdout, path, harness.MeasureAccuracy(rs, *warmup))
	}
	row(stdout, fmt.Sprintf("pooled, %d runs", len(runs)), harness.PoolAccuracy(runs, *warmup, nil))
	if n := *ahead; n > 0 {
		row(stdout, fmt.Sprintf("pooled, more than %d tokens ahead", n),
			harness.PoolAccuracy(runs, *warmup, func(r harness.Record) bool { return r.Chosen.WorkAhead > n }))
		row(stdout, fmt.Sprintf("pooled, %d tokens ahead or fewer", n),
			harness.PoolAccuracy(runs, *warmup, func(r harness.Record) bool { return r.Chosen.WorkAhead <= n }))
	}
	return nil
}

func row(w io.Writer, name string, a harness.Accuracy) {
	fmt.Fprintf(w, "| %s | %d | %.1f%% | %.1f%% | %+.1f%% | %d | %.1f%% | %.1f%% | %+.1f%% |\n", name,
		a.TTFTSamples, a.MedianAPE, a.P90APE, a.MedianBias, a.TPOTSamples, a.TPOTMedianAPE, a.TPOTP90APE, a.TPOTMedianBias)
}

// readRecords reads one decision log, a JSON record per line.
func readRecords(path string) ([]harness.Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rs []harness.Record
	dec := json.NewDecoder(bufio.NewReader(f))
	for {
		var r harness.Record
		err := dec.Decode(&r)
		if errors.Is(err, io.EOF) {
			return rs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: record %d: %w", path, len(rs)+1, err)
		}
		rs = append(rs, r)
	}
}
