package descriptors

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// The keys of the mappings that belong to one key of the format (the
// format's own mappings' keys are in schema.go), in the order error
// messages list them.
var (
	replacesKeys = []string{"name"}
	classesKeys  = []string{"key", "ceilings"}
	ceilingKeys  = []string{"value", "ceiling"}
)

const (
	// maxNodes bounds the descriptors and mappings one file may expand to, so
	// that YAML aliases cannot make a small file take unbounded time.
	maxNodes = 100_000
	// maxDepth bounds nesting, which also stops a mapping that an alias makes
	// contain itself.
	maxDepth = 64
	// maxErrors bounds the errors reported for one file by each stage
	// (decoding, building), so that aliases cannot multiply them either.
	maxErrors = 1000
)

// decoder walks one YAML file's yaml.Node tree into a Document. It reports
// what only YAML can get wrong: syntax, a root that is no mapping, unknown
// keys (naming the closest valid one), duplicate keys, values of the wrong
// kind, and files that aliases make too large or too deep. The rules of the
// format itself are Build's.
type decoder struct {
	report
	// stamp is the file every position names (Pos.File), "" for a config
	// file's own positions.
	stamp string
	nodes int // mappings visited, against maxNodes
	// misspelled holds, per mapping, the keys that an unknown key in it
	// was taken for, so that a misspelled key is not also reported missing.
	misspelled map[*yaml.Node]map[string]bool
}

// decodeYAML decodes the file called name. It returns the Document (nil if
// the file has no usable root) and the problems found, each an *Error.
func decodeYAML(name string, data []byte) (*Document, []*Error) {
	p := &decoder{report: report{file: name}}
	doc := p.decodeFile(data)
	return doc, p.errs
}

// field is one key of a mapping and its value.
type field struct{ key, val *yaml.Node }

// yamlMap is a decoded mapping: its node (aliases followed) and the value
// of each key present.
type yamlMap struct {
	node   *yaml.Node
	fields map[string]field
}

// posOf is the position of n (yaml.v3 gives no line for a few nodes; 1 then),
// naming the file when the decoder stamps positions (an overlay's, whose
// fields are built into another source's Documents).
func (p *decoder) posOf(n *yaml.Node) Pos {
	return Pos{Line: max(n.Line, 1), Column: max(n.Column, 1), File: p.stamp}
}

func (p *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	p.errorAt(p.posOf(n), path, format, args...)
}

// get returns key of m as a Field, its value decoded by decode. A key that
// is absent, but that an unknown key in m was taken for (and reported as a
// misspelling of), is FieldInvalid, so that Build does not also call it
// missing.
func get[T any](p *decoder, m yamlMap, key, path string, decode func(f field, path string) (T, bool)) Field[T] {
	f, ok := m.fields[key]
	if !ok {
		if p.misspelled[m.node][key] {
			return Field[T]{State: FieldInvalid}
		}
		return Field[T]{}
	}
	out := Field[T]{State: FieldInvalid, KeyPos: p.posOf(f.key), Pos: p.posOf(f.val)}
	if v, ok := decode(f, join(path, key)); ok {
		out.Value, out.State = v, FieldSet
	}
	return out
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parserProblems are the problems yaml.v3's parser (not its scanner)
// reports. For these yaml.v3 prints the 0-based line of the construct it
// was parsing, so one is added; a problem on the first line gets no line.
var parserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected node content":     true,
	"found duplicate %YAML directive":        true,
	"found duplicate %TAG directive":         true,
	"found incompatible YAML document":       true,
	"found undefined tag handle":             true,
}

// syntaxError turns a yaml.v3 error into a positioned *Error. yaml.v3
// gives the line where it found the problem, or where the construct that
// holds it starts, and never a column; diagnose looks for the mistake
// itself from that line on. A mistake it does not recognise is reported
// at yaml.v3's line, column 1, with yaml.v3's words. It returns data with
// the mistake repaired when the repair is certain (see diagnosis.fixed),
// else nil.
func (p *decoder) syntaxError(err error, data []byte) []byte {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 1
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		msg = m[2]
		if n, err := strconv.Atoi(m[1]); err == nil && n > 0 {
			line = n
			if parserProblems[msg] {
				line++
			}
			// At the end of the input yaml.v3 may name the line after the last.
			line = min(line, lineCount(data))
		}
	}
	pos, fixed := Pos{Line: line, Column: 1}, ""
	if d, ok := diagnose(data, line, msg); ok {
		pos, msg, fixed = d.pos, d.msg, d.fixed
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: pos.Line, Column: pos.Column, Msg: "invalid YAML: " + msg})
	if fixed == "" {
		return nil
	}
	return replaceLine(data, pos.Line, fixed)
}

// maxRepairs bounds the syntax mistakes of one file repaired to check the
// rest of it.
const maxRepairs = 10

// parse decodes the first YAML document of data. On a syntax error that
// syntaxError can repair, it reports the error and goes on with the
// repaired text, so that one run also shows the problems after the
// mistake; the Document of a repaired file only serves to report them
// (the file has an error, so Load returns no Config). It returns the
// decoder (for the documents after) and false when nothing usable parsed.
func (p *decoder) parse(data []byte) (*yaml.Decoder, *yaml.Node, bool) {
	for repairs := 0; ; repairs++ {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		var doc yaml.Node
		err := dec.Decode(&doc)
		switch {
		case err == nil:
			return dec, &doc, true
		case errors.Is(err, io.EOF):
			p.errs = append(p.errs, &Error{File: p.file, Line: 1, Column: 1, Msg: "empty file: want a mapping with domain and descriptors"})
			return nil, nil, false
		}
		fixed := p.syntaxError(err, data)
		if fixed == nil || bytes.Equal(fixed, data) || repairs == maxRepairs {
			return nil, nil, false
		}
		data = fixed
	}
}

// decodeFile decodes one file into a Document, nil if the file has no
// usable root.
//
// A file holds one YAML document. Further documents that are not empty are
// an error rather than silently ignored (envoyproxy/ratelimit reads only the
// first), since one file is one domain.
func (p *decoder) decodeFile(data []byte) *Document {
	dec, doc, ok := p.parse(data)
	if !ok {
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != nil && !errors.Is(err, io.EOF) {
		p.syntaxError(err, data)
	} else if err == nil && !emptyDocument(&extra) {
		p.errorf(&extra, "", "a second YAML document: a file holds one domain, so put each in its own file")
	}

	root := doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			p.errorf(root, "", "empty file: want a mapping with domain and descriptors")
			return nil
		}
		root = root.Content[0]
	}
	m, ok := p.mapping(root, "", "a mapping with domain and descriptors", fileKeys, 0)
	if !ok {
		return nil
	}
	d := &Document{File: p.file, Pos: p.posOf(m.node)}
	decodeKeys(p, m, "", 0, d, func(k KeySpec) source[*Document] { return k.doc })
	return d
}

func emptyDocument(doc *yaml.Node) bool {
	if len(doc.Content) == 0 {
		return true
	}
	n := doc.Content[0]
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" && n.Value == ""
}

// descriptors decodes a list of descriptors at path, depth levels down
// (1 for the top). An item that is not a mapping is a nil entry.
func (p *decoder) descriptors(n *yaml.Node, path string, depth int) []*Node {
	n = deref(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "want a list of descriptors, got %s", describe(n))
		return nil
	}
	if depth > maxDepth {
		p.errorf(n, path, "%s", depthMessage)
		return nil
	}
	nodes := make([]*Node, len(n.Content))
	for i, item := range n.Content {
		nodes[i] = p.node(item, fmt.Sprintf("%s[%d]", path, i), depth)
	}
	return nodes
}

// node decodes one descriptor. It returns nil when n is not a mapping.
func (p *decoder) node(n *yaml.Node, path string, depth int) *Node {
	n = deref(n)
	m, ok := p.mapping(n, path, "a descriptor mapping (key, value, rate_limit, descriptors, ...)", descriptorKeys, depth)
	if !ok {
		return nil
	}
	nd := &Node{Pos: p.posOf(n)}
	decodeKeys(p, m, path, depth, nd, func(k KeySpec) source[*Node] { return k.node })
	return nd
}

// classes decodes a classes mapping (key, ceilings). It returns nil for a
// node that is not a mapping (reporting it) and for a null.
func (p *decoder) classes(f field, path string, depth int) *ClassesNode {
	n := deref(f.val)
	if isNull(n) {
		return nil
	}
	m, ok := p.mapping(n, path, "a classes mapping (key, ceilings)", classesKeys, depth)
	if !ok {
		return nil
	}
	return &ClassesNode{
		Pos: p.posOf(f.key),
		Key: get(p, m, "key", path, p.str),
		Ceilings: get(p, m, "ceilings", path, func(f field, path string) ([]*CeilingNode, bool) {
			return p.ceilings(f.val, path, depth)
		}),
	}
}

// ceilings decodes classes.ceilings, a list of {value, ceiling} mappings;
// an item that is not a mapping is a nil entry. ok is false (and an error
// reported) when n is not a list.
func (p *decoder) ceilings(n *yaml.Node, path string, depth int) ([]*CeilingNode, bool) {
	n = deref(n)
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "want a list of {value: ..., ceiling: ...%%}, got %s", describe(n))
		return nil, false
	}
	items := make([]*CeilingNode, len(n.Content))
	for i, item := range n.Content {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		m, ok := p.mapping(item, ipath, "a mapping {value: ..., ceiling: ...%}", ceilingKeys, depth)
		if !ok {
			continue
		}
		items[i] = &CeilingNode{Pos: p.posOf(m.node), Value: get(p, m, "value", ipath, p.str),
			Ceiling: get(p, m, "ceiling", ipath, p.str)}
	}
	return items, true
}

// rateLimit decodes a rate_limit mapping. It returns nil for a null and
// for a node that is not a mapping (reporting the latter).
func (p *decoder) rateLimit(n *yaml.Node, path string, depth int) *RateLimitNode {
	n = deref(n)
	if isNull(n) {
		return nil
	}
	m, ok := p.mapping(n, path, "a rate_limit mapping (unit, requests_per_unit, ...)", rateLimitKeys, depth)
	if !ok {
		return nil
	}
	rl := &RateLimitNode{Pos: p.posOf(n)}
	decodeKeys(p, m, path, depth, rl, func(k KeySpec) source[*RateLimitNode] { return k.rl })
	return rl
}

// rateLimits decodes rate_limits, a list of rate_limit mappings; an item
// that is not a mapping (or is null) is a nil entry. ok is false (and an
// error reported) when n is not a list.
func (p *decoder) rateLimits(n *yaml.Node, path string, depth int) ([]*RateLimitNode, bool) {
	n = deref(n)
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "want a list of rate_limit mappings (unit, requests_per_unit, ...), got %s", describe(n))
		return nil, false
	}
	items := make([]*RateLimitNode, len(n.Content))
	for i, item := range n.Content {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		if isNull(deref(item)) {
			p.errorf(deref(item), ipath, "want a rate_limit mapping (unit, requests_per_unit, ...), got null")
			continue
		}
		items[i] = p.rateLimit(item, ipath, depth)
	}
	return items, true
}

// replaces decodes rate_limit.replaces, a list of {name: ...} mappings; an
// item that is not a mapping is a nil entry. ok is false (and an error
// reported) when n is not a list.
func (p *decoder) replaces(n *yaml.Node, path string, depth int) ([]*ReplaceNode, bool) {
	n = deref(n)
	if isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "want a list of {name: ...}, got %s", describe(n))
		return nil, false
	}
	items := make([]*ReplaceNode, len(n.Content))
	for i, item := range n.Content {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		m, ok := p.mapping(item, ipath, "a mapping {name: ...}", replacesKeys, depth)
		if !ok {
			continue
		}
		items[i] = &ReplaceNode{Pos: p.posOf(m.node), Name: get(p, m, "name", ipath, p.str)}
	}
	return items, true
}

// metadata checks a metadata mapping for duplicate keys and decodes it.
func (p *decoder) metadata(n *yaml.Node, path string) map[string]any {
	n = deref(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "want a mapping, got %s", describe(n))
		return nil
	}
	before := len(p.errs)
	p.uniqueKeys(n, path, 0)
	if len(p.errs) > before {
		return nil
	}
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		p.errorf(n, path, "cannot decode: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		return nil
	}
	return m
}

// uniqueKeys reports duplicate keys anywhere under n, which yaml.v3 does
// not do for a yaml.Node.
func (p *decoder) uniqueKeys(n *yaml.Node, path string, depth int) {
	if depth > maxDepth || p.count(n, path) {
		return
	}
	switch n.Kind {
	case yaml.MappingNode:
		seen := make(map[string]*yaml.Node)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			kpath := path + "." + k.Value
			if k.Kind == yaml.ScalarNode && k.ShortTag() != "!!merge" {
				if first, dup := seen[k.Value]; dup {
					p.errorf(k, kpath, "duplicate key %s (first at line %d, column %d)", quote(k.Value), first.Line, first.Column)
				}
				seen[k.Value] = k
			}
			p.uniqueKeys(v, kpath, depth+1)
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			p.uniqueKeys(v, fmt.Sprintf("%s[%d]", path, i), depth+1)
		}
	}
}

// count charges one node against maxNodes and reports whether the budget
// is spent (reporting that once).
func (p *decoder) count(n *yaml.Node, path string) bool {
	if p.stop {
		return true
	}
	p.nodes++
	if p.nodes > maxNodes {
		p.errorf(n, path, "more than %d mappings (after expanding aliases)", maxNodes)
		p.stop = true
		return true
	}
	return false
}

// mapping checks that n is a mapping whose keys are strings among allowed,
// each at most once, and returns the value of each key present. what
// describes the expected mapping in an error. Merge keys (<<) are expanded,
// explicit keys winning over merged ones as YAML specifies. ok is false
// (and an error reported) when n is not a mapping.
func (p *decoder) mapping(n *yaml.Node, path, what string, allowed []string, depth int) (yamlMap, bool) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "want %s, got %s", what, describe(n))
		return yamlMap{}, false
	}
	if depth > maxDepth || p.count(n, path) {
		return yamlMap{}, false
	}
	out := yamlMap{node: n, fields: make(map[string]field)}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			p.errorf(k, path, "key %s is not a string (want %s)", describeKey(k), choices(allowed))
			continue
		}
		if !contains(allowed, k.Value) {
			p.unknownKey(n, k, path, allowed)
			continue
		}
		if first, dup := out.fields[k.Value]; dup {
			p.errorf(k, join(path, k.Value), "duplicate key %s (first at line %d, column %d)", quote(k.Value), first.key.Line, first.key.Column)
			continue
		}
		out.fields[k.Value] = field{k, v}
	}
	for _, m := range merges {
		p.merge(out.fields, m, path, allowed, depth)
	}
	return out, true
}

// unknownKey reports key k of mapping n, which allowed lacks, naming the
// closest allowed key and remembering it as misspelled in n.
func (p *decoder) unknownKey(n, k *yaml.Node, path string, allowed []string) {
	hint := "(it belongs under rate_limit)"
	if !contains(allowed, "rate_limit") || !contains(rateLimitKeys, k.Value) {
		var guess string
		guess, hint = suggest(k.Value, allowed)
		if guess != "" {
			if p.misspelled == nil {
				p.misspelled = make(map[*yaml.Node]map[string]bool)
			}
			if p.misspelled[n] == nil {
				p.misspelled[n] = make(map[string]bool)
			}
			p.misspelled[n][guess] = true
		}
	}
	p.errorf(k, join(path, k.Value), "unknown key %s %s", quote(k.Value), hint)
}

// merge adds to fields the keys of the mapping (or list of mappings) m that
// a merge key (<<) names, unless fields has them already.
func (p *decoder) merge(fields map[string]field, m *yaml.Node, path string, allowed []string, depth int) {
	m = deref(m)
	sources := []*yaml.Node{m}
	if m.Kind == yaml.SequenceNode {
		sources = m.Content
	}
	for _, src := range sources {
		merged, ok := p.mapping(src, path, "a mapping to merge (<<)", allowed, depth+1)
		if !ok {
			continue
		}
		for k, f := range merged.fields {
			if _, ok := fields[k]; !ok {
				fields[k] = f
			}
		}
	}
}

// str returns the text of a scalar: like envoyproxy/ratelimit's YAML
// decoding, `value: 200` is the string "200" and a null is "". ok is false
// (and an error reported) for a mapping or a list.
func (p *decoder) str(f field, path string) (string, bool) {
	n := deref(f.val)
	if n.Kind != yaml.ScalarNode {
		p.errorf(n, path, "want a string, got %s", describe(n))
		return "", false
	}
	if isNull(n) {
		return "", true
	}
	return n.Value, true
}

// boolean returns the value of a bool, and false for ok (after reporting
// it) when the node is no bool. It accepts YAML 1.1's yes/no/on/off
// (unquoted), which envoyproxy/ratelimit's YAML 1.1 parser accepts, and a
// null as false.
func (p *decoder) boolean(f field, path string) (value, ok bool) {
	n := deref(f.val)
	if n.Kind == yaml.ScalarNode {
		switch {
		case n.ShortTag() == "!!bool":
			var b bool
			if n.Decode(&b) == nil {
				return b, true
			}
		case isNull(n):
			return false, true
		case n.ShortTag() == "!!str" && n.Style == 0:
			switch strings.ToLower(n.Value) {
			case "y", "yes", "on":
				return true, true
			case "n", "no", "off":
				return false, true
			}
		}
	}
	p.errorf(n, path, "want true or false, got %s", describe(n))
	return false, false
}

// uint32 returns a decoder of integers that fit in a uint32. lo is the
// smallest value the field allows, named in the error; a value below it
// still decodes, for Build to refuse, since that is a rule of the format
// rather than of YAML.
func (p *decoder) uint32(lo uint64) func(field, string) (uint32, bool) {
	return func(f field, path string) (uint32, bool) {
		n := deref(f.val)
		var v uint64
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil || v > math.MaxUint32 {
			p.errorf(n, path, "want an integer from %d to %d, got %s", lo, uint64(math.MaxUint32), describe(n))
			return 0, false
		}
		return uint32(v), true
	}
}

// deref follows aliases to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < maxDepth; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// describe names what a node is, for "want X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!str":
			return "the string " + quote(n.Value)
		case "!!int":
			return "the integer " + clip(n.Value)
		case "!!float":
			return "the number " + clip(n.Value)
		case "!!bool":
			return "the bool " + clip(n.Value)
		default:
			return fmt.Sprintf("%s %s", clip(n.ShortTag()), quote(n.Value))
		}
	}
	return "an unknown node"
}

// describeKey shows a mapping key that is not a string: "0.25 (a number)".
func describeKey(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return describe(n)
	}
	kind := clip(n.ShortTag())
	switch n.ShortTag() {
	case "!!int":
		kind = "an integer"
	case "!!float":
		kind = "a number"
	case "!!bool":
		kind = "a bool"
	case "!!null":
		kind = "null"
	}
	return clip(n.Value) + " (" + kind + ")"
}

// quote quotes s for a message, cutting it short so that one huge value
// does not make a huge error.
func quote(s string) string {
	const maxLen = 64
	if len(s) > maxLen {
		return strconv.Quote(s[:maxLen]) + "..."
	}
	return strconv.Quote(s)
}

func clip(s string) string {
	const maxLen = 64
	if len(s) > maxLen {
		return strconv.Quote(s[:maxLen]) + "..."
	}
	return s
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// choices lists allowed as "a, b or c".
func choices(allowed []string) string {
	if len(allowed) == 1 {
		return allowed[0]
	}
	return strings.Join(allowed[:len(allowed)-1], ", ") + " or " + allowed[len(allowed)-1]
}

// suggest names the allowed key closest to key when it is close enough to
// be a misspelling, and lists the allowed keys otherwise. It returns the
// guess ("" if none) and the hint for the message.
func suggest(key string, allowed []string) (string, string) {
	norm := func(s string) string {
		return strings.NewReplacer("_", "", "-", "", " ", "").Replace(strings.ToLower(s))
	}
	best, bestDist := "", math.MaxInt
	for _, a := range allowed {
		d := distance(norm(key), norm(a))
		if d < bestDist {
			best, bestDist = a, d
		}
	}
	if bestDist <= max(1, len(best)/3) {
		return best, fmt.Sprintf("(did you mean %q?)", best)
	}
	return "", "(want " + choices(allowed) + ")"
}

// distance is the Levenshtein distance between a and b, in bytes.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
