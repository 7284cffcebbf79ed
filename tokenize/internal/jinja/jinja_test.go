package jinja

import (
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"
)

type diffCase struct {
	Name     string          `json:"name"`
	Template string          `json:"template"`
	Vars     json.RawMessage `json:"vars"`
	Want     *string         `json:"want"`
	Error    string          `json:"error"`
}

// TestReferenceCases renders every snippet that gen_cases.py rendered with
// transformers' jinja2 environment and expects the same text, or an error
// where the reference raised.
func TestReferenceCases(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("testdata", "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []diffCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			vars, err := ParseJSON(c.Vars)
			if err != nil {
				t.Fatal(err)
			}
			before, err := ToJSON(vars)
			if err != nil {
				t.Fatal(err)
			}
			tmpl, err := Compile(c.Template)
			var got string
			if err == nil {
				got, err = tmpl.Render(vars.(*Dict), RenderOptions{})
			}
			if after, _ := ToJSON(vars); after != before {
				t.Errorf("rendering modified its input:\n%s\n%s", before, after)
			}
			if c.Want == nil {
				if err == nil {
					t.Fatalf("rendered %q, want a %s", got, c.Error)
				}
				return
			}
			if err != nil {
				t.Fatalf("error %v, want %q", err, *c.Want)
			}
			if got != *c.Want {
				t.Fatalf("\n got %q\nwant %q", got, *c.Want)
			}
		})
	}
}

func TestRaiseExceptionWrapsErrRaised(t *testing.T) {
	t.Parallel()
	tmpl, err := Compile(`{{ raise_exception("no " ~ x) }}`)
	if err != nil {
		t.Fatal(err)
	}
	vars := NewDict(1)
	vars.Set("x", "way")
	_, err = tmpl.Render(vars, RenderOptions{})
	if !errors.Is(err, ErrRaised) || err.Error() != "template raised an exception: no way" {
		t.Fatalf("err = %v", err)
	}
}

// TestRenderKeepsAboutItsLength keeps renders whose hint reserved far more
// than they wrote, as a prompt cache keeps rendered prompts, and expects the
// heap to hold about their length, not the reserved buffers. Not parallel:
// it reads the process's heap.
func TestRenderKeepsAboutItsLength(t *testing.T) {
	tmpl, err := Compile(`{% for m in messages %}<|{{ m }}|>{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	vars := NewDict(1)
	vars.Set("messages", &List{Items: []Value{"system", "user"}})
	const keep, hint = 64, 256 << 10
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	kept := make([]string, keep)
	for i := range kept {
		if kept[i], err = tmpl.Render(vars, RenderOptions{SizeHint: hint}); err != nil {
			t.Fatal(err)
		}
	}
	grew := int64(heap()) - int64(before)
	if kept[keep-1] != "<|system|><|user|>" {
		t.Fatalf("rendered %q", kept[keep-1])
	}
	// Unfitted, the renders would hold keep·hint = 16 MiB.
	if grew > 1<<20 {
		t.Fatalf("%d renders of %d bytes with a %d-byte hint kept %d bytes of heap", keep, len(kept[0]), hint, grew)
	}
	runtime.KeepAlive(kept)
}

func TestStrftimeNowUsesClock(t *testing.T) {
	t.Parallel()
	tmpl, err := Compile(`{{ strftime_now("%Y-%m-%d %d %b %Y %H:%M:%S %A %B %j %p %I %y %%") }}`)
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Date(2026, 3, 4, 15, 9, 26, 0, time.UTC) }
	got, err := tmpl.Render(NewDict(0), RenderOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	const want = "2026-03-04 04 Mar 2026 15:09:26 Wednesday March 063 PM 03 26 %"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, src string
	}{
		{"deep recursion", `{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}`},
		{"huge repeat", `{{ "x" * 1000000000 }}`},
		{"huge range", `{{ range(1000000000) | length }}`},
		{"huge power", `{{ 2 ** 100000000 }}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tmpl, err := Compile(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tmpl.Render(NewDict(0), RenderOptions{}); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}

func TestDictDerived(t *testing.T) {
	type keyA struct{ v bool }
	type keyB struct{}
	d := NewDict(1)
	if _, ok := d.Derived(keyA{true}); ok {
		t.Fatal("a new dict has a derivation")
	}
	d.SetDerived(keyA{true}, "x")
	if v, ok := d.Derived(keyA{true}); !ok || v != "x" {
		t.Fatalf("Derived(keyA{true}) = %v, %v; want x, true", v, ok)
	}
	if _, ok := d.Derived(keyA{false}); ok {
		t.Fatal("a derivation answered under another key value")
	}
	d.SetDerived(keyB{}, "y")
	if _, ok := d.Derived(keyA{true}); ok {
		t.Fatal("the replaced derivation still answers")
	}
	if c := d.Clone(); c.Len() != d.Len() {
		t.Fatal("clone lost keys")
	} else if _, ok := c.Derived(keyB{}); ok {
		t.Fatal("a clone carries its original's derivation")
	}
}

// TestSmallIntOpMatchesBig checks numop's and numCompare's int64 fast
// paths against their big.Int paths (operands given as *big.Int skip the
// fast paths), on edge values and random ones: same value, same error.
func TestSmallIntOpMatchesBig(t *testing.T) {
	edges := []int64{0, 1, -1, 2, -2, 7, -7, 1<<31 - 1, -(1<<31 - 1), 1 << 31, -(1 << 31), 1<<32 + 3,
		math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1, 1 << 62, -(1 << 62)}
	rng := rand.New(rand.NewPCG(3, 4))
	vals := slices.Clone(edges)
	for range 200 {
		vals = append(vals, rng.Int64()>>rng.IntN(64), -rng.Int64()>>rng.IntN(64))
	}
	same := func(a, b Value) bool {
		ab, aok := a.(*big.Int)
		bb, bok := b.(*big.Int)
		if aok || bok {
			return aok && bok && ab.Cmp(bb) == 0
		}
		return a == b
	}
	for _, op := range []string{"+", "-", "*", "//", "%"} {
		for _, a := range vals {
			for _, b := range vals {
				got, gerr := numop(op, a, b)
				want, werr := numop(op, big.NewInt(a), big.NewInt(b))
				if (gerr != nil) != (werr != nil) || (gerr == nil && !same(got, want)) {
					t.Fatalf("%d %s %d = %v, %v; big.Int path gives %v, %v", a, op, b, got, gerr, want, werr)
				}
			}
		}
	}
	for _, a := range vals {
		for _, b := range append(vals[:len(edges):len(edges)], a, a+1, a-1) {
			got, _ := numCompare(a, b)
			want, _ := numCompare(big.NewInt(a), big.NewInt(b))
			if got != want {
				t.Fatalf("compare(%d, %d) = %d, big.Int path gives %d", a, b, got, want)
			}
		}
		for _, b := range []bool{false, true} {
			got, _ := numCompare(a, b)
			want, _ := numCompare(big.NewInt(a), big.NewInt(map[bool]int64{true: 1}[b]))
			if got != want {
				t.Fatalf("compare(%d, %v) = %d, big.Int path gives %d", a, b, got, want)
			}
		}
	}
	for _, a := range vals {
		got, _ := unop("-", a)
		want, _ := unop("-", big.NewInt(a))
		if !same(got, want) {
			t.Fatalf("-%d = %v, big.Int path gives %v", a, got, want)
		}
	}
}

// TestSelfReferentialNamespace: a namespace that holds itself prints as
// Python's repr prints it (jinja2 3.1.6), instead of recursing until the
// stack runs out, which no recover catches.
func TestSelfReferentialNamespace(t *testing.T) {
	t.Parallel()
	tmpl, err := Compile(`{% set ns = namespace(s='') %}{% set ns.s = ns %}{{ ns }}|{% set ns.l = [ns, 1] %}{{ ns.l }}`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(NewDict(0), RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const want = `<Namespace {'s': <Namespace {...}>}>|[<Namespace {'s': <Namespace {...}>, 'l': [...]}>, 1]`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
