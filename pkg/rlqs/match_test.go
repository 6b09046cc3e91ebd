package rlqs

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

const matchYAML = `domain: d
descriptors:
  - key: api_key
    rate_limit: {name: per_key, unit: minute, requests_per_unit: 100}
    descriptors:
      - key: route
        value: search
        rate_limit: {name: search, unit: minute, requests_per_unit: 10}
  - key: a
    descriptors:
      - key: b
        value: one
        rate_limit: {name: a_b_one, unit: second, requests_per_unit: 1}
  - key: b
    descriptors:
      - key: a
        rate_limit: {name: b_a, unit: second, requests_per_unit: 2}
      - key: c
        descriptors:
          - key: a
            rate_limit: {name: b_c_a, unit: second, requests_per_unit: 3}
  - key: path
    value: /reports/*
    share_threshold: true
    rate_limit: {name: reports, unit: minute, requests_per_unit: 30}
  - key: pool
    rate_limit: {name: pool, unit: second, requests_per_unit: 100}
    classes: {key: priority, ceilings: [{value: critical, ceiling: 100%}, {value: default, ceiling: 80%}]}
    descriptors:
      - key: path
        rate_limit: {name: pool_path, unit: second, requests_per_unit: 5}
`

func parse(t testing.TB, yaml string) *descriptors.Config {
	t.Helper()
	cfg, err := descriptors.Parse(descriptors.Source{Name: "d.yaml", Data: []byte(yaml)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestMatch pins the key order rule: the descriptor tree orders a bucket
// id's keys, trying each level's keys in config order and backing up when a
// path runs out, and a bucket matches only a rule exactly as deep.
func TestMatch(t *testing.T) {
	cfg := parse(t, matchYAML)
	for _, tc := range []struct {
		name   string
		bucket map[string]string
		want   string // entries as k=v joined by ", "
		rule   string // limit name, "" for no rule
	}{
		{"one key", map[string]string{"api_key": "alice"}, "api_key=alice", "per_key"},
		{"map order does not matter", map[string]string{"route": "search", "api_key": "alice"}, "api_key=alice, route=search", "search"},
		{"value decides below", map[string]string{"route": "other", "api_key": "alice"}, "", ""},
		{"first key in config order that leads somewhere", map[string]string{"a": "x", "b": "one"}, "a=x, b=one", "a_b_one"},
		{"backs up when the first path runs out", map[string]string{"a": "x", "b": "two"}, "b=two, a=x", "b_a"},
		{"three levels", map[string]string{"a": "x", "b": "y", "c": "z"}, "b=y, c=z, a=x", "b_c_a"},
		{"too shallow has no limit (a whitelist node)", map[string]string{"b": "y"}, "b=y", ""},
		{"an extra key matches nothing", map[string]string{"api_key": "alice", "tenant": "t"}, "", ""},
		{"unknown key", map[string]string{"tenant": "t"}, "", ""},
		{"wildcard", map[string]string{"path": "/reports/q3.csv"}, "path=/reports/q3.csv", "reports"},
		{"a pool's class", map[string]string{"priority": "critical", "pool": "db"}, "pool=db, priority=critical", "pool"},
		{"a pool without a class", map[string]string{"pool": "db"}, "pool=db", "pool"},
		{"a pool's child", map[string]string{"path": "/x", "pool": "db"}, "pool=db, path=/x", "pool_path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entries, rule := Match(cfg, "d", tc.bucket)
			got, name := "", ""
			if rule != nil && rule.Limit != nil {
				name = rule.Limit.Name
			}
			if rule != nil {
				got = join(entries)
			}
			if got != tc.want || name != tc.rule {
				t.Errorf("Match(%v) = [%s] %q, want [%s] %q", tc.bucket, got, name, tc.want, tc.rule)
			}
			if rule == nil && len(entries) != len(tc.bucket) {
				t.Errorf("Match(%v) without a rule returned %d entries, want all %d sorted", tc.bucket, len(entries), len(tc.bucket))
			}
		})
	}
	if _, r := Match(cfg, "nope", map[string]string{"api_key": "a"}); r != nil {
		t.Errorf("Match in an unknown domain = %v, want nil", r)
	}
}

func join(entries []descriptors.Entry) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = e.Key + "=" + e.Value
	}
	return strings.Join(parts, ", ")
}

// TestBucketKey checks that a bucket id's identity in a stream ignores the
// map's order and tells apart every two different maps, long values
// included.
func TestBucketKey(t *testing.T) {
	long := strings.Repeat("v", maxIDValue+1)
	ids := []map[string]string{
		{"a": "b"}, {"a": "bc"}, {"ab": "c"}, {"a": "", "b": ""}, {"a": "b", "c": "d"}, {"a": "bc", "d": ""},
		{"a": long}, {"a": long + "x"}, {"a": long[:maxIDValue]}, {"a\x00": "b"}, {"a": "\xff"},
	}
	seen := map[string]int{}
	for i, id := range ids {
		k := bucketKey(id)
		if j, ok := seen[k]; ok {
			t.Errorf("bucketKey(%v) = bucketKey(%v)", id, ids[j])
		}
		seen[k] = i
		if len(k) > 200 {
			t.Errorf("bucketKey of %d bytes: long values must be hashed", len(k))
		}
	}
	if bucketKey(map[string]string{"x": "1", "y": "2"}) != bucketKey(map[string]string{"y": "2", "x": "1"}) {
		t.Error("bucketKey depends on the order of the map")
	}
}
