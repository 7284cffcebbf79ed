package jinja

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// chatDoc is a chat request of n messages, each long enough to be cached.
func chatDoc(n int, extra string) []byte {
	var b strings.Builder
	b.WriteString(`{"model": "m", "messages": [`)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `{"role": "user", "content": "message %d says \"quoted\\\\\" and \\u00e9 %s"}`, i, strings.Repeat("x", 60))
	}
	b.WriteString(`]` + extra + `}`)
	return []byte(b.String())
}

func TestJSONCacheReusesRepeatedElements(t *testing.T) {
	t.Parallel()
	c := NewJSONCache(1 << 20)
	first, _, err := ParseJSONObject(chatDoc(3, ""), c)
	if err != nil {
		t.Fatal(err)
	}
	doc := chatDoc(4, `, "max_tokens": 8`)
	second, members, err := ParseJSONObject(doc, c)
	if err != nil {
		t.Fatal(err)
	}
	plain, plainMembers, err := ParseJSONObject(doc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Repr(second), Repr(plain); got != want {
		t.Fatalf("cached parse differs:\n got %s\nwant %s", got, want)
	}
	if fmt.Sprint(members) != fmt.Sprint(plainMembers) {
		t.Fatalf("members %v, want %v", members, plainMembers)
	}
	m1, _ := first.Get("messages")
	m2, _ := second.Get("messages")
	for i := range 3 {
		if m1.(*List).Items[i] != m2.(*List).Items[i] {
			t.Errorf("message %d was decoded again, not reused", i)
		}
	}
	if s := c.Stats(); s.Hits != 3 || s.Misses != 4 || s.Entries != 4 {
		t.Fatalf("stats %+v, want 3 hits, 4 misses, 4 entries", s)
	}
}

func TestJSONCacheEvictsToItsBudget(t *testing.T) {
	t.Parallel()
	const budget = 16 << 10
	c := NewJSONCache(budget)
	for i := range 50 {
		if _, _, err := ParseJSONObject(chatDoc(1, fmt.Sprintf(`, "n": %d`, i)), c); err != nil {
			t.Fatal(err)
		}
		doc := []byte(fmt.Sprintf(`{"messages": [{"role": "user", "content": "%d %s"}]}`, i, strings.Repeat("y", 100)))
		if _, _, err := ParseJSONObject(doc, c); err != nil {
			t.Fatal(err)
		}
	}
	if s := c.Stats(); s.Bytes > budget || s.Entries == 0 || s.Entries >= 100 {
		t.Fatalf("stats %+v, want at most %d bytes and some entries, not all", s, budget)
	}
}

// TestJSONCacheBadInput: a document that repeats a cached element and then
// goes wrong, or whose element is malformed, gets the error the plain parse
// gives.
func TestJSONCacheBadInput(t *testing.T) {
	t.Parallel()
	c := NewJSONCache(1 << 20)
	good := chatDoc(2, "")
	if _, _, err := ParseJSONObject(good, c); err != nil {
		t.Fatal(err)
	}
	for _, doc := range [][]byte{
		good[:len(good)-1],
		append(append([]byte{}, good[:len(good)-2]...), `, {"role": "user", "content": "unterminated`...),
		append(append([]byte{}, good[:len(good)-2]...), `, {"role": "user" "content": "no colon between, long enough to be looked up"}]}`...),
		[]byte(strings.Replace(string(good), `"role"`, `"role`, 1)),
	} {
		_, _, err := ParseJSONObject(doc, c)
		_, _, want := ParseJSONObject(doc, nil)
		if err == nil || want == nil || err.Error() != want.Error() || !errors.Is(err, ErrJSON) {
			t.Errorf("ParseJSONObject(%.60q…) = %v, want %v", doc, err, want)
		}
	}
}

// TestStringEnd checks the quote finder against a byte-at-a-time model.
func TestStringEnd(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte{'a', '"', '\\', 'b'}
	for n := range 5000 {
		s := make([]byte, rng.IntN(20))
		for i := range s {
			s[i] = alphabet[rng.IntN(len(alphabet))]
		}
		want, wantOK := -1, false
		for i := 0; i < len(s); i++ {
			if s[i] == '\\' {
				i++
				continue
			}
			if s[i] == '"' {
				want, wantOK = i, true
				break
			}
		}
		got, ok := stringEnd(s, 0)
		if ok != wantOK || ok && got != want {
			t.Fatalf("case %d: stringEnd(%q) = %d, %v; want %d, %v", n, s, got, ok, want, wantOK)
		}
	}
}

// FuzzJSONCache: parsing a document through a cache warmed by another
// gives what parsing it alone gives, value and error.
func FuzzJSONCache(f *testing.F) {
	f.Add(chatDoc(2, ""), chatDoc(3, ""))
	f.Add(chatDoc(1, ""), []byte(`{"messages": [{"a": "`+strings.Repeat("z", 70)+`"}, 1, [2]]}`))
	f.Fuzz(func(t *testing.T, warm, doc []byte) {
		c := NewJSONCache(1 << 16)
		_, _, _ = ParseJSONObject(warm, c)
		got, _, err := ParseJSONObject(doc, c)
		want, _, wantErr := ParseJSONObject(doc, nil)
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
			t.Fatalf("error %v, want %v", err, wantErr)
		}
		if err == nil && Repr(got) != Repr(want) {
			t.Fatalf("cached parse %s, want %s", Repr(got), Repr(want))
		}
	})
}
