package jinja

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestRandomReferenceCases renders the random expressions of
// testdata/random_cases.json (made by gen_random_cases.py with the
// reference) and expects the same text, or an error where it raised.
func TestRandomReferenceCases(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("testdata", "random_cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Vars  json.RawMessage `json:"vars"`
		Cases []struct {
			T     string  `json:"t"`
			Want  *string `json:"want"`
			Error string  `json:"error"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	for _, c := range file.Cases {
		vars, err := ParseJSON(file.Vars)
		if err != nil {
			t.Fatal(err)
		}
		tmpl, err := Compile(c.T)
		var got string
		if err == nil {
			got, err = tmpl.Render(vars.(*Dict), RenderOptions{})
		}
		switch {
		case c.Want == nil && err == nil:
			t.Errorf("%s: rendered %q, want a %s", c.T, got, c.Error)
		case c.Want != nil && err != nil:
			t.Errorf("%s: %v, want %q", c.T, err, *c.Want)
		case c.Want != nil && got != *c.Want:
			t.Errorf("%s:\n got %q\nwant %q", c.T, got, *c.Want)
		}
	}
}
