package jinja

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"
)

// Error is a template error at render time: raise_exception, a type error,
// an undefined value used where Python would fail.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

// ErrRaised is wrapped by errors from the template's raise_exception.
var ErrRaised = errors.New("template raised an exception")

func errf(format string, a ...any) error { return &Error{Msg: fmt.Sprintf(format, a...)} }

// maxCallDepth bounds macro recursion.
const maxCallDepth = 200

// maxOutput bounds one render's output so a hostile template or input cannot
// exhaust memory.
const maxOutput = 1 << 28

type scope struct {
	// The first scopeInline names set live inline (most scopes are a loop
	// iteration's: loop and the loop's targets); the rest in more.
	names  [scopeInline]string
	vals   [scopeInline]Value
	n      int
	more   map[string]Value
	parent *scope
}

const scopeInline = 4

func newScope(parent *scope) *scope { return &scope{parent: parent} }

func (s *scope) lookup(name string) (Value, bool) {
	for c := s; c != nil; c = c.parent {
		if v, ok := c.get(name); ok {
			return v, true
		}
	}
	return nil, false
}

// get returns name's value in s itself, not its parents.
func (s *scope) get(name string) (Value, bool) {
	for i := range s.n {
		if s.names[i] == name {
			return s.vals[i], true
		}
	}
	v, ok := s.more[name]
	return v, ok
}

func (s *scope) set(name string, v Value) {
	for i := range s.n {
		if s.names[i] == name {
			s.vals[i] = v
			return
		}
	}
	if _, ok := s.more[name]; ok || s.n == scopeInline {
		if s.more == nil {
			s.more = make(map[string]Value, 4)
		}
		s.more[name] = v
		return
	}
	s.names[s.n], s.vals[s.n] = name, v
	s.n++
}

// Macro is a template macro bound to the scope it was defined in.
type Macro struct {
	name     string
	params   []string
	defaults []expr
	body     []node
	def      *scope
}

// LoopInfo is the loop variable of a for loop.
type LoopInfo struct {
	index int
	items []Value
	depth int
}

type ctrl int

const (
	ctrlNone ctrl = iota
	ctrlBreak
	ctrlContinue
)

type renderer struct {
	now   func() time.Time
	depth int
	memo  *Memo      // nil: no memo
	rec   *recording // the iteration being recorded, or nil
}

func (r *renderer) execBody(out *strings.Builder, body []node, s *scope) (ctrl, error) {
	for _, n := range body {
		c, err := r.exec(out, n, s)
		if err != nil || c != ctrlNone {
			return c, err
		}
		if out.Len() > maxOutput {
			return ctrlNone, errf("output larger than %d bytes", maxOutput)
		}
	}
	return ctrlNone, nil
}

func (r *renderer) exec(out *strings.Builder, n node, s *scope) (ctrl, error) {
	switch n := n.(type) {
	case *outputNode:
		out.WriteString(n.text)
	case *printNode:
		if a, ok := n.x.(*binExpr); ok && a.op == "+" {
			return ctrlNone, r.printAdd(out, a, s)
		}
		v, err := r.eval(n.x, s)
		if err != nil {
			return ctrlNone, err
		}
		if _, ok := v.(Undefined); !ok {
			writeRepr(out, v, false)
		}
	case *ifNode:
		for i, c := range n.conds {
			v, err := r.eval(c, s)
			if err != nil {
				return ctrlNone, err
			}
			if truth(v) {
				return r.execBody(out, n.bodies[i], s)
			}
		}
		return r.execBody(out, n.els, s)
	case *forNode:
		return r.execFor(out, n, s)
	case *setNode:
		v, err := r.eval(n.x, s)
		if err != nil {
			return ctrlNone, err
		}
		if n.ns != "" {
			nsv, _ := s.lookup(n.ns)
			ns, ok := nsv.(*Namespace)
			if !ok {
				return ctrlNone, errf("can only assign attributes on namespace objects, not %s", n.ns)
			}
			if strings.HasPrefix(n.attr, "_") {
				return ctrlNone, errf("cannot store underscore-prefixed attributes on a namespace")
			}
			ns.attrs.Set(n.attr, v)
			return ctrlNone, nil
		}
		return ctrlNone, assign(s, n.names, v)
	case *setBlockNode:
		var b strings.Builder
		if _, err := r.execBody(&b, n.body, newScope(s)); err != nil {
			return ctrlNone, err
		}
		var v Value = b.String()
		for _, f := range n.filters {
			var err error
			if v, err = r.applyFilter(f, v, s); err != nil {
				return ctrlNone, err
			}
		}
		s.set(n.name, v)
	case *macroNode:
		s.set(n.name, &Macro{name: n.name, params: n.params, defaults: n.defaults, body: n.body, def: s})
	case *scopeNode:
		return r.execBody(out, n.body, newScope(s))
	case *withNode:
		inner := newScope(s)
		for i, name := range n.names {
			v, err := r.eval(n.xs[i], s)
			if err != nil {
				return ctrlNone, err
			}
			inner.set(name, v)
		}
		return r.execBody(out, n.body, inner)
	case *filterBlockNode:
		var b strings.Builder
		c, err := r.execBody(&b, n.body, newScope(s))
		if err != nil {
			return c, err
		}
		var v Value = b.String()
		for _, f := range n.filters {
			if v, err = r.applyFilter(f, v, s); err != nil {
				return ctrlNone, err
			}
		}
		writeRepr(out, v, false)
		return c, nil
	case *breakNode:
		return ctrlBreak, nil
	case *continueNode:
		return ctrlContinue, nil
	default:
		return ctrlNone, errf("unknown node %T", n)
	}
	return ctrlNone, nil
}

func assign(s *scope, names []string, v Value) error {
	if len(names) == 1 {
		s.set(names[0], v)
		return nil
	}
	items, err := iterate(v)
	if err != nil {
		return err
	}
	if len(items) != len(names) {
		return errf("cannot unpack %d values into %d names", len(items), len(names))
	}
	for i, n := range names {
		s.set(n, items[i])
	}
	return nil
}

func (r *renderer) execFor(out *strings.Builder, n *forNode, s *scope) (ctrl, error) {
	it, err := r.eval(n.iter, s)
	if err != nil {
		return ctrlNone, err
	}
	items, err := iterate(it)
	if err != nil {
		return ctrlNone, err
	}
	if n.cond != nil {
		kept := make([]Value, 0, len(items))
		for _, v := range items {
			fs := newScope(s)
			if err := assign(fs, n.targets, v); err != nil {
				return ctrlNone, err
			}
			c, err := r.eval(n.cond, fs)
			if err != nil {
				return ctrlNone, err
			}
			if truth(c) {
				kept = append(kept, v)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return r.execBody(out, n.els, newScope(s))
	}
	loop := &LoopInfo{items: items}
	outer, nested := s.lookup("loop")
	if nested {
		if ol, ok := outer.(*LoopInfo); ok {
			loop.depth = ol.depth + 1
		}
	}
	memo := r.memo != nil && r.rec == nil && !nested && n.plan != nil && n.plan.ok
	for i, v := range items {
		// A fresh scope per iteration: assignments never outlive it. The
		// scope and its loop variable are one allocation.
		it := &iteration{scope: scope{parent: s}, loop: *loop}
		it.loop.index = i
		is := &it.scope
		is.set("loop", &it.loop)
		if err := assign(is, n.targets, v); err != nil {
			return ctrlNone, err
		}
		var c ctrl
		var err error
		if d, ok := v.(*Dict); ok && memo {
			c, err = r.execMemo(out, n, d, is, s)
		} else {
			c, err = r.execBody(out, n.body, is)
		}
		if err != nil {
			return ctrlNone, err
		}
		if c == ctrlBreak {
			break
		}
	}
	return ctrlNone, nil
}

// execMemo runs an iteration over d from the memo when a recorded run of
// it replays, else runs and records it.
func (r *renderer) execMemo(out *strings.Builder, n *forNode, d *Dict, is, outer *scope) (ctrl, error) {
	k := memoKey{loop: n, item: d.weakRef()}
	vs, seen := r.memo.get(k)
	for _, v := range vs {
		if r.replays(v, is, outer) {
			r.memo.hits.Add(1)
			return v.ctrl, writeMemo(out, v)
		}
	}
	r.memo.miss.Add(1)
	if !seen {
		return r.execBody(out, n.body, is)
	}
	rec := &recording{plan: n.plan, iter: is}
	r.rec = rec
	start := out.Len()
	c, err := r.execBody(out, n.body, is)
	r.rec = nil
	if err == nil && !rec.tainted {
		r.memo.put(k, &memoVariant{reads: rec.reads, out: strings.Clone(out.String()[start:]), ctrl: c})
	}
	return c, err
}

// iteration is a loop iteration's scope with its loop variable.
type iteration struct {
	scope scope
	loop  LoopInfo
}

// iterate returns the items Python's iter() would yield.
func iterate(v Value) ([]Value, error) {
	v = unmark(v)
	switch x := v.(type) {
	case *List:
		return x.Items, nil
	case *Dict:
		out := make([]Value, len(x.keys))
		for i, k := range x.keys {
			out[i] = x.keyOf(k)
		}
		return out, nil
	case string:
		out := make([]Value, 0, len(x))
		for _, r := range x {
			out = append(out, string(r))
		}
		return out, nil
	case Undefined:
		return nil, nil
	case *Iter:
		if x.isView() {
			return x.items, nil
		}
		if x.used {
			return nil, nil
		}
		x.used = true
		return x.items, nil
	}
	return nil, errf("'%s' object is not iterable", typeName(v))
}

func (r *renderer) eval(e expr, s *scope) (Value, error) {
	if r.rec != nil && !r.rec.inUnit {
		if _, name := e.(*nameExpr); name || r.rec.plan.units[e] {
			return r.evalRecorded(e, s)
		}
	}
	switch e := e.(type) {
	case *constExpr:
		return e.v, nil
	case *nameExpr:
		if v, ok := s.lookup(e.name); ok {
			return v, nil
		}
		if g := r.global(e.name); g != nil {
			return g, nil
		}
		return Undefined{Name: e.name}, nil
	case *attrExpr:
		x, err := r.eval(e.x, s)
		if err != nil {
			return nil, err
		}
		return getAttr(x, e.attr)
	case *itemExpr:
		x, err := r.eval(e.x, s)
		if err != nil {
			return nil, err
		}
		k, err := r.eval(e.index, s)
		if err != nil {
			return nil, err
		}
		return getItem(x, k)
	case *sliceExpr:
		return r.evalSlice(e, s)
	case *callExpr:
		return r.evalCall(e, s)
	case *filterExpr:
		x, err := r.eval(e.x, s)
		if err != nil {
			return nil, err
		}
		return r.applyFilter(e, x, s)
	case *testExpr:
		x, err := r.eval(e.x, s)
		if err != nil {
			return nil, err
		}
		args, err := r.evalList(e.args, s)
		if err != nil {
			return nil, err
		}
		ok, err := r.applyTest(e.name, x, args)
		if err != nil {
			return nil, err
		}
		return ok != e.negate, nil
	case *binExpr:
		if e.op == "+" {
			return r.evalAdd(e, s)
		}
		l, err := r.eval(e.l, s)
		if err != nil {
			return nil, err
		}
		rv, err := r.eval(e.r, s)
		if err != nil {
			return nil, err
		}
		return binop(e.op, l, rv)
	case *unaryExpr:
		x, err := r.eval(e.x, s)
		if err != nil {
			return nil, err
		}
		return unop(e.op, x)
	case *compareExpr:
		l, err := r.eval(e.first, s)
		if err != nil {
			return nil, err
		}
		for i, op := range e.ops {
			rv, err := r.eval(e.rest[i], s)
			if err != nil {
				return nil, err
			}
			ok, err := compare(op, l, rv)
			if err != nil {
				return nil, err
			}
			if !ok {
				return false, nil
			}
			l = rv
		}
		return true, nil
	case *andExpr:
		l, err := r.eval(e.l, s)
		if err != nil || !truth(l) {
			return l, err
		}
		return r.eval(e.r, s)
	case *orExpr:
		l, err := r.eval(e.l, s)
		if err != nil || truth(l) {
			return l, err
		}
		return r.eval(e.r, s)
	case *notExpr:
		x, err := r.eval(e.x, s)
		if err != nil {
			return nil, err
		}
		return !truth(x), nil
	case *condExpr:
		t, err := r.eval(e.test, s)
		if err != nil {
			return nil, err
		}
		if truth(t) {
			return r.eval(e.yes, s)
		}
		if e.no == nil {
			return Undefined{Name: "conditional expression"}, nil
		}
		return r.eval(e.no, s)
	case *listExpr:
		items, err := r.evalList(e.items, s)
		if err != nil {
			return nil, err
		}
		return &List{Items: items}, nil
	case *tupleExpr:
		items, err := r.evalList(e.items, s)
		if err != nil {
			return nil, err
		}
		return &List{Items: items, Tuple: true}, nil
	case *dictExpr:
		d := NewDict(len(e.keys))
		for i := range e.keys {
			k, err := r.eval(e.keys[i], s)
			if err != nil {
				return nil, err
			}
			v, err := r.eval(e.vals[i], s)
			if err != nil {
				return nil, err
			}
			if err := d.setKey(k, v); err != nil {
				return nil, err
			}
		}
		return d, nil
	case *concatExpr:
		var b strings.Builder
		for _, p := range e.parts {
			v, err := r.eval(p, s)
			if err != nil {
				return nil, err
			}
			b.WriteString(str(v))
		}
		return b.String(), nil
	}
	return nil, errf("unknown expression %T", e)
}

// evalAdd evaluates a chain a + b + c ... left to right. When every operand
// is a plain string it builds the result once instead of copying each
// intermediate sum, which is what templates spend most of their time on.
func (r *renderer) evalAdd(e *binExpr, s *scope) (Value, error) {
	var buf [8]Value
	vals, n, err := r.addOperands(e, s, buf[:0])
	if err != nil {
		return nil, err
	}
	if n >= 0 {
		var b strings.Builder
		b.Grow(n)
		for _, v := range vals {
			b.WriteString(v.(string))
		}
		return b.String(), nil
	}
	return foldAdd(vals)
}

// printAdd prints a chain of + as evalAdd would give it, except that a
// chain of strings is written piece by piece instead of concatenated
// first: a turn's '<|im_start|>' + role + '\n' + content + ... costs no
// copy of its content beyond the output's own.
func (r *renderer) printAdd(out *strings.Builder, e *binExpr, s *scope) error {
	var buf [8]Value
	vals, n, err := r.addOperands(e, s, buf[:0])
	if err != nil {
		return err
	}
	if n >= 0 {
		for _, v := range vals {
			out.WriteString(v.(string))
		}
		return nil
	}
	v, err := foldAdd(vals)
	if err != nil {
		return err
	}
	if _, ok := v.(Undefined); !ok {
		writeRepr(out, v, false)
	}
	return nil
}

// addOperands appends to vals the operands of a chain of + (a + b + c
// parses as (a + b) + c), evaluated left to right. n is their total length
// when all are strings, else -1.
func (r *renderer) addOperands(e *binExpr, s *scope, vals []Value) ([]Value, int, error) {
	var buf [8]expr
	operands := buf[:0]
	x := expr(e)
	for {
		b, ok := x.(*binExpr)
		if !ok || b.op != "+" {
			break
		}
		operands = append(operands, b.r)
		x = b.l
	}
	operands = append(operands, x)
	n := 0
	for i := range operands {
		v, err := r.eval(operands[len(operands)-1-i], s)
		if err != nil {
			return nil, 0, err
		}
		vals = append(vals, v)
		if sv, ok := v.(string); ok && n >= 0 {
			n += len(sv)
		} else {
			n = -1
		}
	}
	return vals, n, nil
}

// foldAdd adds vals left to right with Python's + on each pair.
func foldAdd(vals []Value) (Value, error) {
	acc := vals[0]
	for _, v := range vals[1:] {
		var err error
		if acc, err = binop("+", acc, v); err != nil {
			return nil, err
		}
	}
	return acc, nil
}

func (r *renderer) evalList(xs []expr, s *scope) ([]Value, error) {
	if len(xs) == 0 {
		return nil, nil
	}
	out := make([]Value, len(xs))
	for i, x := range xs {
		v, err := r.eval(x, s)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (r *renderer) evalKwargs(kws []kwarg, s *scope) (*Dict, error) {
	if len(kws) == 0 {
		return nil, nil
	}
	d := NewDict(len(kws))
	for _, kw := range kws {
		v, err := r.eval(kw.x, s)
		if err != nil {
			return nil, err
		}
		d.Set(kw.name, v)
	}
	return d, nil
}

func (r *renderer) evalSlice(e *sliceExpr, s *scope) (Value, error) {
	x, err := r.eval(e.x, s)
	if err != nil {
		return nil, err
	}
	var bounds [3]Value
	for i, b := range []expr{e.start, e.stop, e.step} {
		if b == nil {
			continue
		}
		if bounds[i], err = r.eval(b, s); err != nil {
			return nil, err
		}
	}
	return slice(x, bounds[0], bounds[1], bounds[2])
}

func (r *renderer) evalCall(e *callExpr, s *scope) (Value, error) {
	fn, err := r.eval(e.fn, s)
	if err != nil {
		return nil, err
	}
	args, err := r.evalList(e.args, s)
	if err != nil {
		return nil, err
	}
	kwargs, err := r.evalKwargs(e.kwargs, s)
	if err != nil {
		return nil, err
	}
	return r.call(fn, args, kwargs)
}

func (r *renderer) call(fn Value, args []Value, kwargs *Dict) (Value, error) {
	switch f := fn.(type) {
	case *Func:
		return f.Call(args, kwargs)
	case *Macro:
		return r.callMacro(f, args, kwargs)
	case Undefined:
		return nil, errf("'%s' is undefined", f.Name)
	}
	return nil, errf("'%s' object is not callable", typeName(fn))
}

func (r *renderer) callMacro(m *Macro, args []Value, kwargs *Dict) (Value, error) {
	if r.rec != nil {
		r.rec.tainted = true // the macro reads its own scopes
	}
	if len(args) > len(m.params) {
		return nil, errf("macro '%s' takes not more than %d argument(s)", m.name, len(m.params))
	}
	r.depth++
	defer func() { r.depth-- }()
	if r.depth > maxCallDepth {
		return nil, errf("macro recursion deeper than %d", maxCallDepth)
	}
	ms := newScope(m.def)
	firstDefault := len(m.params) - len(m.defaults)
	for i, p := range m.params {
		switch {
		case i < len(args):
			if _, dup := kwargs.Get(p); dup {
				return nil, errf("macro '%s' got multiple values for argument '%s'", m.name, p)
			}
			ms.set(p, args[i])
		default:
			if v, ok := kwargs.Get(p); ok {
				ms.set(p, v)
				continue
			}
			if i >= firstDefault {
				v, err := r.eval(m.defaults[i-firstDefault], ms)
				if err != nil {
					return nil, err
				}
				ms.set(p, v)
				continue
			}
			ms.set(p, Undefined{Name: p})
		}
	}
	for _, k := range kwargs.Keys() {
		known := false
		for _, p := range m.params {
			known = known || p == k
		}
		if !known {
			return nil, errf("macro '%s' takes no keyword argument '%s'", m.name, k)
		}
	}
	var b strings.Builder
	if _, err := r.execBody(&b, m.body, ms); err != nil {
		return nil, err
	}
	return b.String(), nil
}

// global returns a built-in global function or nil.
func (r *renderer) global(name string) Value {
	switch name {
	case "range":
		return &Func{Name: "range", Call: pyRange}
	case "namespace":
		return &Func{Name: "namespace", Call: func(args []Value, kwargs *Dict) (Value, error) {
			d := NewDict(4)
			for _, a := range args {
				ad, ok := a.(*Dict)
				if !ok {
					return nil, errf("namespace() takes mappings")
				}
				for _, k := range ad.keys {
					d.Set(k, ad.m[k])
				}
			}
			for _, k := range kwargs.Keys() {
				v, _ := kwargs.Get(k)
				d.Set(k, v)
			}
			for _, k := range d.keys {
				if strings.HasPrefix(k, "_") {
					return nil, errf("cannot store underscore-prefixed attributes on a namespace")
				}
			}
			return &Namespace{attrs: d}, nil
		}}
	case "dict":
		return &Func{Name: "dict", Call: func(args []Value, kwargs *Dict) (Value, error) {
			d := NewDict(4)
			if len(args) > 1 {
				return nil, errf("dict expected at most 1 argument")
			}
			if len(args) == 1 {
				ad, ok := args[0].(*Dict)
				if !ok {
					return nil, errf("dict() argument must be a mapping")
				}
				d = ad.Clone()
			}
			for _, k := range kwargs.Keys() {
				v, _ := kwargs.Get(k)
				d.Set(k, v)
			}
			return d, nil
		}}
	case "raise_exception":
		return &Func{Name: "raise_exception", Call: func(args []Value, _ *Dict) (Value, error) {
			msg := ""
			if len(args) > 0 {
				msg = str(args[0])
			}
			return nil, fmt.Errorf("%w: %s", ErrRaised, msg)
		}}
	case "strftime_now":
		return &Func{Name: "strftime_now", Call: func(args []Value, _ *Dict) (Value, error) {
			if len(args) != 1 {
				return nil, errf("strftime_now takes one argument")
			}
			f, ok := args[0].(string)
			if !ok {
				return nil, errf("strftime_now format must be a string")
			}
			if r.rec != nil {
				r.rec.tainted = true // the clock is not a recorded read
			}
			return strftime(r.now(), f), nil
		}}
	}
	return nil
}

func pyRange(args []Value, _ *Dict) (Value, error) {
	var n [3]int64
	n[2] = 1
	ints := make([]int64, len(args))
	for i, a := range args {
		v, ok := a.(int64)
		if !ok {
			if b, isBool := a.(bool); isBool {
				v = map[bool]int64{true: 1, false: 0}[b]
			} else {
				return nil, errf("'%s' object cannot be interpreted as an integer", typeName(a))
			}
		}
		ints[i] = v
	}
	switch len(ints) {
	case 1:
		n[1] = ints[0]
	case 2:
		n[0], n[1] = ints[0], ints[1]
	case 3:
		n[0], n[1], n[2] = ints[0], ints[1], ints[2]
	default:
		return nil, errf("range expected 1 to 3 arguments")
	}
	if n[2] == 0 {
		return nil, errf("range() arg 3 must not be zero")
	}
	l := &List{}
	for i := n[0]; (n[2] > 0 && i < n[1]) || (n[2] < 0 && i > n[1]); i += n[2] {
		if len(l.Items) >= 100000 {
			return nil, errf("range too big")
		}
		l.Items = append(l.Items, i)
	}
	return l, nil
}

// ---- attribute and item access ----

// isDictMethod reports whether name is an attribute of Python's dict, which
// attribute access finds before a key of the same name.
func isDictMethod(name string) bool {
	switch name {
	case "clear", "copy", "fromkeys", "get", "items", "keys", "pop", "popitem", "setdefault", "update", "values":
		return true
	}
	return false
}

func getAttr(x Value, attr string) (Value, error) {
	x = unmark(x)
	switch v := x.(type) {
	case Undefined:
		return nil, errf("'%s' is undefined", v.Name)
	case *Dict:
		if isDictMethod(attr) {
			return dictMethod(v, attr), nil
		}
		if val, ok := v.m[attr]; ok {
			return val, nil
		}
		return Undefined{Name: attr}, nil
	case *Namespace:
		if val, ok := v.attrs.m[attr]; ok {
			return val, nil
		}
		return Undefined{Name: attr}, nil
	case string:
		if m := strMethod(v, attr); m != nil {
			return m, nil
		}
	case *List:
		if m := listMethod(v, attr); m != nil {
			return m, nil
		}
	case *LoopInfo:
		return v.attr(attr), nil
	}
	return Undefined{Name: attr}, nil
}

func getItem(x Value, k Value) (Value, error) {
	x, k = unmark(x), unmark(k)
	switch v := x.(type) {
	case Undefined:
		return nil, errf("'%s' is undefined", v.Name)
	case *Dict:
		ks, err := dictKey(k)
		if err != nil {
			return nil, err
		}
		if val, ok := v.m[ks]; ok {
			return val, nil
		}
		if _, isStr := k.(string); isStr && isDictMethod(ks) {
			return dictMethod(v, ks), nil
		}
		return Undefined{Name: str(k)}, nil
	case *List:
		if i, ok := indexOf(k); ok {
			if i < 0 {
				i += int64(len(v.Items))
			}
			if i >= 0 && i < int64(len(v.Items)) {
				return v.Items[i], nil
			}
			return Undefined{Name: str(k)}, nil
		}
		if ks, ok := k.(string); ok {
			return getAttr(v, ks)
		}
	case string:
		if i, ok := indexOf(k); ok {
			rs := []rune(v)
			if i < 0 {
				i += int64(len(rs))
			}
			if i >= 0 && i < int64(len(rs)) {
				return string(rs[i]), nil
			}
			return Undefined{Name: str(k)}, nil
		}
		if ks, ok := k.(string); ok {
			return getAttr(v, ks)
		}
	case *Namespace, *LoopInfo:
		if ks, ok := k.(string); ok {
			return getAttr(v, ks)
		}
	}
	return Undefined{Name: str(k)}, nil
}

func indexOf(k Value) (int64, bool) {
	switch i := k.(type) {
	case int64:
		return i, true
	case bool:
		if i {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func (l *LoopInfo) attr(name string) Value {
	n := int64(len(l.items))
	i := int64(l.index)
	switch name {
	case "index":
		return i + 1
	case "index0":
		return i
	case "revindex":
		return n - i
	case "revindex0":
		return n - i - 1
	case "first":
		return i == 0
	case "last":
		return i == n-1
	case "length":
		return n
	case "depth":
		return int64(l.depth + 1)
	case "depth0":
		return int64(l.depth)
	case "previtem":
		if i > 0 {
			return l.items[i-1]
		}
		return Undefined{Name: "previtem"}
	case "nextitem":
		if i+1 < n {
			return l.items[i+1]
		}
		return Undefined{Name: "nextitem"}
	case "cycle":
		return &Func{Name: "cycle", Call: func(args []Value, _ *Dict) (Value, error) {
			if len(args) == 0 {
				return nil, errf("no items for cycling given")
			}
			return args[l.index%len(args)], nil
		}}
	}
	return Undefined{Name: name}
}

// slice applies Python slice semantics to lists and strings.
func slice(x, start, stop, step Value) (Value, error) {
	x = unmark(x)
	var n int
	var runes []rune
	switch v := x.(type) {
	case *List:
		n = len(v.Items)
	case string:
		runes = []rune(v)
		n = len(runes)
	case Undefined:
		return nil, errf("'%s' is undefined", v.Name)
	default:
		return nil, errf("'%s' object is not subscriptable", typeName(x))
	}
	st := int64(1)
	if step != nil {
		s, ok := indexOf(step)
		if !ok {
			return nil, errf("slice indices must be integers or None")
		}
		if s == 0 {
			return nil, errf("slice step cannot be zero")
		}
		st = s
	}
	conv := func(b Value, def int64) (int64, error) {
		if b == nil {
			return def, nil
		}
		i, ok := indexOf(b)
		if !ok {
			return 0, errf("slice indices must be integers or None")
		}
		ln := int64(n)
		if i < 0 {
			i += ln
			if i < 0 {
				if st < 0 {
					i = -1
				} else {
					i = 0
				}
			}
		} else if i >= ln {
			if st < 0 {
				i = ln - 1
			} else {
				i = ln
			}
		}
		return i, nil
	}
	var lo, hi int64
	var err error
	if st > 0 {
		if lo, err = conv(start, 0); err != nil {
			return nil, err
		}
		if hi, err = conv(stop, int64(n)); err != nil {
			return nil, err
		}
	} else {
		if lo, err = conv(start, int64(n)-1); err != nil {
			return nil, err
		}
		if hi, err = conv(stop, -1); err != nil {
			return nil, err
		}
	}
	var idx []int64
	for i := lo; (st > 0 && i < hi) || (st < 0 && i > hi); i += st {
		idx = append(idx, i)
	}
	switch v := x.(type) {
	case *List:
		out := &List{Items: make([]Value, len(idx)), Tuple: v.Tuple}
		for j, i := range idx {
			out.Items[j] = v.Items[i]
		}
		return out, nil
	default:
		out := make([]rune, len(idx))
		for j, i := range idx {
			out[j] = runes[i]
		}
		return string(out), nil
	}
}

// ---- operators ----

func isNumber(v Value) bool {
	switch v.(type) {
	case int64, *big.Int, float64, bool:
		return true
	}
	return false
}

func undefinedOperand(vs ...Value) error {
	for _, v := range vs {
		if u, ok := v.(Undefined); ok {
			return errf("'%s' is undefined", u.Name)
		}
	}
	return nil
}

func binop(op string, l, r Value) (Value, error) {
	if err := undefinedOperand(l, r); err != nil {
		return nil, err
	}
	lm, lok := l.(Markup)
	rm, rok := r.(Markup)
	if op == "+" && (lok || rok) {
		esc := func(v Value, isMarkup bool, m Markup) (string, bool) {
			if isMarkup {
				return string(m), true
			}
			if s, ok := v.(string); ok {
				return escapeHTML(s), true
			}
			return "", false
		}
		ls, ok1 := esc(l, lok, lm)
		rs, ok2 := esc(r, rok, rm)
		if ok1 && ok2 {
			return Markup(ls + rs), nil
		}
	}
	l, r = unmark(l), unmark(r)
	if isNumber(l) && isNumber(r) {
		return numop(op, l, r)
	}
	switch op {
	case "+":
		switch a := l.(type) {
		case string:
			if b, ok := r.(string); ok {
				return a + b, nil
			}
			return nil, errf(`can only concatenate str (not "%s") to str`, typeName(r))
		case *List:
			if b, ok := r.(*List); ok && a.Tuple == b.Tuple {
				items := make([]Value, 0, len(a.Items)+len(b.Items))
				items = append(append(items, a.Items...), b.Items...)
				return &List{Items: items, Tuple: a.Tuple}, nil
			}
		}
	case "*":
		if n, ok := indexOf(r); ok {
			return repeat(l, n)
		}
		if n, ok := indexOf(l); ok {
			return repeat(r, n)
		}
	case "%":
		if _, ok := l.(string); ok {
			return nil, errf("printf-style string formatting is not supported")
		}
	}
	return nil, errf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(r))
}

func repeat(v Value, n int64) (Value, error) {
	if n < 0 {
		n = 0
	}
	switch x := v.(type) {
	case string:
		if int64(len(x))*n > maxOutput {
			return nil, errf("repeated string too large")
		}
		return strings.Repeat(x, int(n)), nil
	case *List:
		if int64(len(x.Items))*n > 1<<20 {
			return nil, errf("repeated list too large")
		}
		out := &List{Tuple: x.Tuple}
		for range n {
			out.Items = append(out.Items, x.Items...)
		}
		return out, nil
	}
	return nil, errf("can't multiply sequence by non-int")
}

func numop(op string, l, r Value) (Value, error) {
	_, lf := l.(float64)
	_, rf := r.(float64)
	if lf || rf || op == "/" {
		a, _ := toFloat(l)
		b, _ := toFloat(r)
		switch op {
		case "+":
			return a + b, nil
		case "-":
			return a - b, nil
		case "*":
			return a * b, nil
		case "/":
			if b == 0 {
				return nil, errf("division by zero")
			}
			return a / b, nil
		case "//":
			if b == 0 {
				return nil, errf("float floor division by zero")
			}
			return math.Floor(a / b), nil
		case "%":
			if b == 0 {
				return nil, errf("float modulo")
			}
			m := math.Mod(a, b)
			if m != 0 && (m < 0) != (b < 0) {
				m += b
			}
			if m == 0 {
				m = math.Copysign(0, b) // Python: the result takes the divisor's sign
			}
			return m, nil
		case "**":
			return math.Pow(a, b), nil
		}
		return nil, errf("unsupported operator %s", op)
	}
	if v, ok := smallIntOp(op, l, r); ok {
		return v, nil
	}
	a, _ := bigOf(l)
	b, _ := bigOf(r)
	z := new(big.Int)
	switch op {
	case "+":
		z.Add(a, b)
	case "-":
		z.Sub(a, b)
	case "*":
		z.Mul(a, b)
	case "//", "%":
		if b.Sign() == 0 {
			return nil, errf("integer division or modulo by zero")
		}
		q, m := new(big.Int), new(big.Int)
		q.DivMod(a, b, m) // Euclidean: m >= 0
		if m.Sign() != 0 && b.Sign() < 0 {
			// Python floors: the remainder takes the divisor's sign, and
			// the quotient is one less than Euclid's (7 // -2 is -4).
			q.Sub(q, big.NewInt(1))
			m.Add(m, b)
		}
		if op == "//" {
			z = q
		} else {
			z = m
		}
	case "**":
		if b.Sign() < 0 {
			fa, _ := toFloat(l)
			fb, _ := toFloat(r)
			return math.Pow(fa, fb), nil
		}
		if b.BitLen() > 16 {
			return nil, errf("exponent too large")
		}
		z.Exp(a, b, nil)
	default:
		return nil, errf("unsupported operator %s", op)
	}
	return normInt(z), nil
}

// smallIntOp is numop on two int64 (or bool) operands whose result fits
// an int64, without the big.Int numop computes in; ok is false when it
// does not apply (another type, an overflow, a zero divisor, **), and
// numop answers as before.
func smallIntOp(op string, l, r Value) (v int64, ok bool) {
	a, ok := smallInt(l)
	if !ok {
		return 0, false
	}
	b, ok := smallInt(r)
	if !ok {
		return 0, false
	}
	switch op {
	case "+":
		if s := a + b; (a^s)&(b^s) >= 0 {
			return s, true
		}
	case "-":
		if d := a - b; (a^b)&(a^d) >= 0 {
			return d, true
		}
	case "*":
		const lim = 1 << 31
		if a > -lim && a < lim && b > -lim && b < lim {
			return a * b, true
		}
	case "//", "%":
		if b == 0 || (a == math.MinInt64 && b == -1) {
			return 0, false
		}
		q, m := a/b, a%b
		if m != 0 && (m < 0) != (b < 0) { // Python floors; Go truncates
			q, m = q-1, m+b
		}
		if op == "//" {
			return q, true
		}
		return m, true
	}
	return 0, false
}

func unop(op string, x Value) (Value, error) {
	x = unmark(x)
	if err := undefinedOperand(x); err != nil {
		return nil, err
	}
	switch v := x.(type) {
	case int64:
		if op == "-" {
			if v != math.MinInt64 {
				return -v, nil
			}
			return normInt(new(big.Int).Neg(big.NewInt(v))), nil
		}
		return v, nil
	case *big.Int:
		if op == "-" {
			return normInt(new(big.Int).Neg(v)), nil
		}
		return v, nil
	case float64:
		if op == "-" {
			return -v, nil
		}
		return v, nil
	case bool:
		n := int64(0)
		if v {
			n = 1
		}
		if op == "-" {
			return -n, nil
		}
		return n, nil
	}
	return nil, errf("bad operand type for unary %s: '%s'", op, typeName(x))
}

// equal is Python ==.
func equal(a, b Value) bool {
	a, b = unmark(a), unmark(b)
	if isNumber(a) && isNumber(b) {
		c, ok := numCompare(a, b)
		return ok && c == 0
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case Undefined:
		_, ok := b.(Undefined)
		return ok
	case string:
		y, ok := b.(string)
		return ok && x == y
	case *List:
		y, ok := b.(*List)
		if !ok || x.Tuple != y.Tuple || len(x.Items) != len(y.Items) {
			return false
		}
		for i := range x.Items {
			if !equal(x.Items[i], y.Items[i]) {
				return false
			}
		}
		return true
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for _, k := range x.keys {
			yv, ok := y.m[k]
			if !ok || !equal(x.m[k], yv) {
				return false
			}
		}
		return true
	}
	return a == b
}

// numCompare compares two numbers; ok is false for NaN.
func numCompare(a, b Value) (int, bool) {
	_, af := a.(float64)
	_, bf := b.(float64)
	if af || bf {
		x, _ := toFloat(a)
		y, _ := toFloat(b)
		if math.IsNaN(x) || math.IsNaN(y) {
			return 0, false
		}
		switch {
		case x < y:
			return -1, true
		case x > y:
			return 1, true
		}
		return 0, true
	}
	if x, ok := smallInt(a); ok {
		if y, ok := smallInt(b); ok {
			return cmp.Compare(x, y), true
		}
	}
	x, _ := bigOf(a)
	y, _ := bigOf(b)
	return x.Cmp(y), true
}

// order compares for <, <=, >, >= as Python does.
func order(a, b Value) (int, error) {
	a, b = unmark(a), unmark(b)
	if isNumber(a) && isNumber(b) {
		c, ok := numCompare(a, b)
		if !ok {
			return 2, nil // NaN: every ordering is false
		}
		return c, nil
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), nil
		}
	case *List:
		if y, ok := b.(*List); ok && x.Tuple == y.Tuple {
			for i := 0; i < len(x.Items) && i < len(y.Items); i++ {
				if equal(x.Items[i], y.Items[i]) {
					continue
				}
				return order(x.Items[i], y.Items[i])
			}
			switch {
			case len(x.Items) < len(y.Items):
				return -1, nil
			case len(x.Items) > len(y.Items):
				return 1, nil
			}
			return 0, nil
		}
	}
	if err := undefinedOperand(a, b); err != nil {
		return 0, err
	}
	return 0, errf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

func compare(op string, a, b Value) (bool, error) {
	switch op {
	case "==":
		return equal(a, b), nil
	case "!=":
		return !equal(a, b), nil
	case "in":
		return contains(b, a)
	case "notin":
		ok, err := contains(b, a)
		return !ok, err
	}
	c, err := order(a, b)
	if err != nil {
		return false, err
	}
	if c == 2 {
		return false, nil
	}
	switch op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	case ">=":
		return c >= 0, nil
	}
	return false, errf("unknown comparison %s", op)
}

func contains(container, item Value) (bool, error) {
	container, item = unmark(container), unmark(item)
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			if err := undefinedOperand(item); err != nil {
				return false, err
			}
			return false, errf("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(c, s), nil
	case *List:
		for _, it := range c.Items {
			if equal(it, item) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		ks, err := dictKey(item)
		if err != nil {
			return false, err
		}
		_, has := c.m[ks]
		return has, nil
	case Undefined:
		return false, nil
	case *Iter:
		items, err := iterate(c)
		if err != nil {
			return false, err
		}
		for _, it := range items {
			if equal(it, item) {
				return true, nil
			}
		}
		return false, nil
	}
	return false, errf("argument of type '%s' is not iterable", typeName(container))
}
