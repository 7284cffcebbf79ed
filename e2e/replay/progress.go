package replay

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// progress prints one status line per interval at most while a run goes,
// so long runs show they are alive without flooding the terminal. It is
// safe for concurrent use; a nil *progress prints nothing.
type progress struct {
	w        io.Writer
	clock    Clock
	interval time.Duration
	label    string

	mu      sync.Mutex
	run     string
	total   int
	done    int
	failed  int
	started time.Time
	last    time.Time
}

// begin starts counting a new run of total requests (0 when unknown).
func (p *progress) begin(run string, total int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.run, p.total, p.done, p.failed = run, total, 0, 0
	p.started = p.clock.Now()
	p.last = p.started
}

// record counts one finished request and prints a line when the interval
// has passed since the last one.
func (p *progress) record(ok bool) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if !ok {
		p.failed++
	}
	now := p.clock.Now()
	if now.Sub(p.last) < p.interval {
		return
	}
	p.last = now
	p.printLocked(now)
}

// end prints the run's final line.
func (p *progress) end() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.printLocked(p.clock.Now())
}

func (p *progress) printLocked(now time.Time) {
	total := "?"
	if p.total > 0 {
		total = fmt.Sprint(p.total)
	}
	elapsed := now.Sub(p.started).Round(100 * time.Millisecond)
	fmt.Fprintf(p.w, "replay %s %s: %d/%s requests done, %d failed, %s\n", p.label, p.run, p.done, total, p.failed, elapsed)
}
