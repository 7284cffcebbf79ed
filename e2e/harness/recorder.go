package harness

import (
	"context"
	"sync"
	"time"

	"github.com/warmpath/warmpath/extproc"
	"github.com/warmpath/warmpath/scoring"
)

// Record is one routed request as the picker predicted it and as it
// turned out. Durations are wall time, as warmpath measured them.
type Record struct {
	// Seq numbers decisions in the order they were made, from 0.
	Seq    int
	Worker string
	Mode   scoring.Mode
	// PromptTokens is what the picker knew of the prompt's length.
	PromptTokens int
	// PredictedTTFT and PredictedCached are the chosen candidate's
	// prediction; zero for policies that predict nothing.
	PredictedTTFT   time.Duration
	PredictedCached int
	// Chosen is the chosen candidate as the picker saw it: the predicted
	// parts (queue wait, prefill, overhead) and the load behind them.
	Chosen scoring.Candidate
	// Candidates is every worker considered, with its prediction.
	Candidates []scoring.Candidate
	// Outcome is what warmpath observed when the assignment ended.
	Outcome scoring.Outcome
}

// Recorder is an extproc.Picker that passes every call to an inner picker
// and records each decision's prediction next to its outcome. It is safe
// for concurrent use.
type Recorder struct {
	inner extproc.Picker

	mu      sync.Mutex
	seq     int
	pending map[*scoring.Decision]int
	records []Record
}

// NewRecorder returns a Recorder around inner.
func NewRecorder(inner extproc.Picker) *Recorder {
	return &Recorder{inner: inner, pending: map[*scoring.Decision]int{}}
}

// Pick asks the inner picker and remembers the decision's order.
func (r *Recorder) Pick(ctx context.Context, req *scoring.Request, ws scoring.Workers) (*scoring.Decision, error) {
	d, err := r.inner.Pick(ctx, req, ws)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.pending[d] = r.seq
	r.seq++
	r.mu.Unlock()
	return d, nil
}

// Done records the outcome and passes it to the inner picker.
func (r *Recorder) Done(d *scoring.Decision, o scoring.Outcome) {
	r.mu.Lock()
	seq, ok := r.pending[d]
	delete(r.pending, d)
	if ok {
		r.records = append(r.records, Record{
			Seq: seq, Worker: d.Worker, Mode: d.Mode, PromptTokens: d.PromptTokens,
			PredictedTTFT: d.Chosen.PredictedTTFT, PredictedCached: d.Chosen.CachedTokens, Chosen: d.Chosen, Candidates: d.Candidates, Outcome: o,
		})
	}
	r.mu.Unlock()
	r.inner.Done(d, o)
}

// firstTokener is the optional interface of pickers that want to know when
// a request's first token arrived (scoring.Router has it).
type firstTokener interface {
	FirstToken(d *scoring.Decision)
}

// FirstToken passes the notice on when the inner picker wants it.
func (r *Recorder) FirstToken(d *scoring.Decision) {
	if ft, ok := r.inner.(firstTokener); ok {
		ft.FirstToken(d)
	}
}

// Records returns the finished records in decision order.
func (r *Recorder) Records() []Record {
	r.mu.Lock()
	out := append([]Record(nil), r.records...)
	r.mu.Unlock()
	sortRecords(out)
	return out
}

// Pending returns how many decisions have not ended.
func (r *Recorder) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}
