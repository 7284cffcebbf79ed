package peers

import (
	"syscall"
	"testing"
	"time"

	"github.com/warmpath/warmpath/scoring"
)

func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkShare measures one shared decision (a reservation and its end)
// from the sending replica's sink to the follower's ledger over loopback
// gRPC, both in this process: encoding, transport and decoding. With one
// decision at a time (each waits until the follower has it) every change
// travels in a frame of its own, as at a low request rate; batched, the
// decisions are as dense as the sender makes them.
func BenchmarkShare(b *testing.B) {
	for _, mode := range []string{"one-at-a-time", "batched"} {
		b.Run(mode, func(b *testing.B) {
			tok := tokenFile(b, "a secret the benchmark's replicas share")
			cfg := testConfig(tok)
			cfg.Heartbeat, cfg.StaleAfter, cfg.ExpireAfter = 200*time.Millisecond, time.Second, 5*time.Second
			if mode == "one-at-a-time" {
				cfg.Linger = 0
			}
			a := startReplica(b, cfg)
			f := testConfig(tok, a.addr)
			f.Heartbeat, f.StaleAfter, f.ExpireAfter = cfg.Heartbeat, cfg.StaleAfter, cfg.ExpireAfter
			follower := startReplica(b, f)
			now := time.Now()
			sa := scoring.SharedAssignment{Worker: "w3", Decided: now, Start: now, First: now.Add(time.Second),
				Prompt: 8192, Uncached: 1024, Blocks: 512, OwnBlocks: 80, Stream: true, SpecKeys: make([]uint64, 64)}
			// What a streamed response of 128 tokens teaches: both fits.
			lesson := scoring.Lesson{Source: "addr:10.0.0.7", Ratio: 1.1,
				TTFT:   scoring.Fit{OK: true, X: [5]float64{3, 1024, 12, 9e6, 1}, Y: 0.4, Seen: 0.44},
				Decode: scoring.Fit{OK: true, X: [5]float64{127, 2048, 1016, 8e8, 0}, Y: 3.2, Seen: 3.2}}
			id := uint64(0)
			share := func() {
				id++
				sa.ID = id
				a.mesh.Reserved(sa)
				a.mesh.Ended(id, lesson)
			}
			eventually(b, "the follower connected", func() bool {
				share()
				time.Sleep(time.Millisecond)
				return follower.received() == id
			})
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				share()
				if mode == "one-at-a-time" {
					for follower.received() < id {
						time.Sleep(10 * time.Microsecond)
					}
				}
			}
			for follower.received() < id {
				time.Sleep(time.Millisecond)
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
