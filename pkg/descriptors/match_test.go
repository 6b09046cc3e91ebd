package descriptors_test

import (
	"testing"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// matchConfig exercises every matching rule; each rule's requests_per_unit
// is unique where a test needs to tell rules apart.
const matchConfig = `domain: api
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: remote_address
    value: 10.0.0.1
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: remote_address
    value: 10.0.*
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: remote_address
    value: 10.*
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: path
    value: /api*v1
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 6}
  - key: path
    value: "*.json"
    rate_limit: {unit: minute, requests_per_unit: 7}
  - key: path
    value: a*a
    rate_limit: {unit: minute, requests_per_unit: 8}
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 9}
        descriptors:
          - key: method
            value: GET
            rate_limit: {unit: second, requests_per_unit: 10}
      - key: user
        value: u*
        descriptors:
          - key: method
            rate_limit: {unit: second, requests_per_unit: 11}
  - key: trusted
    value: yes
  - key: open
    rate_limit: {unlimited: true}
`

func mustParse(t testing.TB, yaml string) *descriptors.Config {
	t.Helper()
	c, err := descriptors.Parse(descriptors.Source{Name: "match.yaml", Data: []byte(yaml)})
	if err != nil {
		t.Fatalf("Parse:\n%v", err)
	}
	return c
}

func entries(kv ...string) []descriptors.Entry {
	var es []descriptors.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, descriptors.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

func TestMatch(t *testing.T) {
	c := mustParse(t, matchConfig)
	for _, tc := range []struct {
		name    string
		domain  string
		entries []descriptors.Entry
		want    string // FullKey of the matched rule, "" for nil
	}{
		{"exact value wins over wildcard and key-only", "api", entries("remote_address", "10.0.0.1"), "api.remote_address_10.0.0.1"},
		{"first wildcard in config order wins", "api", entries("remote_address", "10.0.9.9"), "api.remote_address_10.0.*"},
		{"later wildcard when the first does not match", "api", entries("remote_address", "10.1.0.1"), "api.remote_address_10.*"},
		{"key-only when no value matches", "api", entries("remote_address", "192.168.0.1"), "api.remote_address"},
		{"key-only matches an empty value", "api", entries("remote_address", ""), "api.remote_address"},
		{"middle wildcard", "api", entries("path", "/api/users/v1"), "api.path_/api*v1"},
		{"middle wildcard matches an empty run", "api", entries("path", "/apiv1"), "api.path_/api*v1"},
		{"middle wildcard needs the suffix", "api", entries("path", "/api/users/v2"), ""},
		{"several wildcards", "api", entries("path", "foo-1-bar-2-baz"), "api.path_foo*bar*baz"},
		{"several wildcards, adjacent parts", "api", entries("path", "foobarbaz"), "api.path_foo*bar*baz"},
		{"several wildcards in the wrong order", "api", entries("path", "foobazbar"), ""},
		{"leading wildcard", "api", entries("path", "/x/y.json"), "api.path_*.json"},
		{"prefix and suffix may not overlap", "api", entries("path", "a"), ""},
		{"prefix and suffix of one pattern", "api", entries("path", "aa"), "api.path_a*a"},
		{"a literal star is just a value", "api", entries("path", "*"), ""},
		{"unknown key", "api", entries("nope", "x"), ""},
		{"unknown domain", "other", entries("remote_address", "10.0.0.1"), ""},
		{"no entries", "api", nil, ""},
		{"nested exact path", "api", entries("tenant", "acme", "user", "bob", "method", "GET"), "api.tenant_acme.user.method_GET"},
		{"nested key-only leaf", "api", entries("tenant", "acme", "user", "bob"), "api.tenant_acme.user"},
		{"nested wildcard beats key-only", "api", entries("tenant", "acme", "user", "u42", "method", "GET"), "api.tenant_acme.user_u*.method"},
		{"nested wildcard node without a limit is still returned", "api", entries("tenant", "acme", "user", "u42"), "api.tenant_acme.user_u*"},
		{"shallower than a limit: parent without a limit", "api", entries("tenant", "acme"), "api.tenant_acme"},
		{"deeper than the config", "api", entries("remote_address", "10.0.0.1", "path", "/"), ""},
		{"deeper than the rule: no fallback to the parent", "api", entries("tenant", "acme", "user", "bob", "method", "POST"), ""},
		{"nested needs its parent", "api", entries("user", "bob"), ""},
		{"parent value must match", "api", entries("tenant", "other", "user", "bob"), ""},
		{"whitelist node", "api", entries("trusted", "yes"), "api.trusted_yes"},
		{"unlimited node", "api", entries("open", "anything"), "api.open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.Match(tc.domain, tc.entries)
			got := ""
			if r != nil {
				got = r.FullKey
				if len(r.Lineage) != len(tc.entries) || r.Lineage[len(r.Lineage)-1] != r {
					t.Errorf("Match(%q, %v).Lineage = %v, want %d rules ending in the match", tc.domain, tc.entries, r.Lineage, len(tc.entries))
				}
			}
			if got != tc.want {
				t.Errorf("Match(%q, %v) = %q, want %q", tc.domain, tc.entries, got, tc.want)
			}
		})
	}
}

// TestMatchLimits checks what the matched rules carry: the right limit, no
// limit for a whitelist, Unlimited for unlimited.
func TestMatchLimits(t *testing.T) {
	c := mustParse(t, matchConfig)
	if r := c.Match("api", entries("tenant", "acme", "user", "bob", "method", "GET")); r == nil || r.Limit == nil || r.Limit.RequestsPerUnit != 10 || r.Limit.Unit != descriptors.Second {
		t.Errorf("nested GET matched %+v, want 10/second", r)
	}
	if r := c.Match("api", entries("trusted", "yes")); r == nil || r.Limit != nil || r.Unlimited {
		t.Errorf("whitelist matched %+v, want a rule with no Limit", r)
	}
	if r := c.Match("api", entries("open", "x")); r == nil || r.Limit != nil || !r.Unlimited {
		t.Errorf("unlimited matched %+v, want Unlimited with no Limit", r)
	}
	var nilConfig *descriptors.Config
	if r := nilConfig.Match("api", entries("open", "x")); r != nil {
		t.Errorf("nil Config matched %+v", r)
	}
}

// TestMatchAllocs checks that Match does not allocate, hit or miss.
func TestMatchAllocs(t *testing.T) {
	c := mustParse(t, matchConfig)
	for _, es := range [][]descriptors.Entry{
		entries("tenant", "acme", "user", "u42", "method", "GET"),
		entries("path", "foo-1-bar-2-baz"),
		entries("remote_address", "192.168.0.1"),
		entries("nope", "x"),
	} {
		if n := testing.AllocsPerRun(100, func() { c.Match("api", es) }); n != 0 {
			t.Errorf("Match(api, %v) allocates %v times, want 0", es, n)
		}
	}
}

// BenchmarkMatch matches typical request descriptors: an exact hit, a
// wildcard scan, a key-only default and a three-level nested walk.
func BenchmarkMatch(b *testing.B) {
	c := mustParse(b, matchConfig)
	reqs := [][]descriptors.Entry{
		entries("remote_address", "10.0.0.1"),
		entries("remote_address", "10.1.2.3"),
		entries("remote_address", "192.168.0.1"),
		entries("path", "foo-1-bar-2-baz"),
		entries("tenant", "acme", "user", "u42", "method", "GET"),
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, es := range reqs {
			if c.Match("api", es) == nil {
				b.Fatalf("Match(api, %v) = nil", es)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(len(reqs)*b.N), "ns/descriptor")
}
