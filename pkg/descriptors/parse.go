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

	"github.com/sluicehq/sluice/pkg/limiter"
)

// The keys each mapping may hold, in the order error messages list them.
var (
	fileKeys       = []string{"domain", "descriptors", "failure_mode"}
	descriptorKeys = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode",
		"detailed_metric", "value_to_metric", "share_threshold", "metadata"}
	rateLimitKeys = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces",
		"unit_multiplier", "algorithm"}
	replacesKeys = []string{"name"}
)

const (
	unitChoices = "second, minute, hour, day, week, month or year"
	// maxNodes bounds the descriptors and mappings one file may expand to, so
	// that YAML aliases cannot make a small file take unbounded time.
	maxNodes = 100_000
	// maxDepth bounds nesting, which also stops a mapping that an alias makes
	// contain itself.
	maxDepth = 64
	// maxErrors bounds the errors reported for one file, so that aliases
	// cannot multiply them either.
	maxErrors = 1000
)

// parser walks one file's yaml.Node tree, collecting errors and warnings.
type parser struct {
	file  string
	errs  []*Error
	warns []*Error
	nodes int             // mappings visited, against maxNodes
	stop  bool            // a limit was hit: report nothing more
	names map[string]bool // limit names in the domain, for replaces
	repl  []replaceRef
	// misspelled holds, per mapping, the keys that an unknown key in it
	// was taken for, so that a misspelled key is not also reported missing.
	misspelled map[*yaml.Node]map[string]bool
}

// missing reports that mapping n at path lacks key, unless an unknown key
// in n was already reported as a misspelling of it.
func (p *parser) missing(n *yaml.Node, path, key, format string, args ...any) {
	if p.misspelled[n][key] {
		return
	}
	p.errorf(n, join(path, key), format, args...)
}

type replaceRef struct {
	name string
	node *yaml.Node
	path string
}

// field is one key of a mapping and its value.
type field struct{ key, val *yaml.Node }

func (p *parser) report(list *[]*Error, n *yaml.Node, path, format string, args ...any) {
	e := &Error{File: p.file, Line: max(n.Line, 1), Column: max(n.Column, 1), Path: path, Msg: fmt.Sprintf(format, args...)}
	*list = append(*list, e)
}

func (p *parser) errorf(n *yaml.Node, path, format string, args ...any) {
	if p.stop {
		return
	}
	if len(p.errs) >= maxErrors {
		p.stop = true
		p.report(&p.errs, n, "", "too many errors (more than %d); stopping", maxErrors)
		return
	}
	p.report(&p.errs, n, path, format, args...)
}

func (p *parser) warnf(n *yaml.Node, path, format string, args ...any) {
	p.report(&p.warns, n, path, format, args...)
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
// holds it starts, and never a column, so the column is 1.
func (p *parser) syntaxError(err error, data []byte) {
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
			line = min(line, bytes.Count(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))+1)
		}
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Column: 1, Msg: "invalid YAML: " + msg})
}

// parseFile parses one file into a Domain. It returns the Domain (partial if
// p.errs is not empty, nil if the file has no usable root) and the node of
// its domain value, for the duplicate-domain error.
//
// A file holds one YAML document. Further documents that are not empty are
// an error rather than silently ignored (envoyproxy/ratelimit reads only the
// first), since one file is one domain.
func (p *parser) parseFile(data []byte) (*Domain, *yaml.Node) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errs = append(p.errs, &Error{File: p.file, Line: 1, Column: 1, Msg: "empty file: want a mapping with domain and descriptors"})
		} else {
			p.syntaxError(err, data)
		}
		return nil, nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != nil && !errors.Is(err, io.EOF) {
		p.syntaxError(err, data)
	} else if err == nil && !emptyDocument(&extra) {
		p.errorf(&extra, "", "a second YAML document: a file holds one domain, so put each in its own file")
	}

	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			p.errorf(root, "", "empty file: want a mapping with domain and descriptors")
			return nil, nil
		}
		root = root.Content[0]
	}
	fields, ok := p.mapping(root, "", "a mapping with domain and descriptors", fileKeys, 0)
	if !ok {
		return nil, nil
	}
	d := &Domain{File: p.file}
	var domainNode *yaml.Node
	if f, ok := fields["domain"]; !ok {
		p.missing(deref(root), "", "domain", "missing domain")
	} else if name, ok := p.str(f, "domain"); ok {
		domainNode = deref(f.val)
		if name == "" {
			p.errorf(domainNode, "domain", "empty domain")
		}
		d.Name, d.line, d.column = name, domainNode.Line, domainNode.Column
	}
	if f, ok := fields["failure_mode"]; ok {
		if s, ok := p.str(f, "failure_mode"); ok {
			if mode, ok := ParseFailureMode(s); ok {
				d.FailureMode = mode
			} else {
				p.errorf(f.val, "failure_mode", "unknown failure_mode %s (want error, allow or deny)", quote(s))
			}
		}
	}
	p.names = make(map[string]bool)
	if f, ok := fields["descriptors"]; ok {
		d.Rules = p.descriptors(f.val, "descriptors", d.Name+".", nil, 1)
	}
	for _, r := range p.repl {
		if !p.names[r.name] {
			p.warnf(r.node, r.path, "replaces %s, which names no limit in domain %s", quote(r.name), quote(d.Name))
		}
	}
	return d, domainNode
}

func emptyDocument(doc *yaml.Node) bool {
	if len(doc.Content) == 0 {
		return true
	}
	n := doc.Content[0]
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" && n.Value == ""
}

// descriptors parses a list of descriptors at path. prefix is the FullKey
// of the parent plus ".", lineage the parent's Lineage.
func (p *parser) descriptors(n *yaml.Node, path, prefix string, lineage []*Rule, depth int) []*Rule {
	n = deref(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "want a list of descriptors, got %s", describe(n))
		return nil
	}
	if depth > maxDepth {
		p.errorf(n, path, "descriptors nested more than %d deep", maxDepth)
		return nil
	}
	type sibling struct{ line, column int }
	seen := make(map[Entry]sibling)
	var rules []*Rule
	for i, item := range n.Content {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		r := p.rule(item, ipath, prefix, lineage, depth)
		if r == nil {
			continue
		}
		rules = append(rules, r)
		if r.Key == "" {
			continue
		}
		e := Entry{r.Key, r.Value}
		if first, dup := seen[e]; dup {
			what := fmt.Sprintf("key %s with value %s", quote(r.Key), quote(r.Value))
			if r.Value == "" {
				what = fmt.Sprintf("key %s without a value", quote(r.Key))
			}
			p.errorf(deref(item), ipath, "duplicate descriptor: %s is already at line %d, column %d", what, first.line, first.column)
			continue
		}
		seen[e] = sibling{r.Line, r.Column}
	}
	return rules
}

// rule parses one descriptor. It returns nil when n is not a mapping.
func (p *parser) rule(n *yaml.Node, path, prefix string, lineage []*Rule, depth int) *Rule {
	n = deref(n)
	fields, ok := p.mapping(n, path, "a descriptor mapping (key, value, rate_limit, descriptors, ...)", descriptorKeys, depth)
	if !ok {
		return nil
	}
	r := &Rule{File: p.file, Line: n.Line, Column: n.Column}
	if f, ok := fields["key"]; !ok {
		p.missing(n, path, "key", "missing key")
	} else if key, ok := p.str(f, path+".key"); ok {
		if key == "" {
			p.errorf(f.val, path+".key", "empty key")
		}
		r.Key = key
	}
	if f, ok := fields["value"]; ok {
		r.Value, _ = p.str(f, path+".value")
	}
	if r.Wildcard = strings.Contains(r.Value, "*"); r.Wildcard {
		r.segments = strings.Split(r.Value, "*")
	}
	r.FullKey = prefix + r.Key
	if r.Value != "" {
		r.FullKey += "_" + r.Value
	}
	r.Lineage = make([]*Rule, len(lineage)+1)
	copy(r.Lineage, lineage)
	r.Lineage[len(lineage)] = r

	for _, flag := range []struct {
		key string
		dst *bool
	}{
		{"shadow_mode", &r.ShadowMode},
		{"quota_mode", &r.QuotaMode},
		{"detailed_metric", &r.DetailedMetric},
		{"value_to_metric", &r.ValueToMetric},
		{"share_threshold", &r.ShareThreshold},
	} {
		if f, ok := fields[flag.key]; ok {
			*flag.dst, _ = p.boolean(f, path+"."+flag.key)
		}
	}
	if f, ok := fields["metadata"]; ok {
		r.Metadata = p.metadata(f.val, path+".metadata")
	}
	hasLimit := false
	if f, ok := fields["rate_limit"]; ok && !isNull(deref(f.val)) {
		hasLimit = true
		r.Limit, r.Unlimited = p.rateLimit(f.val, path+".rate_limit", depth)
	}
	if f, ok := fields["descriptors"]; ok {
		r.Children = p.descriptors(f.val, path+".descriptors", r.FullKey+".", r.Lineage, depth+1)
	}
	if !hasLimit && len(r.Children) == 0 {
		p.warnf(n, path, "no rate_limit and no descriptors: a request that matches here is never limited")
	}
	return r
}

// rateLimit parses a rate_limit mapping. It returns the Limit (nil when
// unlimited or not a mapping) and whether it is unlimited.
func (p *parser) rateLimit(n *yaml.Node, path string, depth int) (*Limit, bool) {
	n = deref(n)
	fields, ok := p.mapping(n, path, "a rate_limit mapping (unit, requests_per_unit, ...)", rateLimitKeys, depth)
	if !ok {
		return nil, false
	}
	l := &Limit{UnitMultiplier: 1}
	unlimited := false
	if f, ok := fields["unlimited"]; ok {
		var valid bool
		if unlimited, valid = p.boolean(f, path+".unlimited"); !valid {
			return nil, false // whether unit and requests_per_unit belong here is unknown
		}
	}
	if f, ok := fields["name"]; ok {
		l.Name, _ = p.str(f, path+".name")
		if l.Name != "" {
			p.names[l.Name] = true
		}
	}
	if f, ok := fields["replaces"]; ok {
		l.Replaces = p.replaces(f.val, path+".replaces", l.Name, depth)
	}
	if unlimited {
		for _, k := range []string{"unit", "requests_per_unit", "unit_multiplier", "algorithm"} {
			if f, ok := fields[k]; ok {
				p.errorf(f.key, path+"."+k, "%s with unlimited: true (an unlimited limit counts nothing; remove one of them)", k)
			}
		}
		if f, ok := fields["replaces"]; ok && len(l.Replaces) > 0 {
			// Rule.Limit is nil for an unlimited rule, so the names would be
			// lost; envoyproxy/ratelimit accepts them, so only warn.
			p.warnf(f.key, path+".replaces", "replaces with unlimited: true has no effect (an unlimited limit is never checked, so it replaces nothing)")
		}
		return nil, true
	}
	if f, ok := fields["unit"]; !ok {
		p.missing(n, path, "unit", "missing unit (want %s)", unitChoices)
	} else if s, ok := p.str(f, path+".unit"); ok {
		if u, ok := ParseUnit(s); ok {
			l.Unit = u
		} else {
			p.errorf(f.val, path+".unit", "unknown unit %s (want %s)", quote(s), unitChoices)
		}
	}
	if f, ok := fields["requests_per_unit"]; !ok {
		p.missing(n, path, "requests_per_unit", "missing requests_per_unit (0 or more; use unlimited: true for no limit)")
	} else if v, ok := p.uint32(f, path+".requests_per_unit", 0); ok {
		l.RequestsPerUnit = v
	}
	if f, ok := fields["unit_multiplier"]; ok {
		if v, ok := p.uint32(f, path+".unit_multiplier", 1); ok {
			l.UnitMultiplier = v
		}
	}
	if f, ok := fields["algorithm"]; ok {
		if s, ok := p.str(f, path+".algorithm"); ok {
			if a, ok := limiter.ParseAlgorithm(s); ok {
				l.Algorithm = a
			} else {
				p.errorf(f.val, path+".algorithm", "unknown algorithm %s (want sliding_window)", quote(s))
			}
		}
	}
	return l, false
}

// replaces parses rate_limit.replaces, a list of {name: ...} mappings, for
// the limit called self.
func (p *parser) replaces(n *yaml.Node, path, self string, depth int) []string {
	n = deref(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "want a list of {name: ...}, got %s", describe(n))
		return nil
	}
	var names []string
	for i, item := range n.Content {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		fields, ok := p.mapping(item, ipath, "a mapping {name: ...}", replacesKeys, depth)
		if !ok {
			continue
		}
		f, ok := fields["name"]
		if !ok {
			p.missing(deref(item), ipath, "name", "missing name (the name of the limit to replace)")
			continue
		}
		name, ok := p.str(f, ipath+".name")
		switch {
		case !ok:
		case name == "":
			p.errorf(f.val, ipath+".name", "empty name (want the name of the limit to replace)")
		case name == self:
			p.errorf(f.val, ipath+".name", "limit %s replaces itself", quote(name))
		default:
			names = append(names, name)
			p.repl = append(p.repl, replaceRef{name, deref(f.val), ipath + ".name"})
		}
	}
	return names
}

// metadata checks a metadata mapping for duplicate keys and decodes it.
func (p *parser) metadata(n *yaml.Node, path string) map[string]any {
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
func (p *parser) uniqueKeys(n *yaml.Node, path string, depth int) {
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
func (p *parser) count(n *yaml.Node, path string) bool {
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
func (p *parser) mapping(n *yaml.Node, path, what string, allowed []string, depth int) (map[string]field, bool) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "want %s, got %s", what, describe(n))
		return nil, false
	}
	if depth > maxDepth || p.count(n, path) {
		return nil, false
	}
	out := make(map[string]field)
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
		kpath := join(path, k.Value)
		if !contains(allowed, k.Value) {
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
			p.errorf(k, kpath, "unknown key %s %s", quote(k.Value), hint)
			continue
		}
		if first, dup := out[k.Value]; dup {
			p.errorf(k, kpath, "duplicate key %s (first at line %d, column %d)", quote(k.Value), first.key.Line, first.key.Column)
			continue
		}
		out[k.Value] = field{k, v}
	}
	for _, m := range merges {
		m = deref(m)
		var sources []*yaml.Node
		if m.Kind == yaml.SequenceNode {
			sources = m.Content
		} else {
			sources = []*yaml.Node{m}
		}
		for _, src := range sources {
			merged, ok := p.mapping(src, path, "a mapping to merge (<<)", allowed, depth+1)
			if !ok {
				continue
			}
			for k, f := range merged {
				if _, ok := out[k]; !ok {
					out[k] = f
				}
			}
		}
	}
	return out, true
}

// str returns the text of a scalar: like envoyproxy/ratelimit's YAML
// decoding, `value: 200` is the string "200" and a null is "". ok is false
// (and an error reported) for a mapping or a list.
func (p *parser) str(f field, path string) (string, bool) {
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
func (p *parser) boolean(f field, path string) (value, ok bool) {
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

// uint32 returns the value of an integer in [lo, MaxUint32].
func (p *parser) uint32(f field, path string, lo uint64) (uint32, bool) {
	n := deref(f.val)
	var v uint64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil || v < lo || v > math.MaxUint32 {
		p.errorf(n, path, "want an integer from %d to %d, got %s", lo, uint64(math.MaxUint32), describe(n))
		return 0, false
	}
	return uint32(v), true
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
