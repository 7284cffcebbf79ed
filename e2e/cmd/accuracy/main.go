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
// not. With -arrivals N they are split by whether a prompt of more than N
// uncached tokens was routed to the same worker after the decision and
// before the response ended: prefill no prediction made at the decision
// can know of, which lands in the response's decode steps.
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
	arrivals := fs.Int("arrivals", 0, "also split the pooled predictions by whether a prompt of more than this many uncached tokens reached the same worker during the response (0: no split)")
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
	if n := *arrivals; n > 0 {
		saw := make(map[recordKey]bool)
		for _, rs := range runs {
			markArrivals(rs, n, saw)
		}
		split := func(want bool) func(harness.Record) bool {
			return func(r harness.Record) bool {
				got, known := saw[keyOf(r)]
				return known && got == want
			}
		}
		row(stdout, fmt.Sprintf("pooled, a prompt of more than %d uncached tokens arrived during the response", n),
			harness.PoolAccuracy(runs, *warmup, split(true)))
		row(stdout, fmt.Sprintf("pooled, none of more than %d arrived", n), harness.PoolAccuracy(runs, *warmup, split(false)))
	}
	return nil
}

// recordKey names a record across the runs pooled: its decision time and
// sequence number.
type recordKey struct {
	decided int64
	seq     int
}

func keyOf(r harness.Record) recordKey { return recordKey{r.Decided.UnixNano(), r.Seq} }

// markArrivals records in saw, for each record of one run with its
// decision and end times, whether another request of more than n uncached
// tokens was routed to its worker strictly between them. Records without
// both times are left out of saw: neither side of the split.
func markArrivals(rs []harness.Record, n int, saw map[recordKey]bool) {
	for _, r := range rs {
		if r.Decided.IsZero() || r.Ended.IsZero() {
			continue
		}
		arrived := false
		for _, o := range rs {
			if o.Worker == r.Worker && o.PromptTokens-o.Chosen.CachedTokens > n &&
				o.Decided.After(r.Decided) && o.Decided.Before(r.Ended) {
				arrived = true
				break
			}
		}
		saw[keyOf(r)] = arrived
	}
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
