package jinja

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

func argStr(args []Value, i int, name string) (string, bool, error) {
	if i >= len(args) || args[i] == nil {
		return "", false, nil
	}
	s, ok := unmark(args[i]).(string)
	if !ok {
		return "", false, errf("%s arg must be None or str", name)
	}
	return s, true, nil
}

func pyStrip(s, chars string, hasChars bool, left, right bool) string {
	if !hasChars {
		if left {
			s = strings.TrimLeftFunc(s, pyIsSpace)
		}
		if right {
			s = strings.TrimRightFunc(s, pyIsSpace)
		}
		return s
	}
	in := func(r rune) bool { return strings.ContainsRune(chars, r) }
	if left {
		s = strings.TrimLeftFunc(s, in)
	}
	if right {
		s = strings.TrimRightFunc(s, in)
	}
	return s
}

// pySplit is str.split.
func pySplit(s, sep string, hasSep bool, maxsplit int) ([]Value, error) {
	var parts []string
	if hasSep {
		if sep == "" {
			return nil, errf("empty separator")
		}
		n := -1
		if maxsplit >= 0 {
			n = maxsplit + 1
		}
		parts = strings.SplitN(s, sep, n)
	} else {
		rest := strings.TrimLeftFunc(s, pyIsSpace)
		for rest != "" {
			if maxsplit >= 0 && len(parts) == maxsplit {
				parts = append(parts, strings.TrimRightFunc(rest, pyIsSpace))
				break
			}
			i := strings.IndexFunc(rest, pyIsSpace)
			if i < 0 {
				parts = append(parts, rest)
				break
			}
			parts = append(parts, rest[:i])
			rest = strings.TrimLeftFunc(rest[i:], pyIsSpace)
		}
	}
	out := make([]Value, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out, nil
}

// pyRsplit is str.rsplit with a separator.
func pyRsplit(s, sep string, maxsplit int) ([]Value, error) {
	if sep == "" {
		return nil, errf("empty separator")
	}
	var parts []string
	for maxsplit < 0 || len(parts) < maxsplit {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		parts = append(parts, s[i+len(sep):])
		s = s[:i]
	}
	parts = append(parts, s)
	out := make([]Value, len(parts))
	for i := range parts {
		out[i] = parts[len(parts)-1-i]
	}
	return out, nil
}

func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		if unicode.IsLetter(r) {
			if prevCased {
				b.WriteRune(unicode.ToLower(r))
			} else {
				b.WriteRune(unicode.ToTitle(r))
			}
			prevCased = true
		} else {
			b.WriteRune(r)
			prevCased = false
		}
	}
	return b.String()
}

func pyCapitalize(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	if size == 0 {
		return s
	}
	return string(unicode.ToTitle(r)) + strings.ToLower(s[size:])
}

func intArg(args []Value, i int, def int) (int, error) {
	if i >= len(args) || args[i] == nil {
		return def, nil
	}
	n, ok := indexOf(args[i])
	if !ok {
		return 0, errf("an integer is required")
	}
	return int(n), nil
}

// prefixes returns the one string or the tuple of strings given to
// startswith/endswith.
func prefixes(a Value) ([]string, error) {
	switch x := a.(type) {
	case string:
		return []string{x}, nil
	case *List:
		out := make([]string, 0, len(x.Items))
		for _, it := range x.Items {
			s, ok := it.(string)
			if !ok {
				return nil, errf("tuple for startswith must only contain str")
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, errf("startswith first arg must be str or a tuple of str")
}

func strMethod(s, name string) *Func {
	m := func(call func(args []Value, kwargs *Dict) (Value, error)) *Func {
		return &Func{Name: "str." + name, Call: call}
	}
	switch name {
	case "strip", "lstrip", "rstrip":
		return m(func(args []Value, _ *Dict) (Value, error) {
			chars, has, err := argStr(args, 0, name)
			if err != nil {
				return nil, err
			}
			return pyStrip(s, chars, has, name != "rstrip", name != "lstrip"), nil
		})
	case "split", "rsplit":
		return m(func(args []Value, kwargs *Dict) (Value, error) {
			if v, ok := kwargs.Get("sep"); ok {
				args = append([]Value{v}, args...)
			}
			sep, has, err := argStr(args, 0, "sep")
			if err != nil {
				return nil, err
			}
			maxsplit, err := intArg(args, 1, -1)
			if err != nil {
				return nil, err
			}
			if v, ok := kwargs.Get("maxsplit"); ok {
				if maxsplit, err = intArg([]Value{v}, 0, -1); err != nil {
					return nil, err
				}
			}
			var items []Value
			if name == "rsplit" && has {
				items, err = pyRsplit(s, sep, maxsplit)
			} else {
				items, err = pySplit(s, sep, has, maxsplit)
			}
			if err != nil {
				return nil, err
			}
			return &List{Items: items}, nil
		})
	case "startswith", "endswith":
		return m(func(args []Value, _ *Dict) (Value, error) {
			if len(args) == 0 {
				return nil, errf("%s takes at least 1 argument", name)
			}
			ps, err := prefixes(args[0])
			if err != nil {
				return nil, err
			}
			for _, p := range ps {
				if (name == "startswith" && strings.HasPrefix(s, p)) || (name == "endswith" && strings.HasSuffix(s, p)) {
					return true, nil
				}
			}
			return false, nil
		})
	case "upper":
		return m(func([]Value, *Dict) (Value, error) { return strings.ToUpper(s), nil })
	case "lower":
		return m(func([]Value, *Dict) (Value, error) { return strings.ToLower(s), nil })
	case "title":
		return m(func([]Value, *Dict) (Value, error) { return pyTitle(s), nil })
	case "capitalize":
		return m(func([]Value, *Dict) (Value, error) { return pyCapitalize(s), nil })
	case "replace":
		return m(func(args []Value, _ *Dict) (Value, error) {
			if len(args) < 2 {
				return nil, errf("replace expected at least 2 arguments")
			}
			old, ok1 := args[0].(string)
			nw, ok2 := args[1].(string)
			if !ok1 || !ok2 {
				return nil, errf("replace arguments must be str")
			}
			n, err := intArg(args, 2, -1)
			if err != nil {
				return nil, err
			}
			return strings.Replace(s, old, nw, n), nil
		})
	case "find", "rfind", "index", "rindex", "count":
		return m(func(args []Value, _ *Dict) (Value, error) {
			sub, has, err := argStr(args, 0, name)
			if err != nil || !has {
				return nil, errf("%s needs a str argument", name)
			}
			switch name {
			case "count":
				if sub == "" {
					return int64(runeLen(s) + 1), nil
				}
				return int64(strings.Count(s, sub)), nil
			case "find", "index":
				i := strings.Index(s, sub)
				if i < 0 {
					if name == "index" {
						return nil, errf("substring not found")
					}
					return int64(-1), nil
				}
				return int64(runeLen(s[:i])), nil
			default:
				i := strings.LastIndex(s, sub)
				if i < 0 {
					if name == "rindex" {
						return nil, errf("substring not found")
					}
					return int64(-1), nil
				}
				return int64(runeLen(s[:i])), nil
			}
		})
	case "join":
		return m(func(args []Value, _ *Dict) (Value, error) {
			if len(args) != 1 {
				return nil, errf("join takes exactly one argument")
			}
			items, err := iterate(args[0])
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			for i, it := range items {
				p, ok := it.(string)
				if !ok {
					return nil, errf("sequence item %d: expected str instance, %s found", i, typeName(it))
				}
				parts[i] = p
			}
			return strings.Join(parts, s), nil
		})
	case "splitlines":
		return m(func(args []Value, _ *Dict) (Value, error) {
			keep := len(args) > 0 && truth(args[0])
			var out []Value
			start := 0
			for i := 0; i < len(s); {
				r, size := utf8.DecodeRuneInString(s[i:])
				switch r {
				case '\r', '\n', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
					end := i + size
					if r == '\r' && end < len(s) && s[end] == '\n' {
						end++
					}
					if keep {
						out = append(out, s[start:end])
					} else {
						out = append(out, s[start:i])
					}
					start = end
					i = end
					continue
				}
				i += size
			}
			if start < len(s) {
				out = append(out, s[start:])
			}
			return &List{Items: out}, nil
		})
	case "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower":
		return m(func([]Value, *Dict) (Value, error) {
			if s == "" {
				return false, nil
			}
			cased := false
			for _, r := range s {
				var ok bool
				switch name {
				case "isdigit":
					ok = unicode.IsDigit(r)
				case "isalpha":
					ok = unicode.IsLetter(r)
				case "isalnum":
					ok = unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsNumber(r)
				case "isspace":
					ok = pyIsSpace(r)
				case "isupper":
					ok = !unicode.IsLower(r)
					cased = cased || unicode.IsUpper(r)
				case "islower":
					ok = !unicode.IsUpper(r)
					cased = cased || unicode.IsLower(r)
				}
				if !ok {
					return false, nil
				}
			}
			if name == "isupper" || name == "islower" {
				return cased, nil
			}
			return true, nil
		})
	case "format":
		return m(func(args []Value, kwargs *Dict) (Value, error) { return pyFormat(s, args, kwargs) })
	case "removeprefix":
		return m(func(args []Value, _ *Dict) (Value, error) {
			p, _, err := argStr(args, 0, name)
			return strings.TrimPrefix(s, p), err
		})
	case "removesuffix":
		return m(func(args []Value, _ *Dict) (Value, error) {
			p, _, err := argStr(args, 0, name)
			return strings.TrimSuffix(s, p), err
		})
	}
	return nil
}

func dictMethod(d *Dict, name string) *Func {
	m := func(call func(args []Value, kwargs *Dict) (Value, error)) *Func {
		return &Func{Name: "dict." + name, Call: call}
	}
	switch name {
	case "items":
		return m(func([]Value, *Dict) (Value, error) {
			out := &Iter{items: make([]Value, d.Len()), kind: "dict_items"}
			for i, k := range d.keys {
				out.items[i] = &List{Items: []Value{d.keyOf(k), d.m[k]}, Tuple: true}
			}
			return out, nil
		})
	case "keys":
		return m(func([]Value, *Dict) (Value, error) {
			out := &Iter{items: make([]Value, d.Len()), kind: "dict_keys"}
			for i, k := range d.keys {
				out.items[i] = d.keyOf(k)
			}
			return out, nil
		})
	case "values":
		return m(func([]Value, *Dict) (Value, error) {
			out := &Iter{items: make([]Value, d.Len()), kind: "dict_values"}
			for i, k := range d.keys {
				out.items[i] = d.m[k]
			}
			return out, nil
		})
	case "get":
		return m(func(args []Value, _ *Dict) (Value, error) {
			if len(args) == 0 {
				return nil, errf("get expected at least 1 argument")
			}
			k, err := dictKey(args[0])
			if err != nil {
				return nil, err
			}
			if v, ok := d.m[k]; ok {
				return v, nil
			}
			if len(args) > 1 {
				return args[1], nil
			}
			return nil, nil
		})
	case "copy":
		return m(func([]Value, *Dict) (Value, error) { return d.Clone(), nil })
	}
	return &Func{Name: "dict." + name, Call: func([]Value, *Dict) (Value, error) {
		return nil, errf("access to attribute '%s' of 'dict' object is unsafe", name)
	}}
}

func listMethod(l *List, name string) *Func {
	switch name {
	case "index":
		return &Func{Name: "list.index", Call: func(args []Value, _ *Dict) (Value, error) {
			if len(args) == 0 {
				return nil, errf("index expected 1 argument")
			}
			for i, it := range l.Items {
				if equal(it, args[0]) {
					return int64(i), nil
				}
			}
			return nil, errf("%s is not in list", repr(args[0]))
		}}
	case "count":
		return &Func{Name: "list.count", Call: func(args []Value, _ *Dict) (Value, error) {
			if len(args) == 0 {
				return nil, errf("count expected 1 argument")
			}
			n := int64(0)
			for _, it := range l.Items {
				if equal(it, args[0]) {
					n++
				}
			}
			return n, nil
		}}
	case "copy":
		return &Func{Name: "list.copy", Call: func([]Value, *Dict) (Value, error) {
			return &List{Items: append([]Value(nil), l.Items...)}, nil
		}}
	case "append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear":
		return &Func{Name: "list." + name, Call: func([]Value, *Dict) (Value, error) {
			return nil, errf("access to attribute '%s' of 'list' object is unsafe", name)
		}}
	}
	return nil
}

// pyFormat is str.format for replacement fields without format specs:
// {}, {0}, {name}, with !s and !r conversions and {{ }} escapes.
func pyFormat(s string, args []Value, kwargs *Dict) (Value, error) {
	var b strings.Builder
	auto, manual := 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '{' && i+1 < len(s) && s[i+1] == '{':
			b.WriteByte('{')
			i++
		case c == '}' && i+1 < len(s) && s[i+1] == '}':
			b.WriteByte('}')
			i++
		case c == '}':
			return nil, errf("Single '}' encountered in format string")
		case c == '{':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return nil, errf("Single '{' encountered in format string")
			}
			field := s[i+1 : i+end]
			i += end
			conv := ""
			if k := strings.IndexByte(field, '!'); k >= 0 {
				field, conv = field[:k], field[k+1:]
			}
			if strings.ContainsAny(field, ":[.{") || strings.Contains(conv, ":") {
				return nil, errf("format specs and field access are not supported")
			}
			var v Value
			switch {
			case field == "":
				if manual {
					return nil, errf("cannot switch from manual field specification to automatic field numbering")
				}
				if auto >= len(args) {
					return nil, errf("Replacement index %d out of range for positional args tuple", auto)
				}
				v = args[auto]
				auto++
			case field[0] >= '0' && field[0] <= '9':
				n := 0
				for _, d := range field {
					if d < '0' || d > '9' {
						return nil, errf("invalid format field %q", field)
					}
					n = n*10 + int(d-'0')
				}
				if auto > 0 {
					return nil, errf("cannot switch from automatic field numbering to manual field specification")
				}
				manual = true
				if n >= len(args) {
					return nil, errf("Replacement index %d out of range for positional args tuple", n)
				}
				v = args[n]
			default:
				kv, ok := kwargs.Get(field)
				if !ok {
					return nil, errf("KeyError: %q", field)
				}
				v = kv
			}
			switch conv {
			case "", "s":
				b.WriteString(str(v))
			case "r":
				b.WriteString(repr(v))
			default:
				return nil, errf("Unknown conversion specifier %s", conv)
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
