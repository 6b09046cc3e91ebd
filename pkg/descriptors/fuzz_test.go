package descriptors_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

var fuzzPrefix = regexp.MustCompile(`^fuzz\.yaml:[1-9][0-9]*:[1-9][0-9]*: `)

// FuzzLoad checks that the loader never panics or hangs on any input, that
// it returns either a Config or an error, and that every error is an *Error
// starting with "fuzz.yaml:line:col: ". A loaded Config must also survive
// Match with entries taken from the input.
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		// A valid config using every field, so mutations reach every check.
		`domain: api
failure_mode: allow
descriptors:
  - key: k
    value: v*x
    shadow_mode: true
    quota_mode: false
    detailed_metric: yes
    value_to_metric: no
    share_threshold: true
    metadata: {a: [1, {b: c}]}
    rate_limit:
      name: n
      unit: minute
      unit_multiplier: 5
      algorithm: sliding_window
      requests_per_unit: 0
      replaces: [{name: m}]
    descriptors:
      - key: k2
        rate_limit: {unlimited: true, name: m}
`,
		// Empty input: no document at all.
		``,
		// A comment only: a document with no content.
		"# nothing\n",
		// Not YAML (an unterminated quote).
		`'''`,
		// The root is a scalar, then a list.
		`api`,
		`- domain: api`,
		// A second document.
		"domain: a\n---\ndomain: b\n",
		// A non-string key, a merge key and an alias.
		"0.25: x\n<<: {domain: a}\ndescriptors: [&d {key: a, rate_limit: {unlimited: true}}, *d]\n",
		// An alias that makes a node contain itself.
		"domain: a\ndescriptors: &l [{key: a, descriptors: *l}]\n",
		// Aliases that expand exponentially (a billion laughs).
		"domain: a\nx: &a [{key: a, rate_limit: {unlimited: true}}]\ndescriptors: &b [{key: b, descriptors: [*a, *a]}]\n",
		// An unknown alias (yaml.v3 reports no line for it).
		"domain: *nope\n",
		// Tabs, CRLF line ends and a BOM.
		"\ufeffdomain: a\r\ndescriptors:\r\n\t- key: a\r\n",
		// Numbers at the edges of requests_per_unit.
		"domain: a\ndescriptors: [{key: a, rate_limit: {unit: second, requests_per_unit: 0x1_0000_0000}}]\n",
		// Custom tags and a binary value.
		"domain: !foo a\ndescriptors: [{key: !!binary aGk=, value: !!str 1}]\n",
		// Windows at and past MaxWindow (a year x 300 overflowed int64).
		"domain: a\ndescriptors: [{key: a, rate_limit: {unit: year, unit_multiplier: 10, requests_per_unit: 1}}, {key: b, rate_limit: {unit: year, unit_multiplier: 300, requests_per_unit: 1}}]\n",
		// A pool with classes, ceilings at the edges and a child: the class
		// rules the builder makes, and their errors.
		"domain: a\ndescriptors: [{key: p, rate_limit: {unit: second, requests_per_unit: 7}, classes: {key: c, ceilings: [{value: x, ceiling: 100%}, {value: y, ceiling: 14.3%}, {value: z, ceiling: 0.1%}]}, descriptors: [{key: c}]}]\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := descriptors.Parse(descriptors.Source{Name: "fuzz.yaml", Data: data})
		if (c == nil) == (err == nil) {
			t.Fatalf("Parse = %v, %v: want exactly one of a Config and an error", c, err)
		}
		if err != nil {
			for _, e := range errorList(t, err) {
				if !fuzzPrefix.MatchString(e.Error()) {
					t.Fatalf("error %q does not start with fuzz.yaml:line:col: ", e)
				}
			}
			return
		}
		for _, w := range c.Warnings {
			if !fuzzPrefix.MatchString(w.Error()) {
				t.Fatalf("warning %q does not start with fuzz.yaml:line:col: ", w)
			}
		}
		for _, d := range c.Domains() {
			for _, r := range d.Rules {
				c.Match(d.Name, []descriptors.Entry{{Key: r.Key, Value: r.Value}, {Key: r.Key, Value: string(data)}})
			}
			checkWindows(t, d.Rules)
		}
	})
}

// checkWindows fails if a loaded limit's window is not in (0, MaxWindow].
func checkWindows(t *testing.T, rules []*descriptors.Rule) {
	t.Helper()
	for _, r := range rules {
		if l := r.Limit; l != nil && (l.Window() <= 0 || l.Window() > descriptors.MaxWindow) {
			t.Fatalf("rule %s loaded with window %v (%v x %d)", r.FullKey, l.Window(), l.Unit, l.UnitMultiplier)
		}
		checkWindows(t, r.Children)
	}
}

// treeGen makes a Document from fuzz input, the way a source converts what
// it holds into the tree: every byte picks a field's state, a string from
// a vocabulary that reaches each rule (or the input's own bytes), a number
// or the shape of the tree.
type treeGen struct {
	data  []byte
	nodes int
}

func (g *treeGen) next() byte {
	if len(g.data) == 0 {
		return 0
	}
	b := g.data[0]
	g.data = g.data[1:]
	return b
}

var treeWords = []string{"", "a", "b", "*", "a*b", "second", "MINUTE", "year", "week", "minutes",
	"sliding_window", "token_bucket", "error", "Deny", "open", "me"}

func (g *treeGen) str() descriptors.Field[string] {
	b := g.next()
	switch b % 4 {
	case 0:
		return descriptors.Field[string]{}
	case 1:
		return descriptors.Field[string]{State: descriptors.FieldInvalid}
	}
	if int(b/4) < len(treeWords) {
		return descriptors.Set(treeWords[b/4])
	}
	n := min(int(g.next()%16), len(g.data))
	s := string(g.data[:n])
	g.data = g.data[n:]
	return descriptors.Set(s)
}

func (g *treeGen) num() descriptors.Field[uint32] {
	switch b := g.next(); b % 6 {
	case 0:
		return descriptors.Field[uint32]{}
	case 1:
		return descriptors.Set(uint32(0))
	case 2:
		return descriptors.Set(uint32(b))
	case 3:
		return descriptors.Set(uint32(300))
	case 4:
		return descriptors.Set(^uint32(0))
	default:
		return descriptors.Set(uint32(g.next())<<24 | uint32(g.next())<<8 | uint32(g.next()))
	}
}

func (g *treeGen) flag() descriptors.Field[bool] {
	b := g.next()
	return descriptors.Field[bool]{Value: b&4 != 0, State: descriptors.FieldState(b % 3)}
}

func (g *treeGen) rateLimit() *descriptors.RateLimitNode {
	if g.next()%4 == 0 {
		return nil
	}
	rl := &descriptors.RateLimitNode{Name: g.str(), Unit: g.str(), RequestsPerUnit: g.num(),
		Unlimited: g.flag(), UnitMultiplier: g.num(), Algorithm: g.str()}
	if b := g.next(); b%3 != 0 {
		rl.Replaces.State = descriptors.FieldSet
		for range b % 4 {
			if g.next()%5 == 0 {
				rl.Replaces.Value = append(rl.Replaces.Value, nil)
				continue
			}
			rl.Replaces.Value = append(rl.Replaces.Value, &descriptors.ReplaceNode{Name: g.str()})
		}
	}
	return rl
}

func (g *treeGen) descriptors(depth int) []*descriptors.Node {
	var nodes []*descriptors.Node
	for n := g.next() % 4; n > 0 && g.nodes < 1000 && len(g.data) > 0; n-- {
		g.nodes++
		if g.next()%7 == 0 {
			nodes = append(nodes, nil)
			continue
		}
		b := g.next()
		nd := &descriptors.Node{Key: g.str(), Value: g.str(), RateLimit: g.rateLimit(),
			ShadowMode: descriptors.Set(b&1 != 0), QuotaMode: descriptors.Set(b&2 != 0), ShareThreshold: descriptors.Set(b&4 != 0)}
		if depth < 80 {
			nd.Descriptors = g.descriptors(depth + 1)
		}
		nodes = append(nodes, nd)
	}
	return nodes
}

// FuzzBuild checks the builder on trees no YAML file makes, as an xDS source
// will hand it: it never panics, returns exactly one of a Config and an
// error, positions every error and warning by the source's form
// ("xds:name: path: message", no line), and loads no window outside
// (0, MaxWindow].
func FuzzBuild(f *testing.F) {
	for _, seed := range []string{
		"",                 // nothing: a document with no fields
		"\x06\x02\x01\x05", // a few fields set
		strings.Repeat("\x07\x13\x01\x01\x05\x1d\x03\x05\x02\x0e", 20), // nested rules with limits
		strings.Repeat("\x01\x01", 200),                                // deep nesting
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &treeGen{data: data}
		docs := []*descriptors.Document{
			{File: "xds:one", Domain: g.str(), FailureMode: g.str(), Descriptors: g.descriptors(1)},
			{File: "xds:two", Domain: g.str(), Descriptors: g.descriptors(1)},
		}
		c, err := descriptors.Build(docs...)
		if (c == nil) == (err == nil) {
			t.Fatalf("Build = %v, %v: want exactly one of a Config and an error", c, err)
		}
		var problems []error
		if err != nil {
			for _, e := range errorList(t, err) {
				problems = append(problems, e)
			}
		} else {
			problems = c.Warnings
		}
		for _, p := range problems {
			var e *descriptors.Error
			if !errors.As(p, &e) || e.Line != 0 || !strings.HasPrefix(e.Error(), e.File+": ") || !strings.HasPrefix(e.File, "xds:") {
				t.Fatalf("problem %q is not positioned as xds:name: ...", p)
			}
		}
		for _, d := range c.Domains() {
			checkWindows(t, d.Rules)
			for _, r := range d.Rules {
				c.Match(d.Name, []descriptors.Entry{{Key: r.Key, Value: r.Value}})
			}
		}
	})
}
