package jinja

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokKind int

const (
	tkEOF tokKind = iota
	tkData
	tkVarBegin
	tkVarEnd
	tkBlockBegin
	tkBlockEnd
	tkName
	tkString
	tkInt
	tkFloat
	tkOp
)

type token struct {
	kind tokKind
	val  string // data text, name, decoded string, operator, number text
	num  Value  // int64, *big.Int or float64 for numbers
	line int
}

// pyIsSpace is Python's str.isspace for one rune.
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

func rstripPy(s string) string { return strings.TrimRightFunc(s, pyIsSpace) }

// normalizeNewlines applies jinja2's source preparation: lines split as
// str.splitlines does and joined with "\n"; one trailing newline dropped
// (keep_trailing_newline is false).
func normalizeNewlines(src string) string {
	var b strings.Builder
	b.Grow(len(src))
	for i := 0; i < len(src); {
		r, size := utf8.DecodeRuneInString(src[i:])
		switch r {
		case '\r':
			if i+1 < len(src) && src[i+1] == '\n' {
				size = 2
			}
			b.WriteByte('\n')
		case '\n', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			b.WriteByte('\n')
		default:
			b.WriteString(src[i : i+size])
		}
		i += size
	}
	out := b.String()
	return strings.TrimSuffix(out, "\n")
}

// lex splits a template into tokens with trim_blocks and lstrip_blocks on.
func lex(src string) ([]token, error) {
	src = normalizeNewlines(src)
	var toks []token
	line := 1
	pos := 0
	lineStarting := true
	for pos < len(src) {
		// Find the next tag opener.
		next := -1
		for i := pos; i+1 < len(src); i++ {
			if src[i] == '{' && (src[i+1] == '{' || src[i+1] == '%' || src[i+1] == '#') {
				next = i
				break
			}
		}
		if next < 0 {
			toks = append(toks, token{kind: tkData, val: src[pos:], line: line})
			break
		}
		text := src[pos:next]
		kind := src[next+1]
		sign := byte(0)
		if next+2 < len(src) && (src[next+2] == '-' || src[next+2] == '+') {
			sign = src[next+2]
		}
		switch {
		case sign == '-':
			text = rstripPy(text)
		case sign != '+' && kind != '{':
			lpos := strings.LastIndexByte(text, '\n') + 1
			if lpos > 0 || lineStarting {
				rest := text[lpos:]
				if rest != "" && strings.TrimLeftFunc(rest, pyIsSpace) == "" {
					text = text[:lpos]
				}
			}
		}
		if text != "" {
			toks = append(toks, token{kind: tkData, val: text, line: line})
		}
		line += strings.Count(src[pos:next], "\n")
		pos = next + 2
		if sign != 0 {
			pos++
		}
		if kind == '#' {
			end := strings.Index(src[pos:], "#}")
			if end < 0 {
				return nil, fmt.Errorf("line %d: unclosed comment", line)
			}
			body := src[pos : pos+end]
			line += strings.Count(body, "\n")
			pos += end + 2
			if strings.HasSuffix(body, "-") {
				pos = skipSpace(src, pos, &line)
			} else if pos < len(src) && src[pos] == '\n' {
				pos++
				line++
			}
			lineStarting = pos > 0 && src[pos-1] == '\n'
			continue
		}
		begin := tkBlockBegin
		if kind == '{' {
			begin = tkVarBegin
		}
		toks = append(toks, token{kind: begin, line: line})
		var err error
		toks, pos, err = lexTag(src, pos, kind == '{', toks, &line)
		if err != nil {
			return nil, err
		}
		lineStarting = pos > 0 && src[pos-1] == '\n'
	}
	toks = append(toks, token{kind: tkEOF, line: line})
	return toks, nil
}

func skipSpace(src string, pos int, line *int) int {
	for pos < len(src) {
		r, size := utf8.DecodeRuneInString(src[pos:])
		if !pyIsSpace(r) {
			break
		}
		if r == '\n' {
			*line++
		}
		pos += size
	}
	return pos
}

// operators lists jinja's operators, longest first.
func operators() [26]string {
	return [...]string{"//", "**", "==", "!=", "<=", ">=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", "<", ">", "=", ".", ":", "|", ",", ";"}
}

// lexTag tokenises the inside of a {{ }} or {% %} tag and its closer.
func lexTag(src string, pos int, isVar bool, toks []token, line *int) ([]token, int, error) {
	depth := 0
	for {
		// whitespace
		for pos < len(src) && (src[pos] == ' ' || src[pos] == '\t' || src[pos] == '\n' || src[pos] == '\r') {
			if src[pos] == '\n' {
				*line++
			}
			pos++
		}
		if pos >= len(src) {
			return nil, 0, fmt.Errorf("line %d: unclosed tag", *line)
		}
		rest := src[pos:]
		// closers
		if depth == 0 {
			if isVar {
				if strings.HasPrefix(rest, "-}}") {
					toks = append(toks, token{kind: tkVarEnd, line: *line})
					return toks, skipSpace(src, pos+3, line), nil
				}
				if strings.HasPrefix(rest, "}}") {
					toks = append(toks, token{kind: tkVarEnd, line: *line})
					return toks, pos + 2, nil
				}
			} else {
				if strings.HasPrefix(rest, "-%}") {
					toks = append(toks, token{kind: tkBlockEnd, line: *line})
					return toks, skipSpace(src, pos+3, line), nil
				}
				if strings.HasPrefix(rest, "+%}") {
					toks = append(toks, token{kind: tkBlockEnd, line: *line})
					return toks, pos + 3, nil
				}
				if strings.HasPrefix(rest, "%}") {
					toks = append(toks, token{kind: tkBlockEnd, line: *line})
					pos += 2
					if pos < len(src) && src[pos] == '\n' {
						pos++
						*line++
					}
					return toks, pos, nil
				}
			}
		}
		c := rest[0]
		r, _ := utf8.DecodeRuneInString(rest)
		switch {
		case c == '\'' || c == '"':
			s, n, err := lexString(rest)
			if err != nil {
				return nil, 0, fmt.Errorf("line %d: %w", *line, err)
			}
			*line += strings.Count(rest[:n], "\n")
			toks = append(toks, token{kind: tkString, val: s, line: *line})
			pos += n
		case c >= '0' && c <= '9':
			t, n, err := lexNumber(rest)
			if err != nil {
				return nil, 0, fmt.Errorf("line %d: %w", *line, err)
			}
			t.line = *line
			toks = append(toks, t)
			pos += n
		case c == '_' || unicode.IsLetter(r):
			n := 0
			for n < len(rest) {
				r2, size := utf8.DecodeRuneInString(rest[n:])
				if r2 == '_' || unicode.IsLetter(r2) || unicode.IsDigit(r2) {
					n += size
					continue
				}
				break
			}
			toks = append(toks, token{kind: tkName, val: rest[:n], line: *line})
			pos += n
		default:
			found := ""
			for _, op := range operators() {
				if strings.HasPrefix(rest, op) {
					found = op
					break
				}
			}
			if found == "" {
				return nil, 0, fmt.Errorf("line %d: unexpected character %q", *line, r)
			}
			switch found {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				depth--
				if depth < 0 {
					return nil, 0, fmt.Errorf("line %d: unexpected %q", *line, found)
				}
			}
			toks = append(toks, token{kind: tkOp, val: found, line: *line})
			pos += len(found)
		}
	}
}

// lexNumber reads an int or float literal as jinja2 does (underscores allowed).
func lexNumber(s string) (token, int, error) {
	n := 0
	digits := func() {
		for n < len(s) && (s[n] >= '0' && s[n] <= '9' || s[n] == '_' && n+1 < len(s) && s[n+1] >= '0' && s[n+1] <= '9') {
			n++
		}
	}
	if len(s) > 1 && s[0] == '0' && strings.ContainsRune("xXoObB", rune(s[1])) {
		base := map[byte]int{'x': 16, 'X': 16, 'o': 8, 'O': 8, 'b': 2, 'B': 2}[s[1]]
		n = 2
		for n < len(s) && (isHexDigit(s[n]) || s[n] == '_') {
			n++
		}
		v, err := strconv.ParseInt(strings.ReplaceAll(s[2:n], "_", ""), base, 64)
		if err != nil {
			return token{}, 0, fmt.Errorf("invalid number %q", s[:n])
		}
		return token{kind: tkInt, val: s[:n], num: v}, n, nil
	}
	digits()
	isFloat := false
	if n+1 < len(s) && s[n] == '.' && s[n+1] >= '0' && s[n+1] <= '9' {
		isFloat = true
		n++
		digits()
	}
	if n < len(s) && (s[n] == 'e' || s[n] == 'E') {
		m := n + 1
		if m < len(s) && (s[m] == '+' || s[m] == '-') {
			m++
		}
		if m < len(s) && s[m] >= '0' && s[m] <= '9' {
			isFloat = true
			n = m
			digits()
		}
	}
	text := strings.ReplaceAll(s[:n], "_", "")
	if isFloat {
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return token{}, 0, fmt.Errorf("invalid number %q", text)
		}
		return token{kind: tkFloat, val: text, num: f}, n, nil
	}
	if v, err := strconv.ParseInt(text, 10, 64); err == nil {
		return token{kind: tkInt, val: text, num: v}, n, nil
	}
	if b, ok := bigFromString(text); ok {
		return token{kind: tkInt, val: text, num: b}, n, nil
	}
	return token{}, 0, fmt.Errorf("invalid number %q", text)
}

func isHexDigit(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// lexString reads a quoted literal and decodes it as jinja2 does
// (Python's unicode-escape on the raw text).
func lexString(s string) (string, int, error) {
	q := s[0]
	i := 1
	for i < len(s) {
		switch s[i] {
		case '\\':
			i += 2
			continue
		case q:
			return unescapePy(s[1:i]), i + 1, nil
		}
		i++
	}
	return "", 0, fmt.Errorf("unterminated string")
}

// unescapePy decodes Python string escapes; unknown escapes stay as written.
func unescapePy(s string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		e := s[i]
		switch e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+n < len(s)+0 && i+n <= len(s)-1+1 && i+1+n <= len(s) {
				if v, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32); err == nil && v <= unicode.MaxRune {
					b.WriteRune(rune(v))
					i += n
					continue
				}
			}
			b.WriteByte('\\')
			b.WriteByte(e)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			for j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7' {
				j++
			}
			v, _ := strconv.ParseUint(s[i:j], 8, 32)
			b.WriteRune(rune(v))
			i = j - 1
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String()
}
