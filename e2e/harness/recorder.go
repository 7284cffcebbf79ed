package harness

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warmpath/warmpath/extproc"
	"github.com/warmpath/warmpath/scoring"
)

// Record is one routed request as the picker predicted it and as it
// turned out. Durations are wall time, as warmpath measured them.
type Record struct {
	// Seq numbers decisions in the order they were made, from 0, across
	// every replica of a stack.
	Seq int
	// Replica is the index of the warmpath replica that decided, from 0.
	Replica int `json:",omitempty"`
	Worker  string
	Mode    scoring.Mode
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
	// Decided and Ended are when the decision was made and when its
	// outcome arrived, by the recorder's clock; zero when not recorded.
	Decided, Ended time.Time `json:",omitzero"`
}

// Recorder is an extproc.Picker that passes every call to an inner picker
// and records each decision's prediction next to its outcome. It is safe
// for concurrent use.
type Recorder struct {
	inner   extproc.Picker
	replica int
	// seq numbers decisions; the recorders of one stack's replicas share it.
	seq *atomic.Int64

	now func() time.Time

	mu      sync.Mutex
	pending map[*scoring.Decision]pendingDecision
	records []Record
}

// pendingDecision is a decision whose outcome has not arrived.
type pendingDecision struct {
	seq     int
	decided time.Time
}

// NewRecorder returns a Recorder around inner.
func NewRecorder(inner extproc.Picker) *Recorder {
	return newReplicaRecorder(inner, 0, new(atomic.Int64))
}

// newReplicaRecorder returns a Recorder for replica that numbers its
// decisions from seq, which the other replicas' recorders share.
func newReplicaRecorder(inner extproc.Picker, replica int, seq *atomic.Int64) *Recorder {
	return &Recorder{inner: inner, replica: replica, seq: seq, now: time.Now, pending: map[*scoring.Decision]pendingDecision{}}
}

// Pick asks the inner picker and remembers the decision's order.
func (r *Recorder) Pick(ctx context.Context, req *scoring.Request, ws scoring.Workers) (*scoring.Decision, error) {
	d, err := r.inner.Pick(ctx, req, ws)
	if err != nil {
		return nil, err
	}
	seq := int(r.seq.Add(1) - 1)
	at := r.now()
	r.mu.Lock()
	r.pending[d] = pendingDecision{seq, at}
	r.mu.Unlock()
	return d, nil
}

// Done records the outcome and passes it to the inner picker.
func (r *Recorder) Done(d *scoring.Decision, o scoring.Outcome) {
	ended := r.now()
	r.mu.Lock()
	p, ok := r.pending[d]
	delete(r.pending, d)
	if ok {
		r.records = append(r.records, Record{
			Seq: p.seq, Replica: r.replica, Worker: d.Worker, Mode: d.Mode, PromptTokens: d.PromptTokens,
			PredictedTTFT: d.Chosen.PredictedTTFT, PredictedCached: d.Chosen.CachedTokens, Chosen: d.Chosen, Candidates: d.Candidates, Outcome: o,
			Decided: p.decided, Ended: ended,
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
	return mergeRecords(r)
}

// mergeRecords returns the finished records of every recorder together, in
// decision order.
func mergeRecords(rs ...*Recorder) []Record {
	var out []Record
	for _, r := range rs {
		r.mu.Lock()
		out = append(out, r.records...)
		r.mu.Unlock()
	}
	sortRecords(out)
	return out
}

// Pending returns how many decisions have not ended.
func (r *Recorder) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}
