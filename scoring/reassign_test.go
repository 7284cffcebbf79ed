package scoring

import (
	"testing"
	"time"
)

// TestReassign: a decision whose fallback served moves its reservation to
// that worker (the router's own ledger and a peer's view of it), ends there
// once, and teaches nothing to the step model of either worker; calls that
// cannot move anything report false and change nothing.
func TestReassign(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		to     func(d *Decision) string
		before func(g *rig, d *Decision)
		ended  bool // before ended the assignment
		want   bool
	}{
		{name: "to another candidate", to: other, want: true},
		{name: "to the chosen worker", to: func(d *Decision) string { return d.Worker }},
		{name: "to a worker that was no candidate", to: func(*Decision) string { return "w9" }},
		{name: "after Done", to: other, before: func(g *rig, d *Decision) { g.r.Done(d, Outcome{End: EndAborted}) }, ended: true},
		{name: "after its first token", to: other, before: func(g *rig, d *Decision) { g.r.FirstToken(d) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, b, _ := twoReplicas(t)
			ws := pool(3)
			d, err := a.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(1, 0, 2048)}, ws)
			if err != nil {
				t.Fatal(err)
			}
			if tt.before != nil {
				tt.before(a, d)
			}
			to := tt.to(d)
			models := map[string]StepModel{}
			for _, w := range ws {
				models[w.Name] = a.r.Model(w.Name)
			}
			if got := a.r.Reassign(d, to); got != tt.want {
				t.Fatalf("Reassign(%s) = %v, want %v", to, got, tt.want)
			}
			where := d.Worker
			if tt.want {
				where = to
			}
			if !tt.ended {
				if got := a.r.InFlight(); len(got) != 1 || got[where] != 1 {
					t.Fatalf("in flight %v, want one on %s", got, where)
				}
				if got := b.r.PeerInFlight(); len(got) != 1 || got[where] != 1 {
					t.Fatalf("the peer holds %v, want one on %s", got, where)
				}
				a.clock.Advance(2 * time.Second)
				a.r.Done(d, Outcome{End: EndCompleted, HTTPStatus: 200, TTFT: time.Second, Duration: 2 * time.Second,
					PromptTokens: 2048, CompletionTokens: 10, CachedTokens: 0})
			}
			if got := a.r.InFlight(); len(got) != 0 {
				t.Fatalf("in flight after Done: %v", got)
			}
			if got := b.r.PeerInFlight(); len(got) != 0 {
				t.Fatalf("the peer still holds %v", got)
			}
			if tt.want {
				for _, w := range ws {
					if got := a.r.Model(w.Name); got != models[w.Name] {
						t.Errorf("%s: step model changed by a moved outcome: %+v, was %+v", w.Name, got, models[w.Name])
					}
				}
			}
		})
	}
}

// other returns a candidate of d that was not chosen.
func other(d *Decision) string {
	for _, c := range d.Candidates {
		if c.Worker != d.Worker {
			return c.Worker
		}
	}
	return ""
}
