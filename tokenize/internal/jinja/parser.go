package jinja

import (
	"fmt"
	"math/big"
)

// Statement nodes.
type (
	node any

	outputNode struct{ text string }
	printNode  struct{ x expr }
	ifNode     struct {
		conds  []expr
		bodies [][]node
		els    []node
	}
	forNode struct {
		targets []string
		iter    expr
		cond    expr
		body    []node
		els     []node
		plan    *loopPlan // for the memo, set by Compile
	}
	setNode struct {
		names []string // one name, or several for tuple unpacking
		ns    string   // set ns.attr = ...: ns holds the namespace name
		attr  string
		x     expr
	}
	setBlockNode struct {
		name    string
		filters []*filterExpr
		body    []node
	}
	macroNode struct {
		name     string
		params   []string
		defaults []expr // aligned to the end of params, as in Python
		body     []node
	}
	scopeNode struct{ body []node }
	withNode  struct {
		names []string
		xs    []expr
		body  []node
	}
	filterBlockNode struct {
		filters []*filterExpr
		body    []node
	}
	breakNode    struct{}
	continueNode struct{}
)

// Expression nodes.
type (
	expr any

	constExpr struct{ v Value }
	nameExpr  struct{ name string }
	attrExpr  struct {
		x    expr
		attr string
	}
	itemExpr  struct{ x, index expr }
	sliceExpr struct {
		x                 expr
		start, stop, step expr
	}
	callExpr struct {
		fn     expr
		args   []expr
		kwargs []kwarg
	}
	kwarg struct {
		name string
		x    expr
	}
	filterExpr struct {
		x      expr // nil inside a filter block or set block
		name   string
		args   []expr
		kwargs []kwarg
	}
	testExpr struct {
		x      expr
		name   string
		args   []expr
		negate bool
	}
	binExpr struct {
		op   string
		l, r expr
	}
	unaryExpr struct {
		op string
		x  expr
	}
	compareExpr struct {
		first expr
		ops   []string
		rest  []expr
	}
	andExpr    struct{ l, r expr }
	orExpr     struct{ l, r expr }
	notExpr    struct{ x expr }
	condExpr   struct{ test, yes, no expr }
	listExpr   struct{ items []expr }
	tupleExpr  struct{ items []expr }
	dictExpr   struct{ keys, vals []expr }
	concatExpr struct{ parts []expr }
)

type parser struct {
	toks []token
	pos  int
}

func (p *parser) cur() token  { return p.toks[p.pos] }
func (p *parser) next() token { t := p.toks[p.pos]; p.pos++; return t }

func (p *parser) isOp(op string) bool {
	t := p.cur()
	return t.kind == tkOp && t.val == op
}

func (p *parser) isName(name string) bool {
	t := p.cur()
	return t.kind == tkName && t.val == name
}

func (p *parser) errf(format string, a ...any) error {
	return fmt.Errorf("line %d: %s", p.cur().line, fmt.Sprintf(format, a...))
}

func (p *parser) expectOp(op string) error {
	if !p.isOp(op) {
		return p.errf("expected %q", op)
	}
	p.pos++
	return nil
}

func (p *parser) expectName() (string, error) {
	t := p.cur()
	if t.kind != tkName {
		return "", p.errf("expected a name")
	}
	p.pos++
	return t.val, nil
}

func (p *parser) expectBlockEnd() error {
	if p.cur().kind != tkBlockEnd {
		return p.errf("expected end of block tag")
	}
	p.pos++
	return nil
}

// parseBody parses nodes until a block tag whose name is in ends; it returns
// that name, leaving the parser after the name.
func (p *parser) parseBody(ends ...string) ([]node, string, error) {
	var out []node
	for {
		t := p.cur()
		switch t.kind {
		case tkEOF:
			if len(ends) > 0 {
				return nil, "", p.errf("unexpected end of template, expected %v", ends)
			}
			return out, "", nil
		case tkData:
			p.pos++
			out = append(out, &outputNode{text: t.val})
		case tkVarBegin:
			p.pos++
			x, err := p.parseTuple(true)
			if err != nil {
				return nil, "", err
			}
			if p.cur().kind != tkVarEnd {
				return nil, "", p.errf("expected end of print statement")
			}
			p.pos++
			out = append(out, &printNode{x: x})
		case tkBlockBegin:
			p.pos++
			nt := p.cur()
			if nt.kind != tkName {
				return nil, "", p.errf("expected statement name")
			}
			for _, e := range ends {
				if nt.val == e {
					p.pos++
					return out, e, nil
				}
			}
			n, err := p.parseStatement()
			if err != nil {
				return nil, "", err
			}
			out = append(out, n)
		default:
			return nil, "", p.errf("unexpected token")
		}
	}
}

func (p *parser) parseStatement() (node, error) {
	name := p.next().val
	switch name {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor()
	case "set":
		return p.parseSet()
	case "macro":
		return p.parseMacro()
	case "break", "continue":
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if name == "break" {
			return &breakNode{}, nil
		}
		return &continueNode{}, nil
	case "generation":
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody("endgeneration")
		if err != nil {
			return nil, err
		}
		return &scopeNode{body: body}, p.expectBlockEnd()
	case "with":
		return p.parseWith()
	case "filter":
		fs, err := p.parseFilterChain()
		if err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody("endfilter")
		if err != nil {
			return nil, err
		}
		return &filterBlockNode{filters: fs, body: body}, p.expectBlockEnd()
	}
	return nil, fmt.Errorf("line %d: unsupported statement %q", p.toks[p.pos-1].line, name)
}

func (p *parser) parseIf() (node, error) {
	n := &ifNode{}
	for {
		c, err := p.parseExpr(true)
		if err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.parseBody("elif", "else", "endif")
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, c)
		n.bodies = append(n.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.expectBlockEnd(); err != nil {
				return nil, err
			}
			n.els, _, err = p.parseBody("endif")
			if err != nil {
				return nil, err
			}
		}
		return n, p.expectBlockEnd()
	}
}

func (p *parser) parseFor() (node, error) {
	n := &forNode{}
	for {
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		n.targets = append(n.targets, name)
		if !p.isOp(",") {
			break
		}
		p.pos++
	}
	if !p.isName("in") {
		return nil, p.errf("expected 'in'")
	}
	p.pos++
	iter, err := p.parseTuple(false)
	if err != nil {
		return nil, err
	}
	n.iter = iter
	if p.isName("if") {
		p.pos++
		if n.cond, err = p.parseExpr(true); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, p.errf("recursive loops are not supported")
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	body, end, err := p.parseBody("else", "endfor")
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if n.els, _, err = p.parseBody("endfor"); err != nil {
			return nil, err
		}
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseSet() (node, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	n := &setNode{names: []string{name}}
	if p.isOp(".") {
		p.pos++
		attr, err := p.expectName()
		if err != nil {
			return nil, err
		}
		n.ns, n.attr, n.names = name, attr, nil
	} else {
		for p.isOp(",") {
			p.pos++
			if p.cur().kind != tkName {
				break
			}
			n.names = append(n.names, p.next().val)
		}
	}
	if !p.isOp("=") {
		if n.ns != "" || len(n.names) != 1 {
			return nil, p.errf("block set needs a single name")
		}
		var fs []*filterExpr
		if p.isOp("|") {
			if fs, err = p.parseFilterChain(); err != nil {
				return nil, err
			}
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody("endset")
		if err != nil {
			return nil, err
		}
		return &setBlockNode{name: name, filters: fs, body: body}, p.expectBlockEnd()
	}
	p.pos++
	if n.x, err = p.parseTuple(true); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

// parseFilterChain parses "| f(args) | g" or "f | g" (filter block).
func (p *parser) parseFilterChain() ([]*filterExpr, error) {
	var fs []*filterExpr
	first := true
	for first || p.isOp("|") {
		if p.isOp("|") {
			p.pos++
		}
		first = false
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		fs = append(fs, f)
	}
	return fs, nil
}

func (p *parser) parseMacro() (node, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	n := &macroNode{name: name}
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	for !p.isOp(")") {
		if len(n.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		pn, err := p.expectName()
		if err != nil {
			return nil, err
		}
		n.params = append(n.params, pn)
		if p.isOp("=") {
			p.pos++
			d, err := p.parseExpr(true)
			if err != nil {
				return nil, err
			}
			n.defaults = append(n.defaults, d)
		} else if len(n.defaults) > 0 {
			return nil, p.errf("non-default argument follows default argument")
		}
	}
	p.pos++
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	body, _, err := p.parseBody("endmacro")
	if err != nil {
		return nil, err
	}
	n.body = body
	return n, p.expectBlockEnd()
}

func (p *parser) parseWith() (node, error) {
	n := &withNode{}
	for p.cur().kind != tkBlockEnd {
		if len(n.names) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		x, err := p.parseExpr(true)
		if err != nil {
			return nil, err
		}
		n.names = append(n.names, name)
		n.xs = append(n.xs, x)
	}
	p.pos++
	body, _, err := p.parseBody("endwith")
	if err != nil {
		return nil, err
	}
	n.body = body
	return n, p.expectBlockEnd()
}

// parseTuple parses one expression or a comma-separated tuple without
// parentheses.
func (p *parser) parseTuple(condexpr bool) (expr, error) {
	first, err := p.parseExpr(condexpr)
	if err != nil {
		return nil, err
	}
	if !p.isOp(",") {
		return first, nil
	}
	items := []expr{first}
	for p.isOp(",") {
		p.pos++
		if !p.startsExpr() {
			break
		}
		x, err := p.parseExpr(condexpr)
		if err != nil {
			return nil, err
		}
		items = append(items, x)
	}
	return &tupleExpr{items: items}, nil
}

func (p *parser) startsExpr() bool {
	t := p.cur()
	switch t.kind {
	case tkName, tkString, tkInt, tkFloat:
		return true
	case tkOp:
		switch t.val {
		case "(", "[", "{", "-", "+":
			return true
		}
	}
	return false
}

func (p *parser) parseExpr(condexpr bool) (expr, error) {
	x, err := p.parseOr()
	if err != nil || !condexpr {
		return x, err
	}
	for p.isName("if") {
		p.pos++
		test, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var no expr
		if p.isName("else") {
			p.pos++
			if no, err = p.parseExpr(true); err != nil {
				return nil, err
			}
		}
		x = &condExpr{test: test, yes: x, no: no}
	}
	return x, nil
}

func (p *parser) parseOr() (expr, error) {
	l, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.isName("or") {
		p.pos++
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		l = &orExpr{l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseAnd() (expr, error) {
	l, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.isName("and") {
		p.pos++
		r, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		l = &andExpr{l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		p.pos++
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &notExpr{x: x}, nil
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &compareExpr{first: first}
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tkOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			p.pos++
		case t.kind == tkName && t.val == "in":
			op = "in"
			p.pos++
		case t.kind == tkName && t.val == "not" && p.toks[p.pos+1].kind == tkName && p.toks[p.pos+1].val == "in":
			op = "notin"
			p.pos += 2
		default:
			if len(c.ops) == 0 {
				return first, nil
			}
			return c, nil
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, r)
	}
}

func (p *parser) parseMath1() (expr, error) {
	l, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	for p.isOp("+") || p.isOp("-") {
		op := p.next().val
		r, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: op, l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseConcat() (expr, error) {
	x, err := p.parseMath2()
	if err != nil {
		return nil, err
	}
	if !p.isOp("~") {
		return x, nil
	}
	parts := []expr{x}
	for p.isOp("~") {
		p.pos++
		r, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		parts = append(parts, r)
	}
	return &concatExpr{parts: parts}, nil
}

func (p *parser) parseMath2() (expr, error) {
	l, err := p.parsePow()
	if err != nil {
		return nil, err
	}
	for p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%") {
		op := p.next().val
		r, err := p.parsePow()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: op, l: l, r: r}
	}
	return l, nil
}

func (p *parser) parsePow() (expr, error) {
	l, err := p.parseUnary(true)
	if err != nil {
		return nil, err
	}
	for p.isOp("**") {
		p.pos++
		r, err := p.parseUnary(true)
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: "**", l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	var x expr
	var err error
	switch {
	case p.isOp("-"):
		p.pos++
		var inner expr
		if inner, err = p.parseUnary(false); err != nil {
			return nil, err
		}
		x = &unaryExpr{op: "-", x: inner}
	case p.isOp("+"):
		p.pos++
		var inner expr
		if inner, err = p.parseUnary(false); err != nil {
			return nil, err
		}
		x = &unaryExpr{op: "+", x: inner}
	default:
		if x, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	if x, err = p.parsePostfix(x); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(x)
	}
	return x, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tkName:
		p.pos++
		switch t.val {
		case "true", "True":
			return &constExpr{v: true}, nil
		case "false", "False":
			return &constExpr{v: false}, nil
		case "none", "None":
			return &constExpr{v: nil}, nil
		}
		return &nameExpr{name: t.val}, nil
	case tkString:
		s := ""
		for p.cur().kind == tkString {
			s += p.next().val
		}
		return &constExpr{v: s}, nil
	case tkInt, tkFloat:
		p.pos++
		return &constExpr{v: t.num}, nil
	case tkOp:
		switch t.val {
		case "(":
			p.pos++
			if p.isOp(")") {
				p.pos++
				return &tupleExpr{}, nil
			}
			first, err := p.parseExpr(true)
			if err != nil {
				return nil, err
			}
			if p.isOp(")") {
				p.pos++
				return first, nil
			}
			items := []expr{first}
			for p.isOp(",") {
				p.pos++
				if p.isOp(")") {
					break
				}
				x, err := p.parseExpr(true)
				if err != nil {
					return nil, err
				}
				items = append(items, x)
			}
			if err := p.expectOp(")"); err != nil {
				return nil, err
			}
			return &tupleExpr{items: items}, nil
		case "[":
			p.pos++
			l := &listExpr{}
			for !p.isOp("]") {
				if len(l.items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("]") {
						break
					}
				}
				x, err := p.parseExpr(true)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, x)
			}
			p.pos++
			return l, nil
		case "{":
			p.pos++
			d := &dictExpr{}
			for !p.isOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("}") {
						break
					}
				}
				k, err := p.parseExpr(true)
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpr(true)
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			p.pos++
			return d, nil
		}
	}
	return nil, p.errf("unexpected token in expression")
}

func (p *parser) parsePostfix(x expr) (expr, error) {
	for {
		switch {
		case p.isOp("."):
			p.pos++
			t := p.next()
			switch t.kind {
			case tkName:
				x = &attrExpr{x: x, attr: t.val}
			case tkInt:
				x = &itemExpr{x: x, index: &constExpr{v: t.num}}
			default:
				return nil, p.errf("expected attribute name")
			}
		case p.isOp("["):
			p.pos++
			var err error
			if x, err = p.parseSubscript(x); err != nil {
				return nil, err
			}
		case p.isOp("("):
			var err error
			if x, err = p.parseCall(x); err != nil {
				return nil, err
			}
		default:
			return x, nil
		}
	}
}

func (p *parser) parseSubscript(x expr) (expr, error) {
	var parts [3]expr
	n := 0
	isSlice := false
	for {
		if p.isOp(":") {
			isSlice = true
			n++
			if n > 2 {
				return nil, p.errf("invalid slice")
			}
			p.pos++
			continue
		}
		if p.isOp("]") {
			p.pos++
			break
		}
		v, err := p.parseExpr(true)
		if err != nil {
			return nil, err
		}
		if parts[n] != nil {
			return nil, p.errf("invalid subscript")
		}
		parts[n] = v
	}
	if !isSlice {
		if parts[0] == nil {
			return nil, p.errf("empty subscript")
		}
		return &itemExpr{x: x, index: parts[0]}, nil
	}
	return &sliceExpr{x: x, start: parts[0], stop: parts[1], step: parts[2]}, nil
}

func (p *parser) parseCallArgs() ([]expr, []kwarg, error) {
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	var args []expr
	var kws []kwarg
	for !p.isOp(")") {
		if len(args)+len(kws) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		if p.cur().kind == tkName && p.toks[p.pos+1].kind == tkOp && p.toks[p.pos+1].val == "=" {
			name := p.next().val
			p.pos++
			x, err := p.parseExpr(true)
			if err != nil {
				return nil, nil, err
			}
			kws = append(kws, kwarg{name: name, x: x})
			continue
		}
		if len(kws) > 0 {
			return nil, nil, p.errf("positional argument follows keyword argument")
		}
		x, err := p.parseExpr(true)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, x)
	}
	p.pos++
	return args, kws, nil
}

func (p *parser) parseCall(fn expr) (expr, error) {
	args, kws, err := p.parseCallArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{fn: fn, args: args, kwargs: kws}, nil
}

func (p *parser) parseFilter(x expr) (*filterExpr, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	for p.isOp(".") {
		p.pos++
		n2, err := p.expectName()
		if err != nil {
			return nil, err
		}
		name += "." + n2
	}
	f := &filterExpr{x: x, name: name}
	if p.isOp("(") {
		if f.args, f.kwargs, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (p *parser) parseFilterExpr(x expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			p.pos++
			f, err := p.parseFilter(x)
			if err != nil {
				return nil, err
			}
			x = f
		case p.isName("is"):
			p.pos++
			t := &testExpr{x: x}
			if p.isName("not") {
				p.pos++
				t.negate = true
			}
			name, err := p.expectName()
			if err != nil {
				return nil, err
			}
			for p.isOp(".") {
				p.pos++
				n2, err := p.expectName()
				if err != nil {
					return nil, err
				}
				name += "." + n2
			}
			t.name = name
			c := p.cur()
			switch {
			case p.isOp("("):
				if t.args, _, err = p.parseCallArgs(); err != nil {
					return nil, err
				}
			case (c.kind == tkName || c.kind == tkString || c.kind == tkInt || c.kind == tkFloat ||
				c.kind == tkOp && (c.val == "[" || c.val == "{")) &&
				!(c.kind == tkName && (c.val == "else" || c.val == "or" || c.val == "and")):
				if c.kind == tkName && c.val == "is" {
					return nil, p.errf("cannot chain tests with is")
				}
				a, err := p.parsePrimary()
				if err != nil {
					return nil, err
				}
				if a, err = p.parsePostfix(a); err != nil {
					return nil, err
				}
				t.args = []expr{a}
			}
			x = t
		case p.isOp("("):
			var err error
			if x, err = p.parseCall(x); err != nil {
				return nil, err
			}
		default:
			return x, nil
		}
	}
}

func bigFromString(s string) (*big.Int, bool) { return new(big.Int).SetString(s, 10) }
