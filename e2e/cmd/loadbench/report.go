package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// report gathers every run for results.md.
type report struct {
	rate   []*rateRun
	longs  []*longRun
	pairs  [][2]*rateRun // the peers scenario: alone, with a peer
	floors []floorPair   // -floor
}

// floorPair is a warmpath run and the echo processor's run beside it.
type floorPair struct{ warmpath, floor *rateRun }

// rateKey is a table row: a scenario at one offered rate.
type rateKey struct {
	scenario string
	rate     float64
}

// byRate groups items by the scenario and rate of their run, the keys in
// the order first seen.
func byRate[T any](items []T, run func(T) *rateRun) ([]rateKey, map[rateKey][]T) {
	var keys []rateKey
	groups := map[rateKey][]T{}
	for _, it := range items {
		k := rateKey{run(it).scenario, run(it).rate}
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], it)
	}
	return keys, groups
}

func (r *report) long(pattern string) *longRun {
	for _, l := range r.longs {
		if l.pattern == pattern {
			return l
		}
	}
	l := &longRun{pattern: pattern}
	r.longs = append(r.longs, l)
	return l
}

// cell is "median (min–max)" of the values of each run.
func cell(v []float64, format string) string {
	v = slices.DeleteFunc(slices.Clone(v), math.IsNaN) // a figure a run did not measure
	m, lo, hi, err := median(v)
	if err != nil {
		return "–"
	}
	if len(v) == 1 {
		return fmt.Sprintf(format, m)
	}
	return fmt.Sprintf(format+" ("+format+"–"+format+")", m, lo, hi)
}

// millis returns seconds v in milliseconds.
func millis(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, s := range v {
		out[i] = 1e3 * s
	}
	return out
}

func (r *report) markdown(o options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# warmpath under load (%s)\n\n", time.Now().UTC().Format("2006-01-02 15:04"))
	fmt.Fprintf(&b, "%d fake engines publishing vLLM KV events, %d ext_proc connections, request bodies %s, Poisson arrivals, %s measured after %s of warm-up per run; median (min–max) over runs.\n\n",
		o.workers, o.conns, o.mode, o.duration, o.warmup)
	keys, groups := byRate(r.rate, func(x *rateRun) *rateRun { return x })
	if len(keys) > 0 {
		b.WriteString("| scenario | offered/s | runs | achieved/s | warmpath p50 ms | warmpath p99 ms | warmpath ≤ 2 ms | client p50 ms | client p99 ms | client max ms | runs whose queue grew | warmpath cores | warmpath waiting for a CPU | CPU ms/request | response chunks/s | chunk p50 µs | chunk p99 µs | driver cores | failed |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	}
	for _, k := range keys {
		runs := groups[k]
		col := func(f func(*rateRun) float64) []float64 {
			var v []float64
			for _, x := range runs {
				v = append(v, f(x))
			}
			return v
		}
		grew, failed := 0, 0
		for _, x := range runs {
			if x.grew() {
				grew++
			}
			failed += x.failed
		}
		fmt.Fprintf(&b, "| %s | %g | %d | %s | %s | %s | %s | %s | %s | %s | %d of %d | %s | %s | %s | %s | %s | %s | %s | %d |\n",
			k.scenario, k.rate, len(runs),
			cell(col(func(x *rateRun) float64 { return x.achievedPerSec }), "%.0f"),
			cell(col(func(x *rateRun) float64 { return 1e3 * x.wpP50 }), "%.3f"),
			cell(col(func(x *rateRun) float64 { return 1e3 * x.wpP99 }), "%.3f"),
			cell(col(func(x *rateRun) float64 { return 100 * x.wpWithin }), "%.2f%%"),
			cell(col(func(x *rateRun) float64 { return ms(pct(x.client, 0.5)) }), "%.3f"),
			cell(col(func(x *rateRun) float64 { return ms(pct(x.client, 0.99)) }), "%.3f"),
			cell(col(func(x *rateRun) float64 { return ms(pct(x.client, 1)) }), "%.1f"),
			grew, len(runs),
			cell(col(func(x *rateRun) float64 { return x.cores }), "%.2f"),
			cell(col(func(x *rateRun) float64 { return x.waitCores }), "%.2f"),
			cell(col(func(x *rateRun) float64 { return 1e3 * x.cpuPerReq }), "%.3f"),
			cell(col(func(x *rateRun) float64 { return x.chunksPerSec }), "%.0f"),
			cell(col(func(x *rateRun) float64 { return 1e6 * x.chunkP50 }), "%.1f"),
			cell(col(func(x *rateRun) float64 { return 1e6 * x.chunkP99 }), "%.1f"),
			cell(col(func(x *rateRun) float64 { return x.driverCores }), "%.2f"),
			failed)
	}
	for _, k := range keys {
		for _, x := range groups[k] {
			if x.firstErr != "" {
				fmt.Fprintf(&b, "\n%s at %g/s: first error: %s\n", k.scenario, k.rate, x.firstErr)
				break
			}
		}
	}
	r.floorTable(&b)
	if len(r.pairs) > 0 {
		b.WriteString("\nA peer replica sharing the ledger, against the same replica alone (paired runs, the order alternating; ratio with a peer / alone, median (min–max) over pairs):\n\n")
		b.WriteString("| pairs | CPU per request | warmpath p50 | warmpath p99 | client p50 | client p99 | peer bytes per request | the peer's cores |\n|---|---|---|---|---|---|---|---|\n")
		ratio := func(f func(*rateRun) float64) []float64 {
			var v []float64
			for _, p := range r.pairs {
				v = append(v, f(p[1])/f(p[0]))
			}
			return v
		}
		var bytes, cores []float64
		for _, p := range r.pairs {
			bytes, cores = append(bytes, p[1].peerBytesPerReq), append(cores, p[1].peerCores)
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %s |\n", len(r.pairs),
			cell(ratio(func(x *rateRun) float64 { return x.cpuPerReq }), "%.3f"),
			cell(ratio(func(x *rateRun) float64 { return x.wpP50 }), "%.3f"),
			cell(ratio(func(x *rateRun) float64 { return x.wpP99 }), "%.3f"),
			cell(ratio(func(x *rateRun) float64 { return ms(pct(x.client, 0.5)) }), "%.3f"),
			cell(ratio(func(x *rateRun) float64 { return ms(pct(x.client, 0.99)) }), "%.3f"),
			cell(bytes, "%.0f"), cell(cores, "%.2f"))
	}
	if len(r.longs) > 0 {
		fmt.Fprintf(&b, "\n100K-token chats, one request at a time, after %d cold chats unmeasured (warmpath's CPU over each request's exchange, less its idle background; then its CPU in the 50 ms after the exchange, less the same: the KV events of the blocks the request stored, which have an ingest budget of their own, and the collection of what the request allocated; the minor page faults it took over the exchange; client latency over all runs' requests):\n\n", o.longWarmup)
		b.WriteString("| pattern | prompt tokens | runs | CPU ms/request | after it, ms/request | page faults/request | client p50 ms | client p99 ms |\n|---|---|---|---|---|---|---|---|\n")
		for _, l := range r.longs {
			sorted := append([]time.Duration(nil), l.client...)
			slices.Sort(sorted)
			fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %s | %.2f | %.2f |\n", l.pattern, l.tokens, len(l.cpuPerReq), cell(millis(l.cpuPerReq), "%.2f"),
				cell(millis(l.afterPerReq), "%.2f"), cell(l.faultsPerReq, "%.0f"), ms(pct(sorted, 0.5)), ms(pct(sorted, 0.99)))
		}
	}
	return b.String()
}

// floorTable writes, per scenario and rate, warmpath's client latency
// beside its paired floor's and over it.
func (r *report) floorTable(b *strings.Builder) {
	if len(r.floors) == 0 {
		return
	}
	keys, groups := byRate(r.floors, func(p floorPair) *rateRun { return p.warmpath })
	b.WriteString("\nEach warmpath run beside a run of the echo processor in the same minutes (the order alternating): the floor of the driver, gRPC and this machine at that time, and warmpath's client latency over it; median (min–max) over pairs:\n\n")
	b.WriteString("| scenario | offered/s | pairs | client p50 ms | floor p50 ms | client p99 ms | floor p99 ms | p99 over the floor, ms | CPU ms/request | floor CPU ms/request |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, k := range keys {
		ps := groups[k]
		col := func(f func(floorPair) float64) string {
			var v []float64
			for _, p := range ps {
				v = append(v, f(p))
			}
			return cell(v, "%.3f")
		}
		fmt.Fprintf(b, "| %s | %g | %d | %s | %s | %s | %s | %s | %s | %s |\n", k.scenario, k.rate, len(ps),
			col(func(p floorPair) float64 { return ms(pct(p.warmpath.client, 0.5)) }),
			col(func(p floorPair) float64 { return ms(pct(p.floor.client, 0.5)) }),
			col(func(p floorPair) float64 { return ms(pct(p.warmpath.client, 0.99)) }),
			col(func(p floorPair) float64 { return ms(pct(p.floor.client, 0.99)) }),
			col(func(p floorPair) float64 { return ms(pct(p.warmpath.client, 0.99)) - ms(pct(p.floor.client, 0.99)) }),
			col(func(p floorPair) float64 { return 1e3 * p.warmpath.cpuPerReq }),
			col(func(p floorPair) float64 { return 1e3 * p.floor.cpuPerReq }))
	}
}
