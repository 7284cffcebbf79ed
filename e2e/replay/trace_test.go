package replay

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseMooncakeExcerpt(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/mooncake-synthetic-head100.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := ParseMooncake(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 100 {
		t.Fatalf("%d records, want 100", len(recs))
	}
	first := recs[0]
	if first.Arrival != 0 || first.InputTokens != 40160 || first.OutputTokens != 6 || len(first.HashIDs) != 79 {
		t.Fatalf("first record %+v", first)
	}
	if recs[2].Arrival != 40*time.Millisecond {
		t.Fatalf("third arrival %v, want 40ms", recs[2].Arrival)
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].Arrival < recs[i-1].Arrival {
			t.Fatalf("arrivals not sorted at %d", i)
		}
	}
}

func TestMooncakeSharedBlocksBecomeSharedTokens(t *testing.T) {
	t.Parallel()
	w := WorkloadConfig{Kind: WorkloadMooncake, Model: "m", API: APICompletions, TokenIDs: true,
		Trace: TraceConfig{Path: "testdata/mooncake-synthetic-head100.jsonl", Limit: 60}}
	sessions, err := Generate(w, 11)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		a, b         int
		sharedBlocks int
	}{{15, 58, 5}, {42, 49, 57}}
	for _, tt := range tests {
		pa, pb := sessions[tt.a].Prefix.IDs(), sessions[tt.b].Prefix.IDs()
		n := 0
		for n < min(len(pa), len(pb)) && pa[n] == pb[n] {
			n++
		}
		if n != tt.sharedBlocks*512 {
			t.Errorf("sessions %d and %d share %d tokens, want %d blocks × 512", tt.a, tt.b, n, tt.sharedBlocks)
		}
	}
	// Lengths follow input_length exactly (all within their hash ids here).
	if got := len(sessions[0].Prefix.IDs()) + len(sessions[0].Turns[0].User.IDs()); got != 40160 {
		t.Fatalf("first prompt %d tokens, want 40160", got)
	}
	if sessions[5].Arrival != 529*time.Millisecond || sessions[5].Turns[0].MaxTokens != 445 {
		t.Fatalf("session 5: arrival %v, max tokens %d", sessions[5].Arrival, sessions[5].Turns[0].MaxTokens)
	}
}

func TestTraceSessionsLimits(t *testing.T) {
	t.Parallel()
	recs := []TraceRecord{
		{Arrival: 0, InputTokens: 50, OutputTokens: 0, HashIDs: []int64{1}},            // within one block
		{Arrival: time.Second, InputTokens: 40, OutputTokens: 99, HashIDs: []int64{1}}, // same block, shorter
		{Arrival: 2 * time.Second, InputTokens: 70, OutputTokens: 5},                   // no hash ids
		{Arrival: 3 * time.Second, InputTokens: 90, OutputTokens: 5, HashIDs: []int64{2}},
	}
	got := traceSessions(recs, TraceConfig{BlockTokens: 64, MaxOutput: 10, MaxPrompt: 80, Limit: 3}, 1)
	if len(got) != 3 {
		t.Fatalf("%d sessions, want limit 3", len(got))
	}
	if got[0].Prefix.Len() != 50 || got[0].Turns[0].User.Len() != 0 || got[0].Turns[0].MaxTokens != 1 {
		t.Fatalf("session 0: prefix %d user %d max %d", got[0].Prefix.Len(), got[0].Turns[0].User.Len(), got[0].Turns[0].MaxTokens)
	}
	if !slices.Equal(got[1].Prefix.IDs(), got[0].Prefix.IDs()[:40]) || got[1].Turns[0].MaxTokens != 10 {
		t.Fatal("session 1 does not share session 0's block or output not capped")
	}
	if got[2].Prefix.Len() != 0 || got[2].Turns[0].User.Len() != 70 {
		t.Fatalf("session 2: prefix %d, user %d words", got[2].Prefix.Len(), got[2].Turns[0].User.Len())
	}
	// Input beyond the hash ids is filled with unique text, capped by MaxPrompt.
	all := traceSessions(recs, TraceConfig{BlockTokens: 64, MaxPrompt: 80}, 1)
	if n := len(all[3].Prefix.IDs()) + len(all[3].Turns[0].User.IDs()); all[3].Prefix.Len() != 64 || n != 80 {
		t.Fatalf("session 3: prefix %d, total %d ids, want 64 and 80", all[3].Prefix.Len(), n)
	}
}

func TestParseAzureExcerpts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file      string
		firstIn   int
		firstOut  int
		secondArr time.Duration
	}{
		{"testdata/azure2023-code-head30.csv", 4808, 10, 52 * time.Millisecond},
		{"testdata/azure2023-conv-head30.csv", 374, 44, 4314579 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			f, err := os.Open(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			recs, err := ParseAzure(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 30 {
				t.Fatalf("%d records, want 30", len(recs))
			}
			if recs[0].InputTokens != tt.firstIn || recs[0].OutputTokens != tt.firstOut || recs[0].Arrival != 0 {
				t.Fatalf("first %+v", recs[0])
			}
			if recs[1].Arrival.Round(time.Microsecond) != tt.secondArr {
				t.Fatalf("second arrival %v, want %v", recs[1].Arrival, tt.secondArr)
			}
		})
	}
}

func TestParseTraceErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		azure  bool
		input  string
		inLine string
	}{
		{"mooncake bad json", false, `{"timestamp": 0, "input_length": 5, "output_length": 1}` + "\n{oops\n", "line 2"},
		{"mooncake missing field", false, `{"timestamp": 0, "input_length": 5}`, "required"},
		{"mooncake zero input", false, `{"timestamp": 0, "input_length": 0, "output_length": 1}`, "line 1"},
		{"mooncake time goes back", false, `{"timestamp": 10, "input_length": 5, "output_length": 1}` + "\n" + `{"timestamp": 5, "input_length": 5, "output_length": 1}`, "before the first"},
		{"azure bad header", true, "a,b,c\n", "header"},
		{"azure empty", true, "", "header"},
		{"azure bad time", true, "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n", "line 2"},
		{"azure bad number", true, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,x,2\n", "line 2"},
		{"azure negative", true, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,5,-2\n", "line 2"},
		{"azure wrong field count", true, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,5\n", "fields"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var err error
			if tt.azure {
				_, err = ParseAzure(strings.NewReader(tt.input))
			} else {
				_, err = ParseMooncake(strings.NewReader(tt.input))
			}
			if !errors.Is(err, ErrTrace) || !strings.Contains(err.Error(), tt.inLine) {
				t.Fatalf("err = %v, want ErrTrace mentioning %q", err, tt.inLine)
			}
		})
	}
}

func FuzzParseMooncake(f *testing.F) {
	f.Add(`{"timestamp": 0, "input_length": 40160, "output_length": 6, "hash_ids": [0, 1, 2]}`)
	f.Add(`{"timestamp": 1e3, "input_length": 1, "output_length": 0}` + "\n\n")
	f.Add(`{"timestamp": -1}`)
	f.Fuzz(func(t *testing.T, s string) {
		recs, err := ParseMooncake(strings.NewReader(s))
		if err != nil {
			if !errors.Is(err, ErrTrace) {
				t.Fatalf("error %v does not wrap ErrTrace", err)
			}
			return
		}
		for _, r := range recs {
			if r.InputTokens <= 0 || r.OutputTokens < 0 || r.Arrival < 0 {
				t.Fatalf("accepted bad record %+v", r)
			}
		}
	})
}

func FuzzParseAzure(f *testing.F) {
	f.Add("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n")
	f.Add("TIMESTAMP,ContextTokens,GeneratedTokens\n\"x\",1,1\n")
	f.Fuzz(func(t *testing.T, s string) {
		recs, err := ParseAzure(strings.NewReader(s))
		if err != nil {
			if !errors.Is(err, ErrTrace) {
				t.Fatalf("error %v does not wrap ErrTrace", err)
			}
			return
		}
		for _, r := range recs {
			if r.InputTokens <= 0 || r.OutputTokens < 0 || r.Arrival < 0 {
				t.Fatalf("accepted bad record %+v", r)
			}
		}
	})
}
