package jinja

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"
)

// memoCase is a template and a way to build its variables for each render
// of a sequence, from message dicts that stay the same across renders (as
// a message cache hands them out).
type memoCase struct {
	name string
	src  string
	// vars returns the variables of render i; msgs holds the pool of
	// message dicts, the same pointers in every render.
	vars func(i int, msgs []*Dict) *Dict
	// hits is whether the sequence must replay some iteration: a memo
	// that never replays would pass the comparison without testing it.
	hits bool
}

func message(role, content string) *Dict {
	d := NewDict(2)
	d.Set("role", role)
	d.Set("content", content)
	return d
}

// conversation is msgs[:n] as a fresh list, as each request's list is.
func conversation(msgs []*Dict, n int) *List {
	l := &List{Items: make([]Value, n)}
	for i := range n {
		l.Items[i] = msgs[i]
	}
	return l
}

func baseVars(i int, msgs []*Dict) *Dict {
	v := NewDict(4)
	v.Set("messages", conversation(msgs, 2+i%(len(msgs)-1)))
	return v
}

var memoCases = []memoCase{
	{
		name: "qwen3-like: a namespace read before the loop and the loop's position",
		src: `{%- set ns = namespace(last=messages|length - 1) %}
{%- for m in messages[::-1] %}{%- set idx = (messages|length - 1) - loop.index0 %}
{%- if m.role == "user" and ns.last == messages|length - 1 %}{% set ns.last = idx %}{% endif %}{% endfor %}
{%- for m in messages %}
{%- if m.role == "user" or (m.role == "system" and not loop.first) %}<u>{{ m.content }}</u>
{%- elif m.role == "assistant" %}{% set c = m.content %}
{%- if loop.index0 > ns.last %}{% if loop.last or c %}<t>{{ c.strip() }}</t>{% endif %}{% else %}<a>{{ c }}{% endif %}
{%- elif m.role == "tool" %}{% if loop.first or messages[loop.index0 - 1].role != "tool" %}<tools>{% endif %}{{ m.content }}
{%- if loop.last or messages[loop.index0 + 1].role != "tool" %}</tools>{% endif %}{% endif %}{% endfor %}`,
		vars: baseVars,
		hits: true,
	},
	{
		name: "a loop-local name read before it is set reads the outer one",
		src:  `{% for m in messages %}{% if x is defined %}[{{ x }}]{% endif %}{% set x = m.content %}{{ x }};{% endfor %}`,
		vars: func(i int, msgs []*Dict) *Dict {
			v := baseVars(i, msgs)
			if i%3 != 0 {
				v.Set("x", fmt.Sprint("outer", i%2))
			}
			return v
		},
		hits: true, // when x is what it was
	},
	{
		name: "an outer variable that changes between renders",
		src:  `{% for m in messages %}{{ prefix ~ m.content }}|{{ prefix|length }}{% endfor %}`,
		vars: func(i int, msgs []*Dict) *Dict {
			v := baseVars(i, msgs)
			v.Set("prefix", []string{"a", "b", "a"}[i%3])
			return v
		},
		hits: true,
	},
	{
		name: "a macro is called",
		src:  `{% macro f(x) %}<{{ x }}{{ sep }}>{% endmacro %}{% for m in messages %}{{ f(m.content) }}{% endfor %}`,
		vars: func(i int, msgs []*Dict) *Dict {
			v := baseVars(i, msgs)
			v.Set("sep", fmt.Sprint(i%2))
			return v
		},
	},
	{
		name: "the clock",
		src:  `{% for m in messages %}{{ strftime_now("%S") }}{{ m.content }}{% endfor %}`,
		vars: baseVars,
	},
	{
		name: "break and continue",
		src:  `{% for m in messages %}{% if m.role == "tool" %}{% continue %}{% endif %}{{ m.content }}{% if loop.index > limit %}{% break %}{% endif %}{% endfor %}.`,
		vars: func(i int, msgs []*Dict) *Dict {
			v := baseVars(i, msgs)
			v.Set("limit", int64(3+i%4))
			return v
		},
		hits: true,
	},
	{
		name: "nested loops and their loop variables",
		src: `{% for m in messages %}{% for c in m.content %}{% if loop.first %}[{% endif %}{% if loop.index == 2 %}{{ c }}{% endif %}{% endfor %}
{{- loop.first }}{{ loop.index0 }}{% endfor %}{{ messages|length }}`,
		vars: baseVars,
		hits: true,
	},
	{
		name: "an iterator from outside the loop",
		src:  `{% set rev = messages|reverse %}{% for m in messages %}{{ rev|list|length }}{{ m.content }}{% endfor %}`,
		vars: baseVars,
	},
	{
		name: "the loop object in an expression that is not a unit",
		src:  `{% for m in messages %}{{ [loop, m][0].index }}{{ m.content }}{% endfor %}`,
		vars: func(i int, msgs []*Dict) *Dict {
			v := NewDict(1)
			v.Set("messages", conversation(msgs[i%2:], 2+i%20))
			return v
		},
	},
	{
		name: "an iterator passed to a macro whose loop reads it",
		src:  `{% macro f(xs) %}{% for m in messages %}{{ xs|list|length }}{{ m.content }}{% endfor %}{% endmacro %}{{ f(messages|reverse) }}`,
		vars: baseVars,
	},
	{
		name: "a namespace written in the loop",
		src:  `{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ ns.n }}{{ m.content }}{% endfor %}`,
		vars: baseVars,
	},
	{
		name: "neighbours and cycle (the loop object itself is read)",
		src:  `{% for m in messages %}{{ loop.previtem.role if loop.previtem is defined }}/{{ (loop.nextitem or {}).role }}/{{ loop.cycle("x", "y") }}{{ m.content }}{% endfor %}`,
		vars: baseVars,
	},
	{
		name: "a global shadowed by a variable",
		src:  `{% for m in messages %}{{ m.content }}{{ range(2)|list }}{% endfor %}`,
		vars: func(i int, msgs []*Dict) *Dict {
			v := baseVars(i, msgs)
			if i%2 == 1 {
				v.Set("range", "shadow")
			}
			return v
		},
		hits: true,
	},
	{
		name: "zero and negative zero",
		src:  `{% for m in messages %}{{ z }}{{ m.content }}{% endfor %}`,
		vars: func(i int, msgs []*Dict) *Dict {
			v := baseVars(i, msgs)
			v.Set("z", []float64{0, negZero()}[i%2])
			return v
		},
		hits: true,
	},
	{
		name: "a dict or a list from outside, by identity",
		src:  `{% for m in messages %}{{ tools|length if tools else "-" }}{{ tools[0].name if tools }}{{ m.content }}{% endfor %}`,
		vars: func(i int, msgs []*Dict) *Dict {
			v := baseVars(i, msgs)
			if i%3 != 2 {
				t := NewDict(1)
				t.Set("name", fmt.Sprint("tool", i%3))
				v.Set("tools", &List{Items: []Value{t}})
			}
			return v
		},
		hits: true,
	},
}

func negZero() float64 {
	z := 0.0
	return -z
}

func TestMemoMatchesRender(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	roles := []string{"system", "user", "assistant", "tool", "tool", "user", "assistant"}
	var msgs []*Dict
	for i := range 24 {
		role := roles[i%len(roles)]
		if i > 0 && role == "system" {
			role = "user"
		}
		content := fmt.Sprintf(" m%d %s ", i, strings.Repeat("w", rng.IntN(4)))
		if rng.IntN(4) == 0 {
			content = ""
		}
		msgs = append(msgs, message(role, content))
	}
	clock := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	for _, tc := range memoCases {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := Compile(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			memo := NewMemo(1 << 20)
			for i := range 40 {
				tick := clock.Add(time.Duration(i) * time.Second)
				now := func() time.Time { return tick }
				// The same variables for both renders: a render never
				// changes them, and iterators are single use.
				want, werr := tmpl.Render(tc.vars(i, msgs), RenderOptions{Now: now})
				got, gerr := tmpl.Render(tc.vars(i, msgs), RenderOptions{Now: now, Memo: memo})
				if (werr == nil) != (gerr == nil) || got != want {
					t.Fatalf("render %d with the memo:\n got %q, %v\nwant %q, %v", i, got, gerr, want, werr)
				}
			}
			st := memo.Stats()
			if tc.hits && st.Hits == 0 {
				t.Errorf("no iteration replayed (%+v)", st)
			}
			if !tc.hits && st.Hits != 0 {
				t.Errorf("%d iterations replayed, want none (%+v)", st.Hits, st)
			}
		})
	}
}

// TestMemoEvicts checks the memo keeps to its budget and still renders
// right once its entries are gone.
func TestMemoEvicts(t *testing.T) {
	t.Parallel()
	tmpl, err := Compile(`{% for m in messages %}{{ m.content }}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	memo := NewMemo(4096)
	var msgs []*Dict
	for i := range 200 {
		msgs = append(msgs, message("user", strings.Repeat("x", i)))
	}
	for i := range 3 {
		vars := NewDict(1)
		vars.Set("messages", conversation(msgs, len(msgs)))
		got, err := tmpl.Render(vars, RenderOptions{Memo: memo})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := tmpl.Render(vars, RenderOptions{})
		if got != want {
			t.Fatalf("render %d differs", i)
		}
		if st := memo.Stats(); st.Bytes > 4096 {
			t.Fatalf("memo holds %d bytes, over its 4096", st.Bytes)
		}
	}
}

// TestMemoLetsGoOfDicts checks the memo does not keep alive the dicts it
// has seen: a mark counts a few dozen bytes in its budget, and the message
// under it may hold thousands, so the message cache's eviction must be
// what frees them.
func TestMemoLetsGoOfDicts(t *testing.T) {
	tmpl, err := Compile(`{% for m in messages %}{{ m.content }}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	memo := NewMemo(1 << 20)
	render := func(msgs []*Dict) {
		vars := NewDict(1)
		vars.Set("messages", conversation(msgs, len(msgs)))
		if _, err := tmpl.Render(vars, RenderOptions{Memo: memo}); err != nil {
			t.Fatal(err)
		}
	}
	var seen []weak.Pointer[Dict]
	for i := range 3 {
		msgs := []*Dict{message("user", strings.Repeat("x", 4096)), message("assistant", fmt.Sprint(i))}
		render(msgs) // marked
		render(msgs) // recorded
		render(msgs) // replayed
		seen = append(seen, weak.Make(msgs[0]), weak.Make(msgs[1]))
	}
	if st := memo.Stats(); st.Hits == 0 || st.Kept == 0 {
		t.Fatalf("the memo neither kept nor replayed: %+v", st)
	}
	runtime.GC()
	runtime.GC()
	for i, p := range seen {
		if p.Value() != nil {
			t.Errorf("dict %d is still alive after a collection: the memo holds it", i)
		}
	}
	// What it holds of them is dead weight until evicted, and replays
	// nothing: a new dict with the same content is run, not replayed.
	hits := memo.Stats().Hits
	render([]*Dict{message("user", strings.Repeat("x", 4096))})
	if memo.Stats().Hits != hits {
		t.Error("a new dict replayed an entry recorded for another")
	}
	runtime.KeepAlive(memo)
}
