package jinja

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Template is a compiled chat template. A Template is immutable and safe for
// concurrent use by multiple goroutines.
type Template struct {
	body []node
}

// Compile parses src as jinja2 parses it in the environment transformers uses
// for chat templates (trim_blocks and lstrip_blocks on, loop controls and the
// {% generation %} tag available). It returns an error for syntax it does not
// support rather than rendering approximately.
func Compile(src string) (*Template, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, fmt.Errorf("jinja lex: %w", err)
	}
	p := &parser{toks: toks}
	body, _, err := p.parseBody()
	if err != nil {
		return nil, fmt.Errorf("jinja parse: %w", err)
	}
	if !storesIterator(body) {
		planLoops(body)
	}
	return &Template{body: body}, nil
}

// planLoops plans every for loop of body for the memo. A template that
// may keep a single-use iterator in a variable gets no plans: replaying a
// recorded read of it would use it up.
func planLoops(body []node) {
	for _, n := range body {
		if f, ok := n.(*forNode); ok {
			f.plan = planLoop(f)
		}
		for _, b := range statementBodies(n) {
			planLoops(b)
		}
	}
}

// ErrInternal is wrapped by the error Render returns if rendering hit a bug
// in this package; it is never expected and fuzz tests assert its absence.
var ErrInternal = errors.New("internal template engine error")

// RenderOptions are the per-render inputs besides the variables.
type RenderOptions struct {
	// Now is the clock behind strftime_now; nil means time.Now.
	Now func() time.Time
	// SizeHint is the expected output size in bytes, used to size the
	// output buffer once; zero means no hint. A hint well over the output
	// costs a copy, not memory: the result keeps alive at most a quarter
	// more than its length, or maxSpare bytes.
	SizeHint int
	// Memo, when not nil, keeps iterations over dicts for later renders
	// (see Memo); its entries name the template's loops, so templates may
	// share one.
	Memo *Memo
}

// Render renders the template with vars as its top-level variables. Values in
// vars are read, never modified. Errors are *Error or wrap ErrRaised.
func (t *Template) Render(vars *Dict, opts RenderOptions) (out string, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = "", fmt.Errorf("%w: %v", ErrInternal, p)
		}
	}()
	r := &renderer{now: opts.Now, memo: opts.Memo}
	if r.now == nil {
		r.now = time.Now
	}
	root := &scope{}
	for _, k := range vars.Keys() {
		v, _ := vars.Get(k)
		root.set(k, v)
	}
	var b strings.Builder
	if opts.SizeHint > 0 {
		b.Grow(min(opts.SizeHint, maxOutput))
	}
	if _, err := r.execBody(&b, t.body, root); err != nil {
		return "", err
	}
	return fitted(&b), nil
}

// fitted returns b's text in a buffer about its size. A string keeps its
// whole buffer alive, and callers keep rendered prompts (a prompt cache
// counts their length): a short chat rendered into a buffer reserved for
// the template's source as well held five times its length.
func fitted(b *strings.Builder) string {
	if spare := b.Cap() - b.Len(); spare > maxSpare && spare > b.Len()/4 {
		return strings.Clone(b.String())
	}
	return b.String()
}

// maxSpare is the most unused buffer a rendered text may keep whatever its
// length: below it a copy costs more than the memory it saves.
const maxSpare = 512

// Repr formats v as Python's repr() does.
func Repr(v Value) string { return repr(v) }

// Str formats v as Python's str() does.
func Str(v Value) string { return str(v) }

// ToJSON serialises v as Python's json.dumps(v, ensure_ascii=False) does.
func ToJSON(v Value) (string, error) {
	var b strings.Builder
	if err := dumpJSON(&b, v, &jsonOpts{itemSep: ", ", keySep: ": "}, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

// Truth reports Python truthiness of v.
func Truth(v Value) bool { return truth(v) }

// IsSpace reports whether r is whitespace for Python's str.isspace.
func IsSpace(r rune) bool { return pyIsSpace(r) }
