package replay

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestWordListVerified(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/wordlist/verified.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Kept         int            `json:"kept"`
		JoinedTokens map[string]int `json:"joined_tokens"`
		SHA256       string         `json:"words_sha256"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(wordsFile))
	if got := hex.EncodeToString(sum[:]); got != v.SHA256 {
		t.Fatalf("words.txt sha256 %s, verified.json has %s: rerun check_words.mjs", got, v.SHA256)
	}
	if len(wordList) != v.Kept {
		t.Fatalf("%d words, verified %d", len(wordList), v.Kept)
	}
	for name, n := range v.JoinedTokens {
		if n != len(wordList) {
			t.Errorf("%s: joined words are %d tokens, want one per word (%d)", name, n, len(wordList))
		}
	}
}

func baseWorkloads() map[string]WorkloadConfig {
	return map[string]WorkloadConfig{
		"synthetic": {Kind: WorkloadSynthetic, Model: "m", Synthetic: SyntheticConfig{
			Requests: 12, Prompt: Dist{Mean: 50, Stdev: 10, Min: 10, Max: 80}, Output: Dist{Mean: 8},
			PrefixTokens: 64, PrefixCount: 3,
		}},
		"shared-prefix": {Kind: WorkloadSharedPrefix, Model: "m", SharedPrefix: SharedPrefixConfig{
			Groups: 3, PromptsPerGroup: 4, SystemPromptLen: 40, Question: Dist{Mean: 20}, Output: Dist{Mean: 5}, Turns: 2,
		}},
		"chat": {Kind: WorkloadChat, Model: "m", Chat: ChatConfig{
			Sessions: 5, SystemTokens: 16, Turns: Dist{Mean: 3, Stdev: 1, Min: 1, Max: 5}, User: Dist{Mean: 20}, Output: Dist{Mean: 6},
			Think: DurationDist{Mean: Duration(2 * time.Second), Stdev: Duration(time.Second)},
		}},
		"coding": {Kind: WorkloadCoding, Model: "m", Coding: CodingConfig{
			Projects: 2, SessionsPerProject: 3, ContextTokens: 300, Turns: Dist{Mean: 2}, User: Dist{Mean: 15}, Output: Dist{Mean: 6},
		}},
		"mooncake": {Kind: WorkloadMooncake, Model: "m", Trace: TraceConfig{Path: "testdata/mooncake-synthetic-head100.jsonl", Limit: 60, BlockTokens: 16}},
		"azure":    {Kind: WorkloadAzure, Model: "m", Trace: TraceConfig{Path: "testdata/azure2023-conv-head30.csv", MaxPrompt: 200}},
	}
}

func TestGenerateDeterministic(t *testing.T) {
	t.Parallel()
	for name, w := range baseWorkloads() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a, err := Generate(w, 7)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Generate(w, 7)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a, b) {
				t.Fatal("same seed gave different sessions")
			}
			c, err := Generate(w, 8)
			if err != nil {
				t.Fatal(err)
			}
			if reflect.DeepEqual(a, c) {
				t.Fatal("different seeds gave identical sessions")
			}
			if len(a) == 0 {
				t.Fatal("no sessions")
			}
			// No two requests are identical unless the trace says so.
			if w.Kind != WorkloadMooncake {
				seen := map[string]bool{}
				for _, s := range a {
					for _, turn := range s.Turns {
						key := s.Prefix.String() + "|" + turn.User.String()
						if seen[key] {
							t.Fatalf("session %s repeats a prompt", s.ID)
						}
						seen[key] = true
					}
				}
			}
		})
	}
}

func TestSyntheticPrefixesAndLengths(t *testing.T) {
	t.Parallel()
	w := baseWorkloads()["synthetic"]
	sessions, err := Generate(w, 1)
	if err != nil {
		t.Fatal(err)
	}
	prefixes := map[string][]string{}
	for i, s := range sessions {
		if s.Prefix.Len() != 64 || len(s.Prefix.IDs()) != 64 || len(s.Prefix.Words()) != 64 {
			t.Fatalf("%s: prefix %d tokens / %d ids, want 64", s.ID, s.Prefix.Len(), len(s.Prefix.IDs()))
		}
		prefixes[s.Prefix.String()] = append(prefixes[s.Prefix.String()], s.ID)
		u := s.Turns[0].User
		// Clipped to [10, 80], the marker included.
		if n := u.Len(); n < 10 || n > 80 || len(u.IDs()) != n || len(strings.Fields(u.String())) != n {
			t.Fatalf("%s: prompt of %d tokens, %d ids, %q; want equal, in [10, 80]", s.ID, n, len(u.IDs()), u.String())
		}
		if want := marker(i); !slices.Equal(u.Words()[:markerTokens], want.Words()) || !slices.Equal(u.IDs()[:markerTokens], want.IDs()) {
			t.Fatalf("%s: prompt starts %q, want marker %q", s.ID, u.Words()[:markerTokens], want.Words())
		}
		if s.Turns[0].MaxTokens != 8 {
			t.Fatalf("max tokens %d, want 8", s.Turns[0].MaxTokens)
		}
	}
	if len(prefixes) != 3 {
		t.Fatalf("%d distinct prefixes, want 3", len(prefixes))
	}
	for _, ids := range prefixes {
		if len(ids) != 4 {
			t.Fatalf("prefix shared by %v, want 4 sessions each", ids)
		}
	}
}

func TestSharedPrefixGroups(t *testing.T) {
	t.Parallel()
	sessions, err := Generate(baseWorkloads()["shared-prefix"], 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 12 {
		t.Fatalf("%d sessions, want 3 groups × 4", len(sessions))
	}
	byGroup := map[string]string{}
	for _, s := range sessions {
		if !s.Accumulate || len(s.Turns) != 2 {
			t.Fatalf("%s: accumulate=%v turns=%d, want multi-turn of 2", s.ID, s.Accumulate, len(s.Turns))
		}
		if p, ok := byGroup[s.Group]; ok && p != s.Prefix.String() {
			t.Fatalf("group %s has two prefixes", s.Group)
		}
		byGroup[s.Group] = s.Prefix.String()
	}
	if len(byGroup) != 3 {
		t.Fatalf("%d groups", len(byGroup))
	}
	// Interleaved, not grouped: the first four sessions are not all one group.
	if sessions[0].Group == sessions[1].Group && sessions[1].Group == sessions[2].Group && sessions[2].Group == sessions[3].Group {
		t.Fatal("sessions not interleaved across groups")
	}
}

func TestChatAndCodingSessions(t *testing.T) {
	t.Parallel()
	chat, err := Generate(baseWorkloads()["chat"], 5)
	if err != nil {
		t.Fatal(err)
	}
	multi := false
	for _, s := range chat {
		if s.Turns[0].Think != 0 {
			t.Fatalf("%s: first turn has think time", s.ID)
		}
		for _, turn := range s.Turns[1:] {
			multi = true
			if turn.Think < 0 {
				t.Fatalf("negative think time")
			}
		}
	}
	if !multi {
		t.Fatal("no multi-turn chat session")
	}
	coding, err := Generate(baseWorkloads()["coding"], 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(coding) != 6 {
		t.Fatalf("%d coding sessions, want 6", len(coding))
	}
	ctx := map[string]int{}
	for _, s := range coding {
		if s.Prefix.Len() != 300 || !s.Accumulate {
			t.Fatalf("%s: context %d, accumulate %v", s.ID, s.Prefix.Len(), s.Accumulate)
		}
		ctx[s.Prefix.String()]++
	}
	if len(ctx) != 2 {
		t.Fatalf("%d project contexts, want 2", len(ctx))
	}
	// Projects alternate so their contexts compete for cache.
	if coding[0].Group == coding[1].Group {
		t.Fatalf("sessions 0 and 1 both on %s", coding[0].Group)
	}
}

func TestRequestBodyAccumulates(t *testing.T) {
	t.Parallel()
	// Word indices 0, 1 and 2 of the list are "the", "of" and "and".
	s := Session{
		ID: "c0", Prefix: textOf([]uint16{0}), Accumulate: true,
		Turns: []Turn{
			{User: textOf([]uint16{1}), MaxTokens: 3},
			{User: textOf([]uint16{2}), MaxTokens: 4},
		},
	}
	conv := &conversation{turns: []exchange{{user: s.Turns[0].User, reply: "hi there", ids: []int{9, 9}}}}
	// Token ids of words 0, 1, 2: 1000 + index·7919 mod 30000.
	if got := []int{tokenID(0), tokenID(1), tokenID(2)}; !slices.Equal(got, []int{1000, 8919, 16838}) {
		t.Fatalf("token ids %v", got)
	}
	tests := []struct {
		name string
		w    WorkloadConfig
		want string
	}{
		{"chat", WorkloadConfig{Model: "m", API: APIChat},
			`{"max_tokens":4,"messages":[{"role":"system","content":"the"},{"role":"user","content":"of"},{"role":"assistant","content":"hi there"},{"role":"user","content":"and"}],"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{"messages", WorkloadConfig{Model: "m", API: APIMessages},
			`{"max_tokens":4,"messages":[{"role":"user","content":"of"},{"role":"assistant","content":"hi there"},{"role":"user","content":"and"}],"model":"m","stream":true,"system":"the"}`},
		{"completions text", WorkloadConfig{Model: "m", API: APICompletions, IgnoreEOS: true},
			`{"ignore_eos":true,"max_tokens":4,"model":"m","prompt":"the of hi there and","stream":true,"stream_options":{"include_usage":true}}`},
		{"completions ids", WorkloadConfig{Model: "m", API: APICompletions, TokenIDs: true},
			`{"max_tokens":4,"model":"m","prompt":[1000,8919,9,9,16838],"stream":true,"stream_options":{"include_usage":true}}`},
		{"cache salt", WorkloadConfig{Model: "m", API: APICompletions, TokenIDs: true, CacheSalt: "run-random"},
			`{"cache_salt":"run-random","max_tokens":4,"model":"m","prompt":[1000,8919,9,9,16838],"stream":true,"stream_options":{"include_usage":true}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := requestBody(&tt.w, &s, 1, conv)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Fatalf("body\n got %s\nwant %s", b, tt.want)
			}
		})
	}
}

func TestWorkloadValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		w    WorkloadConfig
		want string
	}{
		{"no model", WorkloadConfig{Kind: WorkloadSynthetic, Synthetic: SyntheticConfig{Requests: 1, Prompt: Dist{Mean: 1}, Output: Dist{Mean: 1}}}, "workload.model"},
		{"unknown kind", WorkloadConfig{Kind: "nope", Model: "m"}, "workload.kind"},
		{"token ids on chat", WorkloadConfig{Kind: WorkloadSynthetic, Model: "m", API: APIChat, TokenIDs: true, Synthetic: SyntheticConfig{Requests: 1, Prompt: Dist{Mean: 1}, Output: Dist{Mean: 1}}}, "workload.token_ids"},
		{"prefix without count", WorkloadConfig{Kind: WorkloadSynthetic, Model: "m", Synthetic: SyntheticConfig{Requests: 1, Prompt: Dist{Mean: 1}, Output: Dist{Mean: 1}, PrefixTokens: 5}}, "prefix_count"},
		{"bad dist", WorkloadConfig{Kind: WorkloadChat, Model: "m", Chat: ChatConfig{Sessions: 1, Turns: Dist{Mean: 1}, User: Dist{Mean: 5, Min: 9, Max: 3}, Output: Dist{Mean: 1}}}, "user_tokens"},
		{"salt on messages", WorkloadConfig{Kind: WorkloadSynthetic, Model: "m", API: APIMessages, CacheSalt: "x", Synthetic: SyntheticConfig{Requests: 1, Prompt: Dist{Mean: 1}, Output: Dist{Mean: 1}}}, "workload.cache_salt"},
		{"no trace path", WorkloadConfig{Kind: WorkloadAzure, Model: "m"}, "workload.trace.path"},
		{"zero groups", WorkloadConfig{Kind: WorkloadSharedPrefix, Model: "m", SharedPrefix: SharedPrefixConfig{PromptsPerGroup: 1, SystemPromptLen: 1, Question: Dist{Mean: 1}, Output: Dist{Mean: 1}}}, "num_groups"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Generate(tt.w, 1)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrConfig naming %s", err, tt.want)
			}
		})
	}
}

func TestMarkersUniqueAndOneTokenPerWord(t *testing.T) {
	t.Parallel()
	inList := map[string]bool{}
	for _, w := range wordList {
		inList[w] = true
	}
	words, ids := map[string]int{}, map[[markerTokens]int]int{}
	firstWord := map[string]int{}
	const n = 50000
	for i := range n {
		m := marker(i)
		if len(m.Words()) != markerTokens || len(m.IDs()) != markerTokens {
			t.Fatalf("marker %d has %d words, %d ids", i, len(m.Words()), len(m.IDs()))
		}
		for _, w := range m.Words() {
			if !inList[w] {
				t.Fatalf("marker %d uses %q, not a one-token word", i, w)
			}
		}
		for _, id := range m.IDs() {
			if id < tokenIDBase || id >= tokenIDBase+tokenIDSpan {
				t.Fatalf("marker %d id %d out of range", i, id)
			}
		}
		key := m.String()
		if j, dup := words[key]; dup {
			t.Fatalf("markers %d and %d both spell %q", j, i, key)
		}
		words[key] = i
		idKey := [markerTokens]int(m.IDs())
		if j, dup := ids[idKey]; dup {
			t.Fatalf("markers %d and %d share ids %v", j, i, m.IDs())
		}
		ids[idKey] = i
		if i < len(wordList) {
			firstWord[m.Words()[0]]++
		}
	}
	// Consecutive indices start with different words.
	if len(firstWord) != len(wordList) {
		t.Fatalf("first %d markers start with %d distinct words", len(wordList), len(firstWord))
	}
}

func TestDistSample(t *testing.T) {
	t.Parallel()
	r := newRand(1)
	d := Dist{Mean: 100, Stdev: 50, Min: 60, Max: 120}
	var vals []int
	for range 2000 {
		vals = append(vals, d.sample(r))
	}
	if slices.Min(vals) != 60 || slices.Max(vals) != 120 {
		t.Fatalf("range [%d, %d], want clipped to [60, 120]", slices.Min(vals), slices.Max(vals))
	}
	if got := (Dist{Mean: 7}).sample(r); got != 7 {
		t.Fatalf("stdev 0 sample %d, want 7", got)
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	a, b := textOf([]uint16{0, 1, 2}), textOf([]uint16{3, 4})
	ab := concat(a, Text{}, b)
	tests := []struct {
		name string
		t    Text
		want string
	}{
		{"empty", Text{}, ""},
		{"one segment", a, "the of and"},
		{"concat", ab, "the of and to in"},
		{"head within first segment", ab.head(2), "the of"},
		{"head across segments", ab.head(4), "the of and to"},
		{"head beyond end", ab.head(9), "the of and to in"},
		{"head zero", ab.head(0), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := len(strings.Fields(tt.want))
			if tt.t.String() != tt.want || tt.t.Len() != n || len(tt.t.Words()) != n || len(tt.t.IDs()) != n {
				t.Fatalf("%q (len %d, %d words, %d ids), want %q", tt.t.String(), tt.t.Len(), len(tt.t.Words()), len(tt.t.IDs()), tt.want)
			}
		})
	}
	// Texts share storage: a trace session's prefix holds no copy of its blocks.
	if &ab.head(4).segs[1][0] != &b.segs[0][0] {
		t.Fatal("head copied the block instead of sharing it")
	}
}

// TestPrefixSeedKeepsPrefixes checks that a workload generated with another
// seed but the same PrefixSeed sends new prompts behind the same prefixes,
// for both generators that have shared prefixes.
func TestPrefixSeedKeepsPrefixes(t *testing.T) {
	t.Parallel()
	for name, w := range map[string]WorkloadConfig{
		"synthetic": {Kind: WorkloadSynthetic, Model: "m", Synthetic: SyntheticConfig{Requests: 8, Prompt: Dist{Mean: 32},
			Output: Dist{Mean: 4}, PrefixTokens: 64, PrefixCount: 2}},
		"shared-prefix": {Kind: WorkloadSharedPrefix, Model: "m", SharedPrefix: SharedPrefixConfig{Groups: 2, PromptsPerGroup: 4,
			SystemPromptLen: 64, Question: Dist{Mean: 32}, Output: Dist{Mean: 4}}},
	} {
		first, err := Generate(w, 1)
		if err != nil {
			t.Fatal(err)
		}
		kept := w
		kept.PrefixSeed = 1
		second, err := Generate(kept, 2)
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := Generate(w, 2)
		if err != nil {
			t.Fatal(err)
		}
		// Sessions by ID: the shared-prefix generator shuffles their order.
		byID := func(ss []Session) map[string]Session {
			m := map[string]Session{}
			for _, s := range ss {
				m[s.ID] = s
			}
			return m
		}
		a, b, c := byID(first), byID(second), byID(fresh)
		for id, s := range a {
			if s.Prefix.String() != b[id].Prefix.String() {
				t.Errorf("%s: session %s changed its prefix with PrefixSeed set", name, id)
			}
			if s.Turns[0].User.String() == b[id].Turns[0].User.String() {
				t.Errorf("%s: session %s kept its prompt under a new seed", name, id)
			}
			if s.Prefix.String() == c[id].Prefix.String() {
				t.Errorf("%s: session %s kept its prefix under a new seed without PrefixSeed", name, id)
			}
		}
	}
}
