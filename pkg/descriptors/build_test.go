package descriptors_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// These tests build Documents by hand, as an xDS source converts
// RateLimitConfig resources: no positions, File "xds:<resource name>", and
// proto3's lack of presence (every field of a message that is there is set).

// xdsDoc is one resource called name for domain.
func xdsDoc(name, domain string, nodes ...*descriptors.Node) *descriptors.Document {
	return &descriptors.Document{File: "xds:" + name, Domain: descriptors.Set(domain), Descriptors: nodes}
}

// xdsNode is a descriptor key=value with limit rl (nil for none).
func xdsNode(key, value string, rl *descriptors.RateLimitNode, children ...*descriptors.Node) *descriptors.Node {
	return &descriptors.Node{Key: descriptors.Set(key), Value: descriptors.Set(value), RateLimit: rl, Descriptors: children}
}

// xdsLimit is a rate_limit as a converted RateLimitPolicy: unit "" stands
// for UNKNOWN (0), which a converter leaves absent.
func xdsLimit(n uint32, unit string) *descriptors.RateLimitNode {
	rl := &descriptors.RateLimitNode{
		RequestsPerUnit: descriptors.Set(n),
		Unlimited:       descriptors.Set(false),
		Name:            descriptors.Set(""),
		Replaces:        descriptors.Set([]*descriptors.ReplaceNode{}),
	}
	if unit != "" {
		rl.Unit = descriptors.Set(unit)
	}
	return rl
}

func replaces(names ...string) descriptors.Field[[]*descriptors.ReplaceNode] {
	var out []*descriptors.ReplaceNode
	for _, n := range names {
		out = append(out, &descriptors.ReplaceNode{Name: descriptors.Set(n)})
	}
	return descriptors.Set(out)
}

// TestBuildPositionless checks that a tree without positions loads, and that
// its rules carry the resource name and no line.
func TestBuildPositionless(t *testing.T) {
	c, err := descriptors.Build(
		nil, // skipped
		xdsDoc("first-listener", "first-listener",
			xdsNode("first-route", "first-route", nil,
				xdsNode("rule-0-match-0", "", xdsLimit(5, "SECOND")),
				xdsNode("rule-1-match-0", "", xdsLimit(0, "minute")),
			),
		),
	)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if got := c.Files; len(got) != 1 || got[0] != "xds:first-listener" {
		t.Errorf("Files = %q, want [xds:first-listener]", got)
	}
	r := c.Match("first-listener", entries("first-route", "first-route", "rule-0-match-0", "anything"))
	if r == nil || r.Limit == nil || r.Limit.RequestsPerUnit != 5 || r.Limit.Unit != descriptors.Second ||
		r.File != "xds:first-listener" || r.Line != 0 || r.FullKey != "first-listener.first-route_first-route.rule-0-match-0" {
		t.Errorf("Match(rule-0) = %+v", r)
	}
	if r := c.Match("first-listener", entries("first-route", "first-route", "rule-1-match-0", "x")); r == nil || r.Limit == nil || r.Limit.RequestsPerUnit != 0 {
		t.Errorf("Match(rule-1) = %+v, want requests_per_unit 0", r)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("Warnings = %v, want none", c.Warnings)
	}
}

// TestBuildErrors checks the builder's rules on trees without positions:
// every error reads "xds:name: path: message".
func TestBuildErrors(t *testing.T) {
	// A converter leaves requests_per_unit 0 absent on an unlimited limit.
	unlimited := &descriptors.RateLimitNode{Unlimited: descriptors.Set(true), Unit: descriptors.Set("HOUR")}
	self := xdsLimit(1, "SECOND")
	self.Name = descriptors.Set("me")
	self.Replaces = replaces("", "me")
	multiplier := xdsLimit(1, "second")
	multiplier.UnitMultiplier = descriptors.Set(uint32(0))
	algorithm := xdsLimit(1, "second")
	algorithm.Algorithm = descriptors.Set("leaky")

	for _, tc := range []struct {
		name string
		docs []*descriptors.Document
		want []string
	}{
		{"unknown unit", []*descriptors.Document{xdsDoc("r", "d", xdsNode("k", "", xdsLimit(1, "FORTNIGHT")))},
			[]string{`xds:r: descriptors[0].rate_limit.unit: unknown unit "FORTNIGHT" (want second, minute, hour, day, week, month or year)`}},
		{"unit UNKNOWN", []*descriptors.Document{xdsDoc("r", "d", xdsNode("k", "", xdsLimit(1, "")))},
			[]string{`xds:r: descriptors[0].rate_limit.unit: missing unit (want second, minute, hour, day, week, month or year)`}},
		{"unlimited with unit", []*descriptors.Document{xdsDoc("r", "d", xdsNode("k", "", unlimited))},
			[]string{`xds:r: descriptors[0].rate_limit.unit: unit with unlimited: true (an unlimited limit counts nothing; remove one of them)`}},
		{"replaces empty and self", []*descriptors.Document{xdsDoc("r", "d", xdsNode("k", "", self))},
			[]string{
				`xds:r: descriptors[0].rate_limit.replaces[0].name: empty name (want the name of the limit to replace)`,
				`xds:r: descriptors[0].rate_limit.replaces[1].name: limit "me" replaces itself`,
			}},
		{"sluice fields", []*descriptors.Document{xdsDoc("r", "d", xdsNode("k", "", multiplier), xdsNode("k", "v", algorithm))},
			[]string{
				`xds:r: descriptors[0].rate_limit.unit_multiplier: want an integer from 1 to 4294967295, got the integer 0`,
				`xds:r: descriptors[1].rate_limit.algorithm: unknown algorithm "leaky" (want sliding_window, token_bucket, fixed_window, sliding_log or concurrency)`,
			}},
		{"empty key and duplicate siblings", []*descriptors.Document{xdsDoc("r", "d",
			xdsNode("", "", xdsLimit(1, "second")),
			xdsNode("a", "x", xdsLimit(1, "second")),
			xdsNode("a", "x", xdsLimit(2, "second")))},
			[]string{
				`xds:r: descriptors[0].key: empty key`,
				`xds:r: descriptors[2]: duplicate descriptor: key "a" with value "x" is already at descriptors[1]`,
			}},
		{"domain missing, empty, twice", []*descriptors.Document{
			{File: "xds:none"},
			xdsDoc("empty", ""),
			xdsDoc("a", "api"),
			xdsDoc("b", "api"),
		}, []string{
			`xds:b: domain: domain "api" is already defined in xds:a (one domain per resource; the xDS server must send each domain in a single RateLimitConfig)`,
			`xds:empty: domain: empty domain`,
			`xds:none: domain: missing domain`,
		}},
		{"holes in the tree", []*descriptors.Document{xdsDoc("r", "d",
			nil,
			xdsNode("k", "", &descriptors.RateLimitNode{Unit: descriptors.Field[string]{State: descriptors.FieldInvalid},
				RequestsPerUnit: descriptors.Set(uint32(1))}))},
			[]string{
				`xds:r: descriptors[0]: a value its source could not decode`,
				`xds:r: descriptors[1].rate_limit.unit: a value its source could not decode`,
			}},
		{"failure mode", []*descriptors.Document{{File: "xds:r", Domain: descriptors.Set("d"), FailureMode: descriptors.Set("open")}},
			[]string{`xds:r: failure_mode: unknown failure_mode "open" (want error, allow, deny or local)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := descriptors.Build(tc.docs...)
			if err == nil {
				t.Fatalf("Build = %v, nil; want errors", c)
			}
			if got, want := err.Error(), strings.Join(tc.want, "\n"); got != want {
				t.Errorf("Build error:\n%s\nwant:\n%s", got, want)
			}
			for _, e := range errorList(t, err) {
				if e.Line != 0 || e.Column != 0 {
					t.Errorf("error %q has a position, want none", e)
				}
			}
		})
	}
}

// TestBuildDepth checks that the builder bounds nesting itself, for sources
// that are not YAML, and that a tree built by hand that contains itself is
// refused rather than walked forever.
func TestBuildDepth(t *testing.T) {
	deep := xdsNode("k", "", xdsLimit(1, "second"))
	for range 70 {
		deep = xdsNode("k", "", nil, deep)
	}
	loop := xdsNode("k", "", nil)
	loop.Descriptors = []*descriptors.Node{loop}
	for name, n := range map[string]*descriptors.Node{"deep": deep, "loop": loop} {
		t.Run(name, func(t *testing.T) {
			_, err := descriptors.Build(xdsDoc("r", "d", n))
			want := "xds:r: descriptors" + strings.Repeat("[0].descriptors", 64) + ": descriptors nested more than 64 deep"
			if err == nil || err.Error() != want {
				t.Errorf("Build = %v, want %q", err, want)
			}
		})
	}
}

// TestBuildWarnings checks warnings on a tree without positions.
func TestBuildWarnings(t *testing.T) {
	rl := xdsLimit(1, "second")
	rl.Replaces = replaces("nowhere")
	c, err := descriptors.Build(xdsDoc("r", "d", xdsNode("k", "", rl), xdsNode("open", "", nil)))
	if err != nil {
		t.Fatal(err)
	}
	want := `xds:r: descriptors[0].rate_limit.replaces[0].name: replaces "nowhere", which names no limit in domain "d"` + "\n" +
		`xds:r: descriptors[1]: no rate_limit and no descriptors: a request that matches here is never limited`
	if got := errors.Join(c.Warnings...).Error(); got != want {
		t.Errorf("Warnings:\n%s\nwant:\n%s", got, want)
	}
}

// TestBuildKeepsDocuments checks that Build does not modify its input: the
// same Documents build the same Config twice.
func TestBuildKeepsDocuments(t *testing.T) {
	doc := xdsDoc("r", "d", xdsNode("k", "", xdsLimit(3, "minute"), nil...))
	for i := range 2 {
		c, err := descriptors.Build(doc)
		if err != nil {
			t.Fatal(err)
		}
		if r := c.Match("d", entries("k", "v")); r == nil || r.Limit == nil || r.Limit.RequestsPerUnit != 3 || len(r.Lineage) != 1 {
			t.Errorf("build %d: Match = %+v", i, r)
		}
	}
}

// TestFailureMode checks a domain's failure_mode from YAML and from a tree:
// every mode, in any case, and error among them.
func TestFailureMode(t *testing.T) {
	for _, tc := range []struct {
		spelled string
		want    descriptors.FailureMode
	}{
		{"error", descriptors.FailureModeError},
		{"ERROR", descriptors.FailureModeError},
		{"allow", descriptors.FailureModeAllow},
		{"Deny", descriptors.FailureModeDeny},
	} {
		yaml := mustParse(t, "domain: d\nfailure_mode: "+tc.spelled+"\n")
		tree, err := descriptors.Build(&descriptors.Document{File: "xds:d", Domain: descriptors.Set("d"), FailureMode: descriptors.Set(tc.spelled)})
		if err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]*descriptors.Config{"yaml": yaml, "tree": tree} {
			if got := c.Domain("d").FailureMode; got != tc.want {
				t.Errorf("%s: failure_mode %q = %v, want %v", name, tc.spelled, got, tc.want)
			}
		}
	}
	if c := mustParse(t, "domain: d\n"); c.Domain("d").FailureMode != descriptors.FailureModeUnset {
		t.Errorf("no failure_mode = %v, want unset", c.Domain("d").FailureMode)
	}
}

// TestAlgorithmFields: the algorithm fields load with their defaults, and a
// rule's rate_limits become its Limits, named by window unless named.
func TestAlgorithmFields(t *testing.T) {
	cfg, err := descriptors.Parse(descriptors.Source{Name: "algorithms.yaml", Data: []byte(`
domain: d
descriptors:
  - key: classic
    rate_limit: {unit: minute, requests_per_unit: 10, sub_windows: 1}
  - key: default
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 30, overdraw: true}
  - key: multi
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {unit: second, requests_per_unit: 15, algorithm: token_bucket}
      - {unit: hour, requests_per_unit: 1000, name: hourly}
`)})
	if err != nil {
		t.Fatal(err)
	}
	rule := func(k string) *descriptors.Rule { return cfg.Match("d", []descriptors.Entry{{Key: k, Value: "v"}}) }
	if l := rule("classic").Limit; l.SubWindows != 1 || l.Overdraw != nil {
		t.Errorf("classic = %+v, want sub_windows 1 and overdraw unset", l)
	}
	if l := rule("default").Limit; l.SubWindows != limiter.DefaultSubWindows || l.Algorithm != limiter.SlidingWindow {
		t.Errorf("default = %+v, want %d sub-windows", l, limiter.DefaultSubWindows)
	}
	if l := rule("bucket").Limit; l.Algorithm != limiter.TokenBucket || l.Burst != 30 || l.SubWindows != 0 || l.Overdraw == nil || !*l.Overdraw {
		t.Errorf("bucket = %+v", l)
	}
	m := rule("multi")
	var names []string
	for _, l := range m.Limits {
		names = append(names, m.LimitName("d", l))
	}
	if want := []string{"multi/1s/sliding_window", "multi/1s/token_bucket", "hourly"}; m.Limit != m.Limits[0] || !slices.Equal(names, want) {
		t.Errorf("multi: Limit %p, Limits %v named %q, want the first and %q", m.Limit, m.Limits, names, want)
	}
	if got := rule("default").LimitName("d", rule("default").Limit); got != "default" {
		t.Errorf("a single limit's name = %q, want the rule's", got)
	}
}

// TestRateLimitsAccepted: what the checks across rate_limits refuse (the
// goldens rate_limits_names and rate_limits_concurrency) leaves these
// alone: limits without names, distinct names, the same name on two rules,
// and concurrency limits only beside each other.
func TestRateLimitsAccepted(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       int // limits of rule "k"
	}{
		{"no names", `
  - key: k
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {unit: hour, requests_per_unit: 1000}`, 2},
		{"distinct names", `
  - key: k
    rate_limits:
      - {unit: second, requests_per_unit: 10, name: burst}
      - {unit: hour, requests_per_unit: 1000, name: sustained}
      - {unit: day, requests_per_unit: 9000}`, 3},
		{"one name on two rules", `
  - key: k
    rate_limits:
      - {unit: second, requests_per_unit: 10, name: shared}
      - {unit: hour, requests_per_unit: 1000}
  - key: other
    rate_limits:
      - {unit: second, requests_per_unit: 10, name: shared}
      - {unit: hour, requests_per_unit: 1000}`, 2},
		{"concurrency beside concurrency", `
  - key: k
    rate_limits:
      - {unit: minute, requests_per_unit: 5, algorithm: concurrency}
      - {unit: hour, requests_per_unit: 50, algorithm: concurrency}`, 2},
		{"concurrency on a sibling descriptor", `
  - key: k
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {unit: hour, requests_per_unit: 1000, algorithm: token_bucket}
  - key: streams
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: concurrency}`, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := descriptors.Parse(descriptors.Source{Name: "accepted.yaml", Data: []byte("domain: d\ndescriptors:" + tc.yaml + "\n")})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if r := c.Match("d", entries("k", "v")); r == nil || len(r.Limits) != tc.want {
				t.Errorf("Match(k) = %+v, want %d limits", r, tc.want)
			}
		})
	}
}

// TestLimitNames: a limit of rate_limits without a name is called
// "<rule>/<window>", the window in Go's duration text without its zero
// minutes and seconds, followed by "/<algorithm>" when another limit of the
// rule has the same window. These names are in the RateLimit headers and
// the metrics' rule label, so they must not change from one release to the
// next.
func TestLimitNames(t *testing.T) {
	cfg, err := descriptors.Parse(descriptors.Source{Name: "names.yaml", Data: []byte(`
domain: d
descriptors:
  - key: api
    descriptors:
      - key: user
        rate_limits:
          - {unit: second, requests_per_unit: 10}
          - {unit: minute, requests_per_unit: 100}
          - {unit: minute, requests_per_unit: 100, algorithm: token_bucket}
          - {unit: hour, requests_per_unit: 1000}
          - {unit: day, requests_per_unit: 10000}
  - key: odd
    rate_limits:
      - {unit: second, unit_multiplier: 90, requests_per_unit: 1}
      - {unit: minute, unit_multiplier: 90, requests_per_unit: 1}
      - {unit: second, unit_multiplier: 3630, requests_per_unit: 1}
      - {unit: second, unit_multiplier: 7200, requests_per_unit: 1}
      - {unit: week, requests_per_unit: 1}
      - {unit: month, requests_per_unit: 1}
      - {unit: year, unit_multiplier: 10, requests_per_unit: 1}
      - {unit: minute, unit_multiplier: 5, requests_per_unit: 1, name: five_minutes}
`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		entries []descriptors.Entry
		want    []string
	}{
		{entries("api", "a", "user", "u"), []string{"api.user/1s", "api.user/1m/sliding_window", "api.user/1m/token_bucket", "api.user/1h", "api.user/24h"}},
		{entries("odd", "o"), []string{"odd/1m30s", "odd/1h30m", "odd/1h0m30s", "odd/2h", "odd/168h", "odd/720h", "odd/87600h", "five_minutes"}},
	} {
		r := cfg.Match("d", tc.entries)
		if r == nil {
			t.Fatalf("Match(%v) = nil", tc.entries)
		}
		var got []string
		for _, l := range r.Limits {
			got = append(got, r.LimitName("d", l))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("LimitName of %s's limits = %q, want %q", r.FullKey, got, tc.want)
		}
	}
}
