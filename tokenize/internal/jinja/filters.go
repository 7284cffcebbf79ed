package jinja

import (
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
)

func (r *renderer) applyFilter(f *filterExpr, x Value, s *scope) (Value, error) {
	args, err := r.evalList(f.args, s)
	if err != nil {
		return nil, err
	}
	kwargs, err := r.evalKwargs(f.kwargs, s)
	if err != nil {
		return nil, err
	}
	return r.filter(f.name, x, args, kwargs)
}

// arg returns positional argument i or keyword name, or def.
func arg(args []Value, kwargs *Dict, i int, name string, def Value) Value {
	if i >= 0 && i < len(args) {
		return args[i]
	}
	if v, ok := kwargs.Get(name); ok {
		return v
	}
	return def
}

func (r *renderer) filter(name string, x Value, args []Value, kwargs *Dict) (Value, error) {
	switch name {
	case "safe":
		if _, u := x.(Undefined); !u {
			return Markup(str(x)), nil
		}
	case "escape", "e", "forceescape":
		if m, ok := x.(Markup); ok && name != "forceescape" {
			return m, nil
		}
		if _, u := x.(Undefined); !u {
			return Markup(escapeHTML(str(x))), nil
		}
	case "string":
		if m, ok := x.(Markup); ok {
			return m, nil
		}
	}
	x = unmark(x)
	for i := range args {
		args[i] = unmark(args[i])
	}
	// Filters that accept undefined.
	switch name {
	case "default", "d":
		def := arg(args, kwargs, 0, "default_value", "")
		boolean := truth(arg(args, kwargs, 1, "boolean", false))
		if _, undef := x.(Undefined); undef || (boolean && !truth(x)) {
			return def, nil
		}
		return x, nil
	case "tojson":
		return tojson(x, args, kwargs)
	case "string":
		return str(x), nil
	case "length", "count":
		switch v := x.(type) {
		case string:
			return int64(runeLen(v)), nil
		case *List:
			return int64(len(v.Items)), nil
		case *Dict:
			return int64(v.Len()), nil
		case Undefined:
			return int64(0), nil
		case *Iter:
			if v.isView() {
				return int64(len(v.items)), nil
			}
		}
		return nil, errf("object of type '%s' has no len()", typeName(x))
	case "list":
		items, err := iterate(x)
		if err != nil {
			return nil, err
		}
		return &List{Items: append([]Value(nil), items...)}, nil
	}
	if u, ok := x.(Undefined); ok {
		// Undefined reads as "" and as an empty iterable, as in jinja2; only
		// filters that need a number or a mapping fail.
		switch name {
		case "int", "float", "abs", "round", "dictsort", "indent":
			return nil, errf("'%s' is undefined", u.Name)
		}
	}
	switch name {
	case "trim":
		chars, has, err := argStr(args, 0, "trim")
		if err != nil {
			return nil, err
		}
		return pyStrip(str(x), chars, has, true, true), nil
	case "lower":
		return strings.ToLower(str(x)), nil
	case "upper":
		return strings.ToUpper(str(x)), nil
	case "capitalize":
		return pyCapitalize(str(x)), nil
	case "title":
		return jinjaTitle(str(x)), nil
	case "safe", "escape", "e", "forceescape":
		return Markup(""), nil // undefined: jinja gives an empty markup string
	case "replace":
		if len(args) < 2 {
			return nil, errf("replace needs two arguments")
		}
		n, err := intArg(args, 2, -1)
		if err != nil {
			return nil, err
		}
		return strings.Replace(str(x), str(args[0]), str(args[1]), n), nil
	case "join":
		items, err := iterate(x)
		if err != nil {
			return nil, err
		}
		sep := str(arg(args, kwargs, 0, "d", ""))
		if attr := arg(args, kwargs, 1, "attribute", nil); attr != nil {
			items = append([]Value(nil), items...) // never modify the input
			for i, it := range items {
				if items[i], err = getItemOrAttr(it, attr); err != nil {
					return nil, err
				}
			}
		}
		parts := make([]string, len(items))
		for i, it := range items {
			parts[i] = str(it)
		}
		return strings.Join(parts, sep), nil
	case "items":
		if _, ok := x.(Undefined); ok {
			return newGen(nil), nil
		}
		d, ok := x.(*Dict)
		if !ok {
			return nil, errf("can only get item pairs from a mapping")
		}
		v, err := dictMethod(d, "items").Call(nil, nil)
		if err != nil {
			return nil, err
		}
		return newGen(v.(*Iter).items), nil
	case "dictsort":
		d, ok := x.(*Dict)
		if !ok {
			return nil, errf("dictsort needs a mapping")
		}
		keys := append([]string(nil), d.keys...)
		byValue := str(arg(args, kwargs, 2, "by", "key")) == "value"
		caseSens := truth(arg(args, kwargs, 0, "case_sensitive", false))
		rev := truth(arg(args, kwargs, 3, "reverse", false))
		var sortErr error
		sort.SliceStable(keys, func(i, j int) bool {
			var a, b = d.keyOf(keys[i]), d.keyOf(keys[j])
			if byValue {
				a, b = d.m[keys[i]], d.m[keys[j]]
			}
			c, err := order(sortKey(a, caseSens), sortKey(b, caseSens))
			if err != nil {
				sortErr = err
			}
			if rev {
				return c > 0
			}
			return c < 0
		})
		if sortErr != nil {
			return nil, sortErr
		}
		out := &List{}
		for _, k := range keys {
			out.Items = append(out.Items, &List{Items: []Value{d.keyOf(k), d.m[k]}, Tuple: true})
		}
		return out, nil
	case "first", "last":
		if it, ok := x.(*Iter); ok && name == "last" && !it.isView() {
			return nil, errf("'%s' object is not reversible", it.kind)
		}
		items, err := iterate(x)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return Undefined{Name: "first item"}, nil
		}
		if name == "first" {
			return items[0], nil
		}
		return items[len(items)-1], nil

	case "reverse":
		if sv, ok := x.(string); ok {
			rs := []rune(sv)
			for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
				rs[i], rs[j] = rs[j], rs[i]
			}
			return string(rs), nil
		}
		gen, isGen := x.(*Iter)
		isGen = isGen && !gen.isView()
		items, err := iterate(x)
		if err != nil {
			return nil, err
		}
		rev := make([]Value, len(items))
		for i, it := range items {
			rev[len(items)-1-i] = it
		}
		if isGen {
			return &List{Items: rev}, nil // reversed() fails on a generator; jinja falls back to a list
		}
		return &Iter{items: rev, kind: "list_reverseiterator"}, nil
	case "int":
		def := arg(args, kwargs, 0, "default", int64(0))
		switch v := x.(type) {
		case int64, *big.Int:
			return v, nil
		case bool:
			if v {
				return int64(1), nil
			}
			return int64(0), nil
		case float64:
			if math.IsInf(v, 0) || math.IsNaN(v) {
				return def, nil
			}
			bf := new(big.Float).SetFloat64(math.Trunc(v))
			bi, _ := bf.Int(nil)
			return normInt(bi), nil
		case string:
			t := strings.TrimFunc(v, pyIsSpace)
			if n, err := strconv.ParseInt(strings.ReplaceAll(t, "_", ""), 10, 64); err == nil {
				return n, nil
			}
			if f, err := strconv.ParseFloat(t, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return int64(f), nil
			}
			return def, nil
		}
		return def, nil
	case "float":
		def := arg(args, kwargs, 0, "default", 0.0)
		switch v := x.(type) {
		case string:
			f, err := strconv.ParseFloat(strings.TrimFunc(v, pyIsSpace), 64)
			if err != nil {
				return def, nil
			}
			return f, nil
		}
		if f, ok := toFloat(x); ok {
			return f, nil
		}
		return def, nil
	case "abs":
		if bv, ok := x.(bool); ok {
			x = map[bool]int64{false: 0, true: 1}[bv]
		}
		switch v := x.(type) {
		case int64:
			if v < 0 {
				return unop("-", v)
			}
			return v, nil
		case *big.Int:
			return new(big.Int).Abs(v), nil
		case float64:
			return math.Abs(v), nil
		}
		return nil, errf("bad operand type for abs(): '%s'", typeName(x))
	case "round":
		f, ok := toFloat(x)
		if !ok {
			return nil, errf("round needs a number")
		}
		prec, err := intArg(args, 0, 0)
		if err != nil {
			return nil, err
		}
		method := str(arg(args, kwargs, 1, "method", "common"))
		if _, isFloat := x.(float64); !isFloat && method == "common" && prec >= 0 {
			if bv, ok := x.(bool); ok {
				return map[bool]int64{false: 0, true: 1}[bv], nil
			}
			return x, nil // Python's round of an int is that int
		}
		p := math.Pow(10, float64(prec))
		switch method {
		case "ceil":
			return math.Ceil(f*p) / p, nil
		case "floor":
			return math.Floor(f*p) / p, nil
		}
		return math.RoundToEven(f*p) / p, nil
	case "indent":
		if _, ok := x.(string); !ok {
			return nil, errf("indent needs a string, not %s", typeName(x))
		}
		return indent(str(x), args, kwargs)
	case "center":
		w, err := intArg(args, 0, 80)
		if err != nil {
			return nil, err
		}
		sv := str(x)
		n := runeLen(sv)
		if w <= n {
			return sv, nil
		}
		marg := w - n
		left := marg/2 + (marg & w & 1) // CPython's str.center
		return strings.Repeat(" ", left) + sv + strings.Repeat(" ", w-n-left), nil
	case "wordcount":
		// jinja counts matches of \w+.
		n, in := int64(0), false
		for _, r := range str(x) {
			w := r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsNumber(r) || unicode.Is(unicode.Mn, r)
			if w && !in {
				n++
			}
			in = w
		}
		return n, nil
	case "unique":
		items, err := iterate(x)
		if err != nil {
			return nil, err
		}
		caseSens := truth(arg(args, kwargs, 0, "case_sensitive", false))
		attr := arg(args, kwargs, 1, "attribute", nil)
		seen := make(map[string]bool, len(items))
		var out []Value
		for _, it := range items {
			k := it
			if attr != nil {
				if k, err = getItemOrAttr(it, attr); err != nil {
					return nil, err
				}
			}
			key, err := dictKey(sortKey(k, caseSens))
			if err != nil {
				return nil, err
			}
			if !seen[key] {
				seen[key] = true
				out = append(out, it)
			}
		}
		return newGen(out), nil
	case "sort":
		items, err := iterate(x)
		if err != nil {
			return nil, err
		}
		rev := truth(arg(args, kwargs, 0, "reverse", false))
		caseSens := truth(arg(args, kwargs, 1, "case_sensitive", false))
		attr := arg(args, kwargs, 2, "attribute", nil)
		keys := make([]Value, len(items))
		for i, it := range items {
			k := it
			if attr != nil {
				if k, err = getItemOrAttr(it, attr); err != nil {
					return nil, err
				}
			}
			keys[i] = sortKey(k, caseSens)
		}
		idx := make([]int, len(items))
		for i := range idx {
			idx[i] = i
		}
		var sortErr error
		sort.SliceStable(idx, func(a, b int) bool {
			c, err := order(keys[idx[a]], keys[idx[b]])
			if err != nil {
				sortErr = err
			}
			if rev {
				return c > 0
			}
			return c < 0
		})
		if sortErr != nil {
			return nil, sortErr
		}
		out := &List{Items: make([]Value, len(items))}
		for i, j := range idx {
			out.Items[i] = items[j]
		}
		return out, nil
	case "sum", "min", "max":
		items, err := iterate(x)
		if err != nil {
			return nil, err
		}
		attr := arg(args, kwargs, -1, "attribute", nil)
		if attr != nil {
			items = append([]Value(nil), items...) // never modify the input
			for i, it := range items {
				if items[i], err = getItemOrAttr(it, attr); err != nil {
					return nil, err
				}
			}
		}
		if name == "sum" {
			total := arg(args, kwargs, 1, "start", int64(0))
			for _, it := range items {
				if total, err = binop("+", total, it); err != nil {
					return nil, err
				}
			}
			return total, nil
		}
		if len(items) == 0 {
			return Undefined{Name: name}, nil
		}
		best := items[0]
		for _, it := range items[1:] {
			c, err := order(sortKey(it, false), sortKey(best, false))
			if err != nil {
				return nil, err
			}
			if (name == "min" && c < 0) || (name == "max" && c > 0) {
				best = it
			}
		}
		return best, nil
	case "map":
		if !truth(x) {
			return newGen(nil), nil
		}
		items, err := iterate(x)
		if err != nil {
			return nil, err
		}
		out := &List{Items: make([]Value, len(items))}
		if attr, ok := kwargs.Get("attribute"); ok {
			def, hasDef := kwargs.Get("default")
			for i, it := range items {
				v, err := getItemOrAttr(it, attr)
				if err != nil {
					return nil, err
				}
				if _, undef := v.(Undefined); undef && hasDef {
					v = def
				}
				out.Items[i] = v
			}
			return newGen(out.Items), nil
		}
		if len(args) == 0 {
			return nil, errf("map requires a filter argument")
		}
		fname := str(args[0])
		for i, it := range items {
			if out.Items[i], err = r.filter(fname, it, args[1:], kwargs); err != nil {
				return nil, err
			}
		}
		return newGen(out.Items), nil
	case "select", "reject", "selectattr", "rejectattr":
		if !truth(x) {
			return newGen(nil), nil
		}
		items, err := iterate(x)
		if err != nil {
			return nil, err
		}
		useAttr := strings.HasSuffix(name, "attr")
		want := strings.HasPrefix(name, "select")
		rest := args
		var attr Value
		if useAttr {
			if len(rest) == 0 {
				return nil, errf("%s needs an attribute", name)
			}
			attr, rest = rest[0], rest[1:]
		}
		out := &List{}
		for _, it := range items {
			v := it
			if useAttr {
				if v, err = getItemOrAttr(it, attr); err != nil {
					return nil, err
				}
			}
			var ok bool
			if len(rest) == 0 {
				ok = truth(v)
			} else if ok, err = r.applyTest(str(rest[0]), v, rest[1:]); err != nil {
				return nil, err
			}
			if ok == want {
				out.Items = append(out.Items, it)
			}
		}
		return newGen(out.Items), nil
	case "attr":
		if len(args) != 1 {
			return nil, errf("attr needs one argument")
		}
		return getAttr(x, str(args[0]))
	case "batch":
		n, err := intArg(args, 0, 1)
		if err != nil || n <= 0 {
			return nil, errf("batch needs a positive size")
		}
		items, err := iterate(x)
		if err != nil {
			return nil, err
		}
		out := &List{}
		for i := 0; i < len(items); i += n {
			end := min(i+n, len(items))
			b := &List{Items: append([]Value(nil), items[i:end]...)}
			if fill := arg(args, kwargs, 1, "fill_with", nil); fill != nil {
				for len(b.Items) < n {
					b.Items = append(b.Items, fill)
				}
			}
			out.Items = append(out.Items, b)
		}
		return newGen(out.Items), nil
	case "format":
		return nil, errf("the format filter is not supported")
	}
	return nil, errf("no filter named '%s'", name)
}

func sortKey(v Value, caseSensitive bool) Value {
	if s, ok := v.(string); ok && !caseSensitive {
		return strings.ToLower(s)
	}
	return v
}

// getItemOrAttr resolves a filter's attribute argument, which may be dotted.
func getItemOrAttr(v Value, attr Value) (Value, error) {
	if n, ok := attr.(int64); ok {
		return getItem(v, n)
	}
	var err error
	for _, part := range strings.Split(str(attr), ".") {
		if n, convErr := strconv.ParseInt(part, 10, 64); convErr == nil {
			v, err = getItem(v, n)
		} else {
			v, err = getItem(v, part)
		}
		if err != nil {
			return nil, err
		}
	}
	return v, nil
}

func indent(s string, args []Value, kwargs *Dict) (Value, error) {
	width := arg(args, kwargs, 0, "width", int64(4))
	first := truth(arg(args, kwargs, 1, "first", false))
	blank := truth(arg(args, kwargs, 2, "blank", false))
	var pad string
	switch w := width.(type) {
	case string:
		pad = w
	case int64:
		pad = strings.Repeat(" ", int(max(w, 0)))
	default:
		return nil, errf("indent width must be int or str")
	}
	nl := "\n"
	if strings.HasSuffix(s, "\n") {
		s += pad
		s = strings.TrimSuffix(s, pad)
	}
	lines := strings.Split(s, "\n")
	for i := 1; i < len(lines); i++ {
		if blank || strings.TrimFunc(lines[i], pyIsSpace) != "" {
			lines[i] = pad + lines[i]
		}
	}
	out := strings.Join(lines, nl)
	if first {
		out = pad + out
	}
	return out, nil
}

func tojson(x Value, args []Value, kwargs *Dict) (Value, error) {
	o := jsonOpts{itemSep: ", ", keySep: ": "}
	if v := arg(args, kwargs, 0, "ensure_ascii", false); truth(v) {
		o.ensureASCII = true
	}
	if v := arg(args, kwargs, 1, "indent", nil); v != nil {
		o.hasIndent = true
		o.itemSep = ","
		switch w := v.(type) {
		case int64:
			o.indent = strings.Repeat(" ", int(max(w, 0)))
		case string:
			o.indent = w
		default:
			return nil, errf("indent must be int or str")
		}
	}
	if v := arg(args, kwargs, 2, "separators", nil); v != nil {
		l, ok := v.(*List)
		if !ok || len(l.Items) != 2 {
			return nil, errf("separators must be a pair")
		}
		o.itemSep, o.keySep = str(l.Items[0]), str(l.Items[1])
	}
	o.sortKeys = truth(arg(args, kwargs, 3, "sort_keys", false))
	var b strings.Builder
	if err := dumpJSON(&b, x, &o, 0); err != nil {
		return nil, &Error{Msg: err.Error()}
	}
	return b.String(), nil
}

func (r *renderer) applyTest(name string, x Value, args []Value) (bool, error) {
	x = unmark(x)
	for i := range args {
		args[i] = unmark(args[i])
	}
	arg0 := func() (Value, error) {
		if len(args) == 0 {
			return nil, errf("test '%s' needs an argument", name)
		}
		return args[0], nil
	}
	switch name {
	case "defined":
		_, u := x.(Undefined)
		return !u, nil
	case "undefined":
		_, u := x.(Undefined)
		return u, nil
	case "none":
		return x == nil, nil
	case "true":
		b, ok := x.(bool)
		return ok && b, nil
	case "false":
		b, ok := x.(bool)
		return ok && !b, nil
	case "boolean":
		_, ok := x.(bool)
		return ok, nil
	case "string":
		_, ok := x.(string)
		return ok, nil
	case "number":
		return isNumber(x), nil
	case "integer":
		switch x.(type) {
		case int64, *big.Int:
			return true, nil
		}
		return false, nil
	case "float":
		_, ok := x.(float64)
		return ok, nil
	case "mapping":
		_, ok := x.(*Dict)
		return ok, nil
	case "iterable":
		switch x.(type) {
		case string, *List, *Dict, Undefined, *Iter:
			return true, nil
		}
		return false, nil
	case "sequence":
		switch x.(type) {
		case string, *List, *Dict, Undefined:
			return true, nil
		}
		return false, nil
	case "callable":
		switch x.(type) {
		case *Func, *Macro:
			return true, nil
		}
		return false, nil
	case "odd", "even":
		m, err := binop("%", x, int64(2))
		if err != nil {
			return false, err
		}
		if name == "odd" {
			return equal(m, int64(1)), nil
		}
		return equal(m, int64(0)), nil
	case "divisibleby":
		a, err := arg0()
		if err != nil {
			return false, err
		}
		m, err := binop("%", x, a)
		if err != nil {
			return false, err
		}
		return equal(m, int64(0)), nil
	case "eq", "equalto", "==":
		a, err := arg0()
		if err != nil {
			return false, err
		}
		return equal(x, a), nil
	case "ne", "!=":
		a, err := arg0()
		if err != nil {
			return false, err
		}
		return !equal(x, a), nil
	case "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=":
		a, err := arg0()
		if err != nil {
			return false, err
		}
		op := map[string]string{"lt": "<", "lessthan": "<", "le": "<=", "gt": ">", "greaterthan": ">", "ge": ">="}[name]
		if op == "" {
			op = name
		}
		return compare(op, x, a)
	case "in":
		a, err := arg0()
		if err != nil {
			return false, err
		}
		return contains(a, x)
	case "sameas":
		a, err := arg0()
		if err != nil {
			return false, err
		}
		switch a.(type) {
		case nil, bool:
			return x == a, nil
		}
		return fmt.Sprintf("%p", x) == fmt.Sprintf("%p", a) && equal(x, a), nil
	case "lower", "upper":
		v, err := strMethod(str(x), "is"+name).Call(nil, nil)
		if err != nil {
			return false, err
		}
		return v.(bool), nil
	case "escaped":
		return false, nil
	}
	return false, errf("no test named '%s'", name)
}

// strftime formats t with C strftime directives.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			fmt.Fprintf(&b, "%02d", h)
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case 'F':
			b.WriteString(t.Format("2006-01-02"))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(f[i])
		}
	}
	return b.String()
}

// jinjaTitle is jinja's title filter (not str.title): a word starts after a
// run of '-', whitespace, '(', '{', '[' or '<'; its first character is
// upper-cased and the rest lower-cased.
func jinjaTitle(s string) string {
	sep := func(r rune) bool { return r == '-' || r == '(' || r == '{' || r == '[' || r == '<' || pyIsSpace(r) }
	var b strings.Builder
	start := true
	for _, r := range s {
		switch {
		case sep(r):
			b.WriteRune(r)
			start = true
		case start:
			b.WriteString(strings.ToUpper(string(r)))
			start = false
		default:
			b.WriteString(strings.ToLower(string(r)))
		}
	}
	return b.String()
}
