package descriptors

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// yaml.v3 reports a syntax error with one line and no column, and for the
// parser's errors that line is where the enclosing construct starts (a
// mis-indented key on line 10 of a list that starts on line 5 is "line 5:
// did not find expected '-' indicator"). The functions below look at the
// source text from that line on for the common mistakes and name the line
// and column of the mistake itself, in words a config's author can act on.
// A mistake they do not recognise keeps yaml.v3's line and message.

// srcLine is one line of a file, split for the indentation check.
type srcLine struct {
	num    int    // 1-based
	text   string // without the line break
	indent int    // leading spaces
}

// content reports whether l holds YAML content (not blank, not a comment).
func (l srcLine) content() bool {
	t := strings.TrimSpace(l.text)
	return t != "" && !strings.HasPrefix(t, "#")
}

func splitLines(data []byte) []srcLine {
	var out []srcLine
	for i, t := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		t = strings.TrimSuffix(t, "\r")
		out = append(out, srcLine{num: i + 1, text: t, indent: len(t) - len(strings.TrimLeft(t, " "))})
	}
	return out
}

// column is the 1-based column of byte offset i of s, counted in
// characters as yaml.v3 counts them.
func column(s string, i int) int {
	return utf8.RuneCountInString(s[:i]) + 1
}

// diagnosis is a syntax mistake found in the source text.
type diagnosis struct {
	pos Pos
	msg string
	// fixed is the mistake's line (pos.Line) as its author evidently
	// meant it (a value quoted, a flow collection closed), "" when that is
	// not certain. With it the rest of the file is still checked.
	fixed string
}

// diagnose returns the mistake behind yaml.v3's error msg, which yaml.v3
// placed at line (1-based), or false when it recognises none.
func diagnose(data []byte, line int, msg string) (diagnosis, bool) {
	lines := splitLines(data)
	if line < 1 || line > len(lines) {
		line = 1
	}
	switch {
	case strings.Contains(msg, "tab character"),
		strings.HasPrefix(msg, "found character that cannot start any token"):
		if d, ok := tabIndent(lines, line); ok {
			return d, true
		}
		return badStart(lines, line)
	case msg == "did not find expected alphabetic or numeric character":
		return aliasStart(lines, line)
	case strings.HasPrefix(msg, "unknown anchor '"):
		return unknownAnchor(lines, strings.TrimSuffix(strings.TrimPrefix(msg, "unknown anchor '"), "' referenced"))
	case msg == "found unexpected end of stream":
		return unclosedQuote(lines)
	case msg == "did not find expected ',' or '}'":
		return unclosedFlow(lines, line, '{', '}')
	case msg == "did not find expected ',' or ']'":
		return unclosedFlow(lines, line, '[', ']')
	case msg == "did not find expected key", msg == "did not find expected '-' indicator",
		msg == "mapping values are not allowed in this context", msg == "could not find expected ':'":
		if d, ok := misindented(lines, line); ok {
			return d, true
		}
		if msg == "mapping values are not allowed in this context" {
			return colonInValue(lines, line)
		}
	}
	return diagnosis{}, false
}

// tabIndent finds the first tab in the indentation of a line from line on
// (yaml.v3 reports the line before it for some).
func tabIndent(lines []srcLine, line int) (diagnosis, bool) {
	for _, l := range lines[max(line-2, 0):] {
		lead := l.text[:len(l.text)-len(strings.TrimLeft(l.text, " \t"))]
		if i := strings.IndexByte(lead, '\t'); i >= 0 && l.content() {
			return diagnosis{Pos{Line: l.num, Column: column(l.text, i)},
				"a tab in the indentation: YAML indents with spaces only", ""}, true
		}
	}
	return diagnosis{}, false
}

// badStart finds a value on line that starts with a character YAML
// reserves ('@' or '`').
func badStart(lines []srcLine, line int) (diagnosis, bool) {
	l := lines[line-1]
	_, val, i := splitValue(l.text)
	if val != "" && (val[0] == '@' || val[0] == '`') {
		return diagnosis{Pos{Line: l.num, Column: column(l.text, i)},
			fmt.Sprintf("a value cannot start with %q unquoted: quote it ('%s')", val[0], val), quoted(l.text, i, val)}, true
	}
	return diagnosis{}, false
}

// aliasStart finds, on line, a value starting with '*' or '&' that is not
// a well-formed alias or anchor (such as */admin or * alone).
func aliasStart(lines []srcLine, line int) (diagnosis, bool) {
	l := lines[line-1]
	_, val, i := splitValue(l.text)
	if val == "" || val[0] != '*' && val[0] != '&' {
		return diagnosis{}, false
	}
	what := "an alias (a reference to an &anchor)"
	if val[0] == '&' {
		what = "an anchor"
	}
	return diagnosis{Pos{Line: l.num, Column: column(l.text, i)},
		fmt.Sprintf("a value starting with %q is read as %s: quote it ('%s')", val[0], what, val), quoted(l.text, i, val)}, true
}

// unknownAnchor finds the alias *name, which yaml.v3 reports with no line.
func unknownAnchor(lines []srcLine, name string) (diagnosis, bool) {
	re := regexp.MustCompile(`(^|[\s\[{,:-])\*` + regexp.QuoteMeta(name) + `($|[\s\]},])`)
	for _, l := range lines {
		if loc := re.FindStringIndex(l.text); loc != nil && l.content() {
			i := loc[0] + strings.IndexByte(l.text[loc[0]:], '*')
			return diagnosis{Pos{Line: l.num, Column: column(l.text, i)},
				fmt.Sprintf("*%s is an alias, but no anchor &%s comes before it (quote the value if it is text)", name, name), ""}, true
		}
	}
	return diagnosis{}, false
}

// unclosedQuote finds the first quoted value whose quote its line does not
// close (yaml.v3 reports where the file ends instead).
func unclosedQuote(lines []srcLine) (diagnosis, bool) {
	for _, l := range lines {
		_, val, i := splitValue(l.text)
		if val == "" || val[0] != '"' && val[0] != '\'' || !l.content() {
			continue
		}
		if j := strings.LastIndexByte(l.text, val[0]); j == i || val[0] == '"' && l.text[j-1] == '\\' {
			return diagnosis{pos: Pos{Line: l.num, Column: column(l.text, i)},
				msg: fmt.Sprintf("this %q is never closed: end the value with %q on its line", val[0], val[0])}, true
		}
	}
	return diagnosis{}, false
}

// splitValue splits a "key: value" or "- value" line into its key and
// value (comment removed), with the value's byte offset in text.
func splitValue(text string) (key, val string, at int) {
	rest, off := text, 0
	for {
		t := strings.TrimLeft(rest, " \t")
		off += len(rest) - len(t)
		if !strings.HasPrefix(t, "- ") && t != "-" {
			rest = t
			break
		}
		rest, off = t[1:], off+1
	}
	if i := strings.Index(rest, ": "); i >= 0 && !strings.ContainsAny(rest[:i], `"'`) {
		key = rest[:i]
		v := rest[i+2:]
		t := strings.TrimLeft(v, " \t")
		off += i + 2 + len(v) - len(t)
		rest = t
	}
	if i := strings.Index(rest, " #"); i >= 0 {
		rest = rest[:i]
	}
	return key, strings.TrimRight(rest, " \t"), off
}

// colonInValue finds a plain value on line that holds ": ".
func colonInValue(lines []srcLine, line int) (diagnosis, bool) {
	l := lines[line-1]
	key, val, i := splitValue(l.text)
	j := strings.Index(val, ": ")
	if key == "" || j < 0 || strings.ContainsAny(val[:1], `"'{[`) {
		return diagnosis{}, false
	}
	return diagnosis{Pos{Line: l.num, Column: column(l.text, i+j)},
		fmt.Sprintf("the value of %s holds \": \", which starts a mapping: quote the value ('%s')", quote(key), val), quoted(l.text, i, val)}, true
}

// unclosedFlow finds the open of the flow collection (a '{' mapping or a
// '[' list) that yaml.v3 reports at line, and says whether it is never
// closed or lacks a comma between entries.
func unclosedFlow(lines []srcLine, line int, open, close byte) (diagnosis, bool) {
	l := lines[line-1]
	at := flowOpen(l.text, open)
	if at < 0 {
		return diagnosis{}, false
	}
	pos := Pos{Line: l.num, Column: column(l.text, at)}
	if !flowCloses(lines, line, at, l.indent) {
		kind := "mapping"
		if open == '[' {
			kind = "list"
		}
		return diagnosis{pos, fmt.Sprintf("this %q is never closed: end the %s with %q", open, kind, close), closeFlow(l.text, at)}, true
	}
	return diagnosis{pos, fmt.Sprintf("want ',' or %q after each entry of the %q that starts here (a missing comma?)", close, open), ""}, true
}

// quoted is text with its value val, at byte i, single-quoted; "" when val
// holds a quote (the repair would not be certain).
func quoted(text string, i int, val string) string {
	if strings.ContainsAny(val, `'"`) {
		return ""
	}
	return text[:i] + "'" + val + "'" + text[i+len(val):]
}

// closeFlow is text with the flow collections still open after byte at
// closed at the end of the line (before a comment); "" when the line ends
// with a comma, that is, when the collection goes on below.
func closeFlow(text string, at int) string {
	pairs := map[byte]byte{'{': '}', '[': ']'}
	var open []byte
	end, inQuote := unquoted(text[at:], func(_ int, c byte) bool {
		switch {
		case c == '{' || c == '[':
			open = append(open, pairs[c])
		case (c == '}' || c == ']') && len(open) > 0:
			open = open[:len(open)-1]
		}
		return true
	})
	body := strings.TrimRight(text[:at+end], " \t")
	if len(open) == 0 || inQuote || strings.HasSuffix(body, ",") {
		return ""
	}
	slices.Reverse(open)
	return body + string(open) + text[len(body):]
}

// flowOpen is the byte offset of the first open outside quotes in text
// that starts a flow collection, or -1.
func flowOpen(text string, open byte) int {
	at := -1
	unquoted(text, func(i int, c byte) bool {
		if c == open {
			at = i
		}
		return at < 0
	})
	return at
}

// flowCloses reports whether the flow collection opened at byte at of
// line closes before the file ends or a later line at no more than indent
// starts a block key or list item (which a flow collection cannot hold).
func flowCloses(lines []srcLine, line, at, indent int) bool {
	depth := 0
	for k, l := range lines[line-1:] {
		text := l.text
		if k == 0 {
			text = text[at:]
		} else if l.content() && l.indent <= indent && blockStart(strings.TrimSpace(l.text)) {
			return false
		}
		closed := false
		unquoted(text, func(_ int, c byte) bool {
			switch c {
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				closed = depth == 0
			}
			return !closed
		})
		if closed {
			return true
		}
	}
	return false
}

// blockStart reports whether trimmed line text starts a list item or a
// "key:" of a block mapping.
func blockStart(t string) bool {
	return strings.HasPrefix(t, "- ") || t == "-" || plainKey.MatchString(t)
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_.-]+:(\s|$)`)

// indentLevel is an open block mapping or list: its indentation and the
// line that opened it.
type indentLevel struct{ indent, line int }

// misindented finds the first line, from line-1 on, indented to no level
// of the block mappings and lists open above it. It tracks the indentation
// of each open block: a line may go deeper only after a key with no value
// on its line or a list item, and must otherwise line up with an open
// level. Flow collections, block scalars and lines that continue a plain
// value are skipped.
func misindented(lines []srcLine, line int) (diagnosis, bool) {
	var (
		stack  []indentLevel
		deeper bool // the previous line opened a block
		flow   int  // depth of an open flow collection
		scalar = -1 // indent of the key of an open block scalar (| or >)
	)
	for _, l := range lines {
		if !l.content() || strings.HasPrefix(strings.TrimSpace(l.text), "---") {
			continue
		}
		if scalar >= 0 && l.indent > scalar {
			continue
		}
		scalar = -1
		if flow > 0 {
			flow = flowDepth(l.text, flow)
			continue
		}
		t := strings.TrimSpace(l.text)
		var popped *indentLevel
		for len(stack) > 0 && stack[len(stack)-1].indent > l.indent {
			last := stack[len(stack)-1]
			popped, stack = &last, stack[:len(stack)-1]
		}
		top := -1
		if len(stack) > 0 {
			top = stack[len(stack)-1].indent
		}
		if top == l.indent {
			stack[len(stack)-1].line = l.num
		} else {
			if !deeper && blockStart(t) && l.num >= line-1 && len(stack) > 0 {
				return misindentMessage(l, t, stack, popped), true
			}
			if !deeper && !blockStart(t) {
				continue // a plain value continued on the next line
			}
			stack = append(stack, indentLevel{l.indent, l.num})
		}
		// The content after each "- " is a level of its own.
		col := l.indent
		for strings.HasPrefix(t, "- ") {
			n := len(t)
			t = strings.TrimLeft(t[2:], " ")
			col += n - len(t)
			stack = append(stack, indentLevel{col, l.num})
		}
		key, val, _ := splitValue(l.text)
		if strings.HasSuffix(t, ":") {
			key, val = strings.TrimSuffix(t, ":"), ""
		}
		deeper = t == "-" || key != "" && val == "" || plainKey.MatchString(t) && val == ""
		switch {
		case strings.HasPrefix(val, "|") || strings.HasPrefix(val, ">"):
			scalar = l.indent
		case strings.HasPrefix(val, "{") || strings.HasPrefix(val, "["):
			flow = flowDepth(val, 0)
		}
	}
	return diagnosis{}, false
}

// misindentMessage says where the line l, with trimmed text t, should
// line up: with the level it passed (popped) or the one it is under.
func misindentMessage(l srcLine, t string, stack []indentLevel, popped *indentLevel) diagnosis {
	what := "a list item"
	if !strings.HasPrefix(t, "-") {
		what = quote(t[:strings.IndexByte(t, ':')])
	}
	pos := Pos{Line: l.num, Column: l.indent + 1}
	top := stack[len(stack)-1]
	if popped == nil {
		return diagnosis{pos: pos, msg: fmt.Sprintf("%s is indented %s, deeper than line %d (%s), whose key already has its value on its line: line it up with the mapping it belongs to",
			what, spaces(l.indent), top.line, spaces(top.indent))}
	}
	return diagnosis{pos: pos, msg: fmt.Sprintf("%s is indented %s, but the lines before it are at %d (line %d) or %d (line %d): line it up with the one it belongs to",
		what, spaces(l.indent), popped.indent, popped.line, top.indent, top.line)}
}

func spaces(n int) string {
	if n == 1 {
		return "1 space"
	}
	return fmt.Sprintf("%d spaces", n)
}

// flowDepth returns the nesting of flow collections after text, starting
// at depth, ignoring quoted text and comments.
func flowDepth(text string, depth int) int {
	unquoted(text, func(_ int, c byte) bool {
		switch c {
		case '{', '[':
			depth++
		case '}', ']':
			depth = max(depth-1, 0)
		}
		return true
	})
	return depth
}

// unquoted calls visit with each byte of text (and its offset) that is
// outside quoted text and before a comment ('#' at the start or after a
// space), until visit returns false. It returns the comment's offset
// (len(text) when there is none, or when visit stopped first) and whether
// a quote is still open at the end.
func unquoted(text string, visit func(i int, c byte) bool) (end int, inQuote bool) {
	var q byte
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '"' || c == '\'':
			q = c
		case c == '#' && (i == 0 || text[i-1] == ' '):
			return i, false
		default:
			if !visit(i, c) {
				return len(text), false
			}
		}
	}
	return len(text), q != 0
}

// replaceLine returns data with its line n (1-based) replaced by text,
// the line break kept.
func replaceLine(data []byte, n int, text string) []byte {
	start := 0
	for range n - 1 {
		i := bytes.IndexByte(data[start:], '\n')
		if i < 0 {
			return nil
		}
		start += i + 1
	}
	end := len(data)
	if i := bytes.IndexByte(data[start:], '\n'); i >= 0 {
		end = start + i
	}
	if end > start && data[end-1] == '\r' {
		end--
	}
	return slices.Concat(data[:start], []byte(text), data[end:])
}

// lineCount is the number of lines of data (a final line break ends the
// last line rather than starting another).
func lineCount(data []byte) int {
	return bytes.Count(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) + 1
}
