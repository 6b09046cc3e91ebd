package ratelimit

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// FuzzCounterKey checks that two different descriptors never share a counter
// key: a one-entry descriptor, a two-entry one (optionally an override) and
// one entry holding both entries' bytes, in two domains.
func FuzzCounterKey(f *testing.F) {
	f.Add("d", "k", "v", "k2", "v2", false)                 // plain
	f.Add("d_k", "v", "", "", "", false)                    // naive joining would collide with the next
	f.Add("d", "k_v", "", "", "", false)                    // ditto
	f.Add("d", "k", strings.Repeat("x", 200), "", "", true) // hashed value, override
	f.Add("d", "k", "\xff\xfe{}|=:%", "k", "", false)       // odd bytes, empty value
	f.Add("d", "k", "v", "o", "", true)                     // an override next to an entry tagged like it
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string, override bool) {
		type desc struct {
			entries  []descriptors.Entry
			override bool
		}
		ds := map[string]desc{
			"a": {entries: []descriptors.Entry{{Key: k1, Value: v1}}},
			"b": {entries: []descriptors.Entry{{Key: k1, Value: v1}, {Key: k2, Value: v2}}, override: override},
			"c": {entries: []descriptors.Entry{{Key: k1 + k2, Value: v1 + v2}}},
			"d": {entries: []descriptors.Entry{{Key: k1, Value: v1}}, override: true},
		}
		keys := map[string]string{}
		for name, d := range ds {
			for _, dom := range []string{domain, domain + "x"} {
				k := counterKey(dom, d.entries, nil, d.override)
				id := name + "@" + dom
				if prev, ok := keys[k]; ok && !sameDescriptor(prev, id, k2, v2) {
					t.Fatalf("%s and %s share key %q", prev, id, k)
				}
				keys[k] = id
			}
		}
	})
}

// sameDescriptor reports whether two fuzz descriptors are in fact equal
// (c equals a when k2 and v2 are empty).
func sameDescriptor(x, y, k2, v2 string) bool {
	dx, dy := strings.SplitN(x, "@", 2), strings.SplitN(y, "@", 2)
	if dx[1] != dy[1] {
		return false
	}
	pair := map[string]bool{dx[0]: true, dy[0]: true}
	return pair["a"] && pair["c"] && k2 == "" && v2 == ""
}

func TestCounterKeyLongValues(t *testing.T) {
	long := strings.Repeat("v", 1<<20)
	k1 := counterKey("d", []descriptors.Entry{{Key: "k", Value: long}}, nil, false)
	k2 := counterKey("d", []descriptors.Entry{{Key: "k", Value: long[1:] + "w"}}, nil, false)
	if len(k1) > 64 || k1 == k2 {
		t.Errorf("1 MiB values: keys of %d and %d bytes, equal=%v; want short and distinct", len(k1), len(k2), k1 == k2)
	}
}

func TestRuleLabel(t *testing.T) {
	const longHash = "2530bbf4a5" // 40 bits of the FNV-1a hash of 60,000 "v"
	cfg, err := descriptors.Load("testdata/test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		entries []string
		want    string // ruleLabel: the key path
		metric  string // metricRule: the name when there is one
		fixed   bool   // metricRule: the label holds no request value
	}{
		// A named limit is labelled by its name in Sluice's metrics, by its
		// key path in the peer's; detailed_metric and value_to_metric ask
		// for values and win.
		{[]string{"api_key", "secret"}, "api_key", "per_key", true},
		{[]string{"api_key", "secret", "route", "search"}, "api_key.route_search", "search", true},
		{[]string{"files", "files/a"}, "files_files/*", "files_files/*", true},
		{[]string{"detailed", "x"}, "detailed_x", "detailed_x", false},
		{[]string{"tenant", "acme", "op", "read"}, "tenant_acme.op", "tenant_acme.op", false},
		// A request's bytes that are not UTF-8 become U+FFFD, a run of them
		// one: Prometheus refuses (panics on) such a label value.
		{[]string{"detailed", "caf\xe9"}, "detailed_caf\uFFFD", "detailed_caf\uFFFD", false},
		{[]string{"tenant", "\xff\xfe", "op", "read"}, "tenant_\uFFFD.op", "tenant_\uFFFD.op", false},
		// A long value keeps its start and a hash of the whole: at most
		// MaxLabelValue bytes.
		{[]string{"detailed", strings.Repeat("v", 60000)}, "detailed_" + strings.Repeat("v", 50) + "…#" + longHash, "detailed_" + strings.Repeat("v", 50) + "…#" + longHash, false},
	} {
		var es []descriptors.Entry
		for i := 0; i+1 < len(tc.entries); i += 2 {
			es = append(es, descriptors.Entry{Key: tc.entries[i], Value: tc.entries[i+1]})
		}
		st := Status{Rule: cfg.Match("test", es)}
		if got := ruleLabel("test", &st, es); got != tc.want {
			t.Errorf("ruleLabel(%v) = %q, want %q", tc.entries, got, tc.want)
		}
		if got, fixed := metricRule("test", &st, st.Rule.Limit, es); got != tc.metric || fixed != tc.fixed {
			t.Errorf("metricRule(%v) = %q, %v; want %q, %v", tc.entries, got, fixed, tc.metric, tc.fixed)
		}
	}
}
