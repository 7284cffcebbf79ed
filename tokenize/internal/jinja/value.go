package jinja

import (
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"
	"weak"
)

// Value is a template value. Its dynamic type is one of:
//
//	nil          Python None
//	Undefined    a missing variable, attribute or item
//	bool         Python bool
//	int64        Python int that fits 64 bits
//	*big.Int     Python int that does not
//	float64      Python float
//	string       Python str (UTF-8; indexed by code point)
//	*List        Python list or tuple
//	*Dict        Python dict with string keys, in insertion order
//	*Namespace   the object made by namespace()
//	*Macro, *Func, *LoopInfo, *Cycler: callables and loop state
//
// Values given to Render are never modified by rendering.
type Value = any

// Undefined is the value of a missing variable, attribute or item. Name says
// what was missing, for error messages.
type Undefined struct{ Name string }

// List is a Python list, or a tuple when Tuple is set.
type List struct {
	Items []Value
	Tuple bool
}

// Dict is a Python dict with string keys that keeps insertion order. The zero
// value is an empty dict ready to use.
type Dict struct {
	keys []string
	m    map[string]Value
	// orig keeps the first key value inserted under an encoded non-string
	// key (False stays False even though 0 finds it), as Python does.
	orig map[string]Value
	// derived is what a caller computed from this dict (SetDerived).
	derived atomic.Pointer[derivation]
	// self is a weak pointer to the dict itself, made once (weakRef).
	self atomic.Pointer[weak.Pointer[Dict]]
}

// weakRef returns a weak pointer to d. It is made on first use and kept:
// weak.Make locks d's memory span, and a warm turn's render asks for one
// per message it replays.
func (d *Dict) weakRef() weak.Pointer[Dict] {
	if p := d.self.Load(); p != nil {
		return *p
	}
	w := weak.Make(d) // equal to any other made from d
	d.self.CompareAndSwap(nil, &w)
	return w
}

// derivation is a value computed from a dict, under its caller's key.
type derivation struct {
	key any
	val Value
}

// Derived returns the value attached to d by SetDerived under key. A
// caller that derives something from a dict it treats as immutable (the
// conversation form of a request's message) keeps it on the dict: a dict
// the JSON cache hands out again brings its derivation along, and the
// derivation is collected with the dict. Safe for concurrent use.
func (d *Dict) Derived(key any) (Value, bool) {
	if p := d.derived.Load(); p != nil && p.key == key {
		return p.val, true
	}
	return nil, false
}

// SetDerived attaches v to d under key (a comparable value of the
// caller's own type), replacing what was attached before under any key:
// a dict holds one derivation. v must be a pure function of d and key,
// since concurrent callers may each compute and set it. Safe for
// concurrent use.
func (d *Dict) SetDerived(key any, v Value) {
	d.derived.Store(&derivation{key, v})
}

// setKey sets v under a Python key of any hashable type.
func (d *Dict) setKey(k Value, v Value) error {
	ks, err := dictKey(k)
	if err != nil {
		return err
	}
	if _, isStr := k.(string); !isStr {
		if _, exists := d.m[ks]; !exists {
			if d.orig == nil {
				d.orig = make(map[string]Value)
			}
			d.orig[ks] = k
		}
	}
	d.Set(ks, v)
	return nil
}

// keyOf returns the Python value of internal key k.
func (d *Dict) keyOf(k string) Value {
	if o, ok := d.orig[k]; ok {
		return o
	}
	return keyValue(k)
}

// NewDict returns an empty dict with room for n keys.
func NewDict(n int) *Dict {
	return &Dict{keys: make([]string, 0, n), m: make(map[string]Value, n)}
}

// Set sets key to v; a new key goes last, an existing key keeps its place.
func (d *Dict) Set(key string, v Value) {
	if d.m == nil {
		d.m = make(map[string]Value)
	}
	if _, ok := d.m[key]; !ok {
		d.keys = append(d.keys, key)
	}
	d.m[key] = v
}

// Get returns the value under key and whether it was present.
func (d *Dict) Get(key string) (Value, bool) {
	if d == nil {
		return nil, false
	}
	v, ok := d.m[key]
	return v, ok
}

// Delete removes key, keeping the order of the others.
func (d *Dict) Delete(key string) {
	if _, ok := d.m[key]; !ok {
		return
	}
	delete(d.m, key)
	for i, k := range d.keys {
		if k == key {
			d.keys = append(d.keys[:i:i], d.keys[i+1:]...)
			break
		}
	}
}

// Keys returns the keys in order. The caller must not modify the slice.
func (d *Dict) Keys() []string {
	if d == nil {
		return nil
	}
	return d.keys
}

// Len returns the number of keys.
func (d *Dict) Len() int {
	if d == nil {
		return 0
	}
	return len(d.keys)
}

// Clone returns a shallow copy of d.
func (d *Dict) Clone() *Dict {
	c := NewDict(d.Len())
	for _, k := range d.Keys() {
		c.Set(k, d.m[k])
	}
	for k, o := range d.orig {
		if c.orig == nil {
			c.orig = make(map[string]Value, len(d.orig))
		}
		c.orig[k] = o
	}
	return c
}

// keyPrefix marks an internal dict key that encodes a non-string Python key
// (an int, float, bool or None, as template dict literals may use). Keys
// from JSON are always strings; a JSON key that itself starts with this
// prefix would be read back as the encoded value.
const keyPrefix = "\x00\x01k"

// dictKey encodes a hashable Python value as an internal dict key, folding
// equal numbers (True, 1 and 1.0) together as Python does.
func dictKey(v Value) (string, error) {
	v = unmark(v)
	switch x := v.(type) {
	case string:
		return x, nil
	case nil:
		return keyPrefix + "n", nil
	case Undefined:
		return keyPrefix + "u", nil
	case bool, int64, *big.Int:
		b, _ := bigOf(x)
		return keyPrefix + "i" + b.String(), nil
	case float64:
		if x == math.Trunc(x) && !math.IsInf(x, 0) {
			b, _ := new(big.Float).SetFloat64(x).Int(nil)
			return keyPrefix + "i" + b.String(), nil
		}
		return keyPrefix + "f" + strconv.FormatFloat(x, 'g', -1, 64), nil
	case *List:
		if x.Tuple {
			for _, it := range x.Items {
				if _, err := dictKey(it); err != nil {
					return "", err
				}
			}
			return keyPrefix + "t" + repr(x), nil
		}
	}
	return "", errf("unhashable type: '%s'", typeName(v))
}

// keyValue decodes an internal dict key back to its Python value.
func keyValue(k string) Value {
	if !strings.HasPrefix(k, keyPrefix) {
		return k
	}
	rest := k[len(keyPrefix):]
	switch {
	case rest == "n":
		return nil
	case strings.HasPrefix(rest, "i"):
		b, ok := new(big.Int).SetString(rest[1:], 10)
		if ok {
			return normInt(b)
		}
	case strings.HasPrefix(rest, "f"):
		if f, err := strconv.ParseFloat(rest[1:], 64); err == nil {
			return f
		}
	}
	return k
}

// Markup is a string marked safe by the safe or escape filters. Adding a
// plain string to it HTML-escapes the plain string first, as markupsafe does;
// everywhere else it behaves as the string it holds.
type Markup string

// unmark returns the plain string behind a Markup, or v unchanged.
func unmark(v Value) Value {
	if m, ok := v.(Markup); ok {
		return string(m)
	}
	return v
}

// escapeHTML escapes as markupsafe.escape does.
func escapeHTML(s string) string {
	if !strings.ContainsAny(s, "&<>'\"") {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '\'':
			b.WriteString("&#39;")
		case '"':
			b.WriteString("&#34;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Namespace is the mutable object made by namespace(...).
type Namespace struct{ attrs *Dict }

// Func is a built-in callable, such as a bound string method.
type Func struct {
	Name string
	Call func(args []Value, kwargs *Dict) (Value, error)
}

// Iter is a Python iterator or dict view made during rendering: the
// generators of map, select and friends ("generator"), reversed lists
// ("list_reverseiterator"), and dict.items()/keys()/values() views. A
// generator or iterator is consumed by its first iteration; views are not.
// It has no len() unless it is a view, is always true unless it is an empty
// view, and is not JSON serializable, as in Python.
type Iter struct {
	items []Value
	kind  string
	used  bool
}

func (it *Iter) isView() bool { return strings.HasPrefix(it.kind, "dict_") }

func newGen(items []Value) *Iter { return &Iter{items: items, kind: "generator"} }

func typeName(v Value) string {
	switch v := v.(type) {
	case nil:
		return "NoneType"
	case Undefined:
		return "Undefined"
	case bool:
		return "bool"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case Markup:
		return "Markup"
	case *List:
		if v.Tuple {
			return "tuple"
		}
		return "list"
	case *Dict:
		return "dict"
	case *Namespace:
		return "Namespace"
	case *Macro:
		return "Macro"
	case *Func:
		return "builtin_function_or_method"
	case *LoopInfo:
		return "LoopContext"
	case *Iter:
		return v.kind
	}
	return fmt.Sprintf("%T", v)
}

// truth reports Python truthiness.
func truth(v Value) bool {
	v = unmark(v)
	switch x := v.(type) {
	case nil, Undefined:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case *big.Int:
		return x.Sign() != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case *List:
		return len(x.Items) > 0
	case *Dict:
		return x.Len() > 0
	case *Iter:
		return !x.isView() || len(x.items) > 0
	}
	return true
}

// pyFloatRepr formats f as Python's repr(float) does.
func pyFloatRepr(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	return formatShortest(f)
}

// formatShortest writes the shortest round-tripping digits of a finite f with
// Python's rule: positional notation for exponents in [-4, 16), else
// scientific with at least two exponent digits.
func formatShortest(f float64) string {
	s := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	neg := false
	if s[0] == '-' {
		neg = true
		s = s[1:]
	}
	epos := strings.IndexByte(s, 'e')
	mant, expStr := s[:epos], s[epos+1:]
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	if exp >= -4 && exp < 16 {
		switch {
		case exp < 0:
			b.WriteString("0.")
			b.WriteString(strings.Repeat("0", -exp-1))
			b.WriteString(digits)
		case exp+1 >= len(digits):
			b.WriteString(digits)
			b.WriteString(strings.Repeat("0", exp+1-len(digits)))
			b.WriteString(".0")
		default:
			b.WriteString(digits[:exp+1])
			b.WriteByte('.')
			b.WriteString(digits[exp+1:])
		}
		return b.String()
	}
	b.WriteByte(digits[0])
	if len(digits) > 1 {
		b.WriteByte('.')
		b.WriteString(digits[1:])
	}
	b.WriteByte('e')
	if exp < 0 {
		b.WriteByte('-')
		exp = -exp
	} else {
		b.WriteByte('+')
	}
	if exp < 10 {
		b.WriteByte('0')
	}
	b.WriteString(strconv.Itoa(exp))
	return b.String()
}

// str converts v as Python's str() does.
func str(v Value) string {
	switch x := v.(type) {
	case string:
		return x
	case Markup:
		return string(x)
	case Undefined:
		return ""
	}
	var b strings.Builder
	writeRepr(&b, v, false)
	return b.String()
}

// repr converts v as Python's repr() does.
func repr(v Value) string {
	var b strings.Builder
	writeRepr(&b, v, true)
	return b.String()
}

func writeRepr(b *strings.Builder, v Value, quote bool) { writeReprIn(b, v, quote, nil) }

// writeReprIn is writeRepr inside the lists and dicts of open, whose repr
// is under way: one of them met again prints as [...] or {...}, as
// Python's repr does. A namespace can hold itself (set ns.x = ns); without
// the check its repr would recurse until the stack ran out.
func writeReprIn(b *strings.Builder, v Value, quote bool, open []any) {
	switch x := v.(type) {
	case *List, *Dict:
		if slices.Contains(open, v) {
			if _, ok := x.(*List); ok {
				b.WriteString("[...]")
			} else {
				b.WriteString("{...}")
			}
			return
		}
		open = append(open, v)
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("None")
	case Undefined:
		if quote {
			b.WriteString("Undefined")
		}
	case bool:
		if x {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case *big.Int:
		b.WriteString(x.String())
	case float64:
		b.WriteString(pyFloatRepr(x))
	case string:
		if quote {
			writeStrRepr(b, x)
		} else {
			b.WriteString(x)
		}
	case Markup:
		if quote {
			b.WriteString("Markup(")
			writeStrRepr(b, string(x))
			b.WriteByte(')')
		} else {
			b.WriteString(string(x))
		}
	case *List:
		if x.Tuple {
			b.WriteByte('(')
		} else {
			b.WriteByte('[')
		}
		for i, it := range x.Items {
			if i > 0 {
				b.WriteString(", ")
			}
			writeReprIn(b, it, true, open)
		}
		if x.Tuple {
			if len(x.Items) == 1 {
				b.WriteByte(',')
			}
			b.WriteByte(')')
		} else {
			b.WriteByte(']')
		}
	case *Dict:
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeReprIn(b, x.keyOf(k), true, open)
			b.WriteString(": ")
			writeReprIn(b, x.m[k], true, open)
		}
		b.WriteByte('}')
	case *Namespace:
		b.WriteString("<Namespace ")
		writeReprIn(b, x.attrs, true, open)
		b.WriteByte('>')
	case *Macro:
		b.WriteString("<Macro '" + x.name + "'>")
	case *Func:
		b.WriteString("<built-in method " + x.Name + ">")
	case *LoopInfo:
		b.WriteString("<LoopContext>")
	case *Iter:
		if x.isView() {
			b.WriteString(x.kind + "(")
			writeReprIn(b, &List{Items: x.items}, true, open)
			b.WriteByte(')')
		} else {
			b.WriteString("<" + x.kind + " object>")
		}
	default:
		fmt.Fprintf(b, "%v", x)
	}
}

// writeStrRepr writes s quoted as Python's repr(str) does.
func writeStrRepr(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case r >= 0x80 && !pyPrintable(r):
			switch {
			case r <= 0xff:
				fmt.Fprintf(b, `\x%02x`, r)
			case r <= 0xffff:
				fmt.Fprintf(b, `\u%04x`, r)
			default:
				fmt.Fprintf(b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
}

// runeLen is Python's len(str).
func runeLen(s string) int { return utf8.RuneCountInString(s) }

// toFloat converts an int or float to float64.
func toFloat(v Value) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case *big.Int:
		f, _ := new(big.Float).SetInt(x).Float64()
		return f, true
	case float64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// smallInt converts an int64 or bool to an int64.
func smallInt(v Value) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// bigOf converts an int or bool to a big.Int.
func bigOf(v Value) (*big.Int, bool) {
	if x, ok := v.(*big.Int); ok {
		return x, true
	}
	if n, ok := smallInt(v); ok {
		return big.NewInt(n), true
	}
	return nil, false
}

// normInt returns a *big.Int as int64 when it fits.
func normInt(x *big.Int) Value {
	if x.IsInt64() {
		return x.Int64()
	}
	return x
}
