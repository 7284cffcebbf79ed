package jinja

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseJSON checks that ParseJSON never panics, agrees with
// encoding/json on validity, and that serialising what it parsed and parsing
// again is stable.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"a": [1, 2.0, -0.0, 1e400, 12345678901234567890, null, true, "\u00e9\ud83d\ude00"]}`,
		`{"a": 1, "a": 2}`, `"\ud800"`, `[1,]`, `01`, `{"x": "\u0000"}`} {
		f.Add([]byte(s))
	}
	if raw, err := os.ReadFile(filepath.Join("testdata", "cases.json")); err == nil {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := ParseJSON(data)
		if (err == nil) != json.Valid(data) {
			// encoding/json rejects invalid UTF-8 inside strings only by
			// replacement too, so both must agree on syntax.
			t.Fatalf("ParseJSON err=%v but json.Valid=%v", err, json.Valid(data))
		}
		if err != nil {
			if !errors.Is(err, ErrJSON) {
				t.Fatalf("error %v does not wrap ErrJSON", err)
			}
			return
		}
		out, err := ToJSON(v)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "Infinity") {
			return // Python's json.dumps writes overflowed floats as Infinity, which is not JSON
		}
		v2, err := ParseJSON([]byte(out))
		if err != nil {
			t.Fatalf("re-parse of %q: %v", out, err)
		}
		out2, err := ToJSON(v2)
		if err != nil {
			t.Fatal(err)
		}
		if out != out2 {
			t.Fatalf("not stable: %q then %q", out, out2)
		}
	})
}

// FuzzTemplate compiles and renders arbitrary template sources: no panic,
// no internal error, the same output twice, and the same again with a
// render memo.
func FuzzTemplate(f *testing.F) {
	raw, err := os.ReadFile(filepath.Join("testdata", "cases.json"))
	if err != nil {
		f.Fatal(err)
	}
	var cases []diffCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		f.Fatal(err)
	}
	var vars json.RawMessage
	for _, c := range cases {
		f.Add(c.Template)
		vars = c.Vars
	}
	v, err := ParseJSON(vars)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := Compile(src)
		if err != nil {
			return
		}
		out1, err1 := tmpl.Render(v.(*Dict), RenderOptions{})
		if errors.Is(err1, ErrInternal) {
			t.Fatalf("internal error on %q: %v", src, err1)
		}
		out2, err2 := tmpl.Render(v.(*Dict), RenderOptions{})
		if out1 != out2 || (err1 == nil) != (err2 == nil) {
			t.Fatalf("not deterministic on %q", src)
		}
		// The memo marks the dicts in the first render, records in the
		// second and replays in the third (the variables are the same
		// dicts): the same output each time.
		memo := NewMemo(1 << 20)
		for i := range 3 {
			out, err := tmpl.Render(v.(*Dict), RenderOptions{Memo: memo})
			if out != out1 || (err == nil) != (err1 == nil) {
				t.Fatalf("render %d with the memo differs on %q:\n got %q, %v\nwant %q, %v", i, src, out, err, out1, err1)
			}
		}
	})
}
