package descriptors_test

import (
	"regexp"
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
		}
	})
}
