package extproc

import (
	"slices"
	"testing"
)

// TestBudgetsAreBucketBounds checks that each budget DESIGN.md §5 sets on
// a histogram of this layer is one of its bucket bounds, so the share of
// observations within it is counted, not interpolated, and that the
// bounds ascend.
func TestBudgetsAreBucketBounds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		buckets []float64
		budgets []float64
	}{
		{"warmpath_decision_duration_seconds", decisionBuckets, []float64{0.0005, 0.002}},
		{"warmpath_response_chunk_duration_seconds", chunkBuckets, []float64{0.0002}},
	} {
		if !slices.IsSorted(tc.buckets) || len(slices.Compact(slices.Clone(tc.buckets))) != len(tc.buckets) {
			t.Errorf("%s: bounds %v do not strictly ascend", tc.name, tc.buckets)
		}
		for _, b := range tc.budgets {
			if !slices.Contains(tc.buckets, b) {
				t.Errorf("%s: budget %g s is not a bucket bound", tc.name, b)
			}
		}
	}
}
