package jinja

import (
	"container/list"
	"math"
	"math/big"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"weak"
)

// A Memo keeps what iterations of a template's loops over dicts wrote, so
// that a later render, handed the same dict again, writes it without
// running the iteration. A chat template's turn N+1 repeats turn N's
// messages, which a message cache hands out as the same dicts: only the
// new messages, and the ones whose context changed, are rendered again.
//
// An iteration's output is a function of its item and of what it reads
// from outside itself. The first time the memo sees an item it only marks
// it (most items are a request's new message, never seen again). While an
// iteration over a marked item runs, the renderer records those reads in
// order: each maximal subexpression built only of names from outside the
// iteration and of the loop variable (the loop's units, found when the
// template is compiled), and each other name that resolves outside the
// iteration, with the value each gave. A later iteration over the same
// dict replays the output only if every recorded read, evaluated again in
// order, gives the same value; the first difference sends it to run.
// Reads are pure, and the same values read in the same order take the
// iteration down the same path, so the output is the same.
//
// Only loops that cannot change anything outside an iteration are kept
// (no namespace assignment and no macro definition in the body), only at
// the top level (no enclosing loop), and none in a template that may bind
// a name to a single-use iterator, which evaluating a read again would
// use up (storesIterator). An iteration that calls a macro or
// strftime_now, reads a value that cannot be compared across renders
// (a function, an iterator, a namespace, the loop object itself), or
// fails is not kept. Values compare as Python would see them as equal
// and indistinguishable: scalars by value, dicts and lists by identity
// (templates cannot change them, and the memo keeps those it read alive).
//
// The dict an entry is for is held weakly: the message cache hands the
// same dict out while it keeps it, and once it lets it go no render can
// replay the entry again. Holding it strongly would keep every marked
// dict's parsed content alive beyond both caches' budgets: a mark counts
// 96 bytes, and the message under it is often thousands.
//
// A Memo is safe for concurrent use and bounded in bytes, least recently
// used first out. The zero value is unusable; use NewMemo.
type Memo struct {
	mu   sync.Mutex
	m    map[memoKey]*list.Element
	lru  list.List // of *memoEntry, most recent first
	used int
	max  int
	hits atomic.Int64
	miss atomic.Int64
	kept atomic.Int64
}

// memoVariants is how many recorded contexts a dict keeps per loop: the
// last message of a conversation is read once as the last and then as
// one before it.
const memoVariants = 2

type memoKey struct {
	loop *forNode
	item weak.Pointer[Dict] // never equal to another dict's, even once collected
}

type memoEntry struct {
	key      memoKey
	variants []*memoVariant // most recent first
	size     int
}

// memoVariant is one recorded iteration.
type memoVariant struct {
	reads []memoRead
	out   string
	ctrl  ctrl
}

// size is what a variant counts for in the memo's budget: its text, its
// reads and the bookkeeping around them.
func (v *memoVariant) size() int { return len(v.out) + 48*len(v.reads) + 160 }

// memoRead is one recorded read: e evaluated in the iteration's scope (or
// in the loop's enclosing scope when outer) gave v.
type memoRead struct {
	e     expr
	v     Value
	outer bool
}

// globalRef records that a name resolved to a built-in global, which
// replays while no variable of that name exists.
type globalRef struct{ name string }

// MemoStats are a Memo's counters.
type MemoStats struct {
	// Hits and Misses count iterations over dicts of memoized loops that
	// replayed and that ran; Kept counts the runs recorded (a dict's
	// first run is not).
	Hits, Misses, Kept int64
	// Entries and Bytes are what the memo holds.
	Entries, Bytes int
}

// NewMemo returns a memo of about maxBytes.
func NewMemo(maxBytes int) *Memo {
	return &Memo{m: make(map[memoKey]*list.Element), max: maxBytes}
}

// Stats returns the memo's counters.
func (m *Memo) Stats() MemoStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return MemoStats{Hits: m.hits.Load(), Misses: m.miss.Load(), Kept: m.kept.Load(), Entries: m.lru.Len(), Bytes: m.used}
}

// get returns the variants recorded for k, and whether k was seen before.
// A key seen for the first time is only marked: most dicts a render sees
// once (a request's new message) it never sees again, and recording what
// they wrote would cost more than the replays it could give.
func (m *Memo) get(k memoKey) (vs []*memoVariant, seen bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.m[k]; ok {
		m.lru.MoveToFront(el)
		return el.Value.(*memoEntry).variants, true
	}
	m.m[k] = m.lru.PushFront(&memoEntry{key: k, size: memoMarkSize})
	m.used += memoMarkSize
	m.evict()
	return nil, false
}

// memoMarkSize is what an entry without variants counts for.
const memoMarkSize = 96

// put adds v to k's variants, the most recent first.
func (m *Memo) put(k memoKey, v *memoVariant) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kept.Add(1)
	el, ok := m.m[k]
	if !ok { // evicted since it was marked
		el = m.lru.PushFront(&memoEntry{key: k, size: memoMarkSize})
		m.m[k] = el
		m.used += memoMarkSize
	}
	e := el.Value.(*memoEntry)
	vs := make([]*memoVariant, 0, memoVariants)
	vs = append(vs, v)
	vs = append(vs, e.variants[:min(len(e.variants), memoVariants-1)]...)
	m.used -= e.size
	e.variants, e.size = vs, memoMarkSize
	for _, x := range vs {
		e.size += x.size()
	}
	m.used += e.size
	m.lru.MoveToFront(el)
	m.evict()
}

// evict drops the least recently used entries while the memo is over its
// budget.
func (m *Memo) evict() {
	for m.used > m.max && m.lru.Len() > 0 {
		el := m.lru.Back()
		e := el.Value.(*memoEntry)
		m.lru.Remove(el)
		delete(m.m, e.key)
		m.used -= e.size
	}
}

// loopPlan is what the compiler found about a for loop for the memo.
type loopPlan struct {
	ok    bool            // the loop's iterations may be memoized
	units map[expr]bool   // the body's units (see Memo)
	names map[string]bool // names the body or the loop assigns
}

// planLoop finds whether n may be memoized and its units.
func planLoop(n *forNode) *loopPlan {
	p := &loopPlan{ok: true, units: map[expr]bool{}, names: map[string]bool{}}
	for _, t := range n.targets {
		p.names[t] = true
	}
	p.collect(n.body)
	if p.ok {
		p.findUnits(n.body)
	}
	return p
}

// collect gathers the names assigned anywhere in body and rules out what
// would outlive an iteration.
func (p *loopPlan) collect(body []node) {
	for _, n := range body {
		switch n := n.(type) {
		case *forNode:
			// A nested loop binds its own loop variable in its own scope;
			// units are never looked for inside it.
			for _, t := range n.targets {
				p.names[t] = true
			}
		case *setNode:
			if n.ns != "" {
				p.ok = false
			}
			for _, name := range n.names {
				p.names[name] = true
			}
		case *setBlockNode:
			p.names[n.name] = true
		case *macroNode:
			p.ok = false
		case *withNode:
			for _, name := range n.names {
				p.names[name] = true
			}
		}
		for _, b := range statementBodies(n) {
			p.collect(b)
		}
	}
}

// findUnits marks the units of the statements of body that lie outside
// nested loops (whose loop variable is another).
func (p *loopPlan) findUnits(body []node) {
	for _, n := range body {
		if _, nested := n.(*forNode); nested {
			continue
		}
		assigned, other := statementExprs(n)
		for _, e := range slices.Concat(assigned, other) {
			p.unitsOf(e)
		}
		for _, b := range statementBodies(n) {
			p.findUnits(b)
		}
	}
}

// unitsOf marks e if it is a unit, else the units among its parts.
func (p *loopPlan) unitsOf(e expr) {
	if e == nil {
		return
	}
	if ext, named := p.external(e); ext && named {
		p.units[e] = true
		return
	}
	for _, c := range children(e) {
		p.unitsOf(c)
	}
}

// external reports whether e is built only of constants, names the loop
// does not assign and operations without calls or new containers, and
// whether it names anything.
func (p *loopPlan) external(e expr) (ext, named bool) {
	switch e := e.(type) {
	case nil, *constExpr:
		return true, false
	case *nameExpr:
		return !p.names[e.name], true
	case *attrExpr, *itemExpr, *filterExpr, *testExpr, *binExpr, *unaryExpr, *compareExpr,
		*andExpr, *orExpr, *notExpr, *condExpr, *concatExpr:
		if f, ok := e.(*filterExpr); ok && f.x == nil {
			return false, false // a block's filter: its operand is the block
		}
		ext = true
		for _, c := range children(e) {
			cx, cn := p.external(c)
			ext, named = ext && cx, named || cn
		}
		return ext, named
	}
	return false, false
}

// children returns the subexpressions of e.
func children(e expr) []expr {
	switch e := e.(type) {
	case *attrExpr:
		return []expr{e.x}
	case *itemExpr:
		return []expr{e.x, e.index}
	case *sliceExpr:
		return []expr{e.x, e.start, e.stop, e.step}
	case *callExpr:
		out := append([]expr{e.fn}, e.args...)
		for _, k := range e.kwargs {
			out = append(out, k.x)
		}
		return out
	case *filterExpr:
		out := append([]expr{e.x}, e.args...)
		for _, k := range e.kwargs {
			out = append(out, k.x)
		}
		return out
	case *testExpr:
		return append([]expr{e.x}, e.args...)
	case *binExpr:
		return []expr{e.l, e.r}
	case *unaryExpr:
		return []expr{e.x}
	case *compareExpr:
		return append([]expr{e.first}, e.rest...)
	case *andExpr:
		return []expr{e.l, e.r}
	case *orExpr:
		return []expr{e.l, e.r}
	case *notExpr:
		return []expr{e.x}
	case *condExpr:
		return []expr{e.test, e.yes, e.no}
	case *listExpr:
		return e.items
	case *tupleExpr:
		return e.items
	case *dictExpr:
		return append(append([]expr(nil), e.keys...), e.vals...)
	case *concatExpr:
		return e.parts
	}
	return nil
}

// recording is an iteration being recorded.
type recording struct {
	plan    *loopPlan
	iter    *scope // the iteration's scope
	reads   []memoRead
	inUnit  bool
	tainted bool
}

func (rec *recording) add(e expr, v Value, outer bool) {
	if !memoComparable(v) {
		rec.tainted = true
		return
	}
	rec.reads = append(rec.reads, memoRead{e: e, v: v, outer: outer})
}

// memoComparable reports whether a value read can be compared with one
// read in another render.
func memoComparable(v Value) bool {
	switch v.(type) {
	case nil, bool, int64, float64, string, Markup, Undefined, *big.Int, *Dict, *List, globalRef:
		return true
	}
	return false
}

// memoSame reports whether two recorded values are indistinguishable to a
// template. Values pass memoComparable, so == is defined on them: scalars
// by value, dicts and lists by identity; floats compare by their bits
// (0.0 and -0.0 print differently) and big ints by value.
func memoSame(a, b Value) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case *big.Int:
		y, ok := b.(*big.Int)
		return ok && x.Cmp(y) == 0
	}
	return a == b
}

// evalRecorded evaluates e while an iteration is recorded: a unit as a
// whole, a name by where it resolves.
func (r *renderer) evalRecorded(e expr, s *scope) (Value, error) {
	rec := r.rec
	n, isName := e.(*nameExpr)
	if !isName {
		rec.inUnit = true
		v, err := r.eval(e, s)
		rec.inUnit = false
		if err == nil {
			rec.add(e, v, false)
		}
		return v, err
	}
	// A name, a unit or not, by where it resolves: a built-in global
	// replays while no variable shadows it.
	inside := true
	for c := s; c != nil; c = c.parent {
		if v, ok := c.get(n.name); ok {
			if inside && (c != rec.iter || n.name != "loop") {
				return v, nil
			}
			rec.add(e, v, true)
			return v, nil
		}
		if c == rec.iter {
			inside = false
		}
	}
	if inside {
		// s is not within the iteration: a macro's scope, which taints
		// the recording already.
		rec.tainted = true
	}
	if g := r.global(n.name); g != nil {
		rec.add(e, globalRef{n.name}, true)
		return g, nil
	}
	v := Undefined{Name: n.name}
	rec.add(e, v, true)
	return v, nil
}

// replays reports whether v's reads give the same values now, in the
// iteration scope is of a loop whose enclosing scope is outer.
func (r *renderer) replays(v *memoVariant, is, outer *scope) bool {
	for _, rd := range v.reads {
		if g, ok := rd.v.(globalRef); ok {
			if _, bound := outer.lookup(g.name); bound {
				return false
			}
			continue
		}
		s := is
		if rd.outer {
			s = outer
		}
		got, err := r.eval(rd.e, s)
		if err != nil || !memoSame(got, rd.v) {
			return false
		}
	}
	return true
}

// iteratorFilters are the filters whose result is a single-use iterator.
var iteratorFilters = map[string]bool{
	"items": true, "reverse": true, "unique": true, "map": true, "select": true, "reject": true,
	"selectattr": true, "rejectattr": true, "batch": true,
}

// storesIterator reports whether a statement of body (at any depth) may
// bind a name to a single-use iterator: an assignment of a value computed
// with a filter that makes one, or a call (a macro's, whose parameters
// are names) with one among its arguments.
func storesIterator(body []node) bool {
	makes := func(e expr) bool {
		return anyExpr(e, func(x expr) bool {
			f, ok := x.(*filterExpr)
			return ok && iteratorFilters[f.name]
		})
	}
	passes := func(e expr) bool {
		return anyExpr(e, func(x expr) bool {
			c, ok := x.(*callExpr)
			return ok && slices.ContainsFunc(children(c)[1:], makes)
		})
	}
	for _, n := range body {
		assigned, other := statementExprs(n)
		for _, e := range assigned {
			if makes(e) || passes(e) {
				return true
			}
		}
		for _, e := range other {
			if passes(e) {
				return true
			}
		}
		for _, b := range statementBodies(n) {
			if storesIterator(b) {
				return true
			}
		}
	}
	return false
}

// anyExpr reports whether f holds for e or any expression within it.
func anyExpr(e expr, f func(expr) bool) bool {
	if e == nil {
		return false
	}
	return f(e) || slices.ContainsFunc(children(e), func(c expr) bool { return anyExpr(c, f) })
}

// statementExprs returns the expressions of statement n: those whose
// value it binds to a name, and the others.
func statementExprs(n node) (assigned, other []expr) {
	switch n := n.(type) {
	case *printNode:
		return nil, []expr{n.x}
	case *ifNode:
		return nil, n.conds
	case *forNode:
		return nil, []expr{n.iter, n.cond}
	case *setNode:
		return []expr{n.x}, nil
	case *setBlockNode:
		for _, f := range n.filters {
			assigned = append(assigned, f)
		}
		return assigned, nil
	case *macroNode:
		return n.defaults, nil
	case *withNode:
		return n.xs, nil
	case *filterBlockNode:
		for _, f := range n.filters {
			other = append(other, f)
		}
		return nil, other
	}
	return nil, nil
}

// statementBodies returns the statement lists nested in n.
func statementBodies(n node) [][]node {
	switch n := n.(type) {
	case *ifNode:
		return append(append([][]node(nil), n.bodies...), n.els)
	case *forNode:
		return [][]node{n.body, n.els}
	case *setBlockNode:
		return [][]node{n.body}
	case *macroNode:
		return [][]node{n.body}
	case *scopeNode:
		return [][]node{n.body}
	case *withNode:
		return [][]node{n.body}
	case *filterBlockNode:
		return [][]node{n.body}
	}
	return nil
}

// writeMemo appends a replayed iteration's output.
func writeMemo(out *strings.Builder, v *memoVariant) error {
	out.WriteString(v.out)
	if out.Len() > maxOutput {
		return errf("output larger than %d bytes", maxOutput)
	}
	return nil
}
