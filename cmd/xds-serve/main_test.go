package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/xdsconfig"
)

func load(t *testing.T, yaml string) *descriptors.Config {
	t.Helper()
	cfg, err := descriptors.Parse(descriptors.Source{Name: "api.yaml", Data: []byte(yaml)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// xdsKeys sets every key of the format that the RateLimitConfig proto has a
// field for.
const xdsKeys = `domain: api
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: api_key
    detailed_metric: true
    rate_limit: {name: per_key, unit: week, requests_per_unit: 0}
    descriptors:
      - key: route
        value: search
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: per_key}]}
  - key: internal
    rate_limit: {unlimited: true}
`

// TestResources: every field the RateLimitConfig proto has is carried, in
// config order, one resource per domain named after it.
func TestResources(t *testing.T) {
	cfg := load(t, xdsKeys)
	got, err := resources(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := &rlsconfv3.RateLimitConfig{Name: "api", Domain: "api", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "remote_address", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 20}},
		{Key: "api_key", DetailedMetric: true, RateLimit: &rlsconfv3.RateLimitPolicy{Name: "per_key", Unit: rlsconfv3.RateLimitUnit_WEEK},
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "route", Value: "search", ShadowMode: true,
				RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1,
					Replaces: []*rlsconfv3.RateLimitReplace{{Name: "per_key"}}}}}},
		{Key: "internal", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
	}}
	if len(got) != 1 || !proto.Equal(got[0], want) {
		t.Errorf("resources = %v, want [%v]", got, want)
	}
}

// TestResourcesRefuseAdditions: a Sluice addition, which Envoy Gateway
// cannot send, is refused at its rule, every one of them.
func TestResourcesRefuseAdditions(t *testing.T) {
	cfg := load(t, `domain: api
failure_mode: allow
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket, burst: 5}
  - key: b
    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 1}
  - key: c
    rate_limits:
      - {unit: second, requests_per_unit: 1}
      - {unit: hour, requests_per_unit: 100}
  - key: d
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: e
    rate_limit: {unit: second, requests_per_unit: 10}
    classes: {key: priority, ceilings: [{value: critical, ceiling: 100%}, {value: default, ceiling: 80%}]}
`)
	_, err := resources(cfg)
	if err == nil {
		t.Fatal("resources: nil error, want the additions refused")
	}
	const tail = ": a Sluice addition that the RateLimitConfig proto has no field for, so Envoy Gateway cannot send it; remove it to try this config over xDS"
	want := strings.Join([]string{
		"api.yaml: failure_mode" + tail,
		"api.yaml:4:5: api.a: rate_limit.algorithm" + tail,
		"api.yaml:4:5: api.a: rate_limit.burst" + tail,
		"api.yaml:6:5: api.b: rate_limit.unit_multiplier" + tail,
		"api.yaml:8:5: api.c: rate_limits" + tail,
		"api.yaml:12:5: api.d: quota_mode" + tail,
		"api.yaml:15:5: api.e: classes" + tail,
	}, "\n")
	if err.Error() != want {
		t.Errorf("resources error:\n%s\nwant:\n%s", err, want)
	}
}

// TestUsage: a missing directory or a bad flag is usage (exit 2), with a
// message naming what is wrong.
func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "want one directory of descriptor YAML files"},
		{[]string{"--interval", "1ms", "dir"}, "--interval 1ms: want 10ms or more"},
		{[]string{"--log-format", "xml", "dir"}, `--log-format "xml": want console or json`},
	} {
		var stderr bytes.Buffer
		if code := run(tc.args, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("run(%q) = %d, %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestResourcesCarryEveryXDSKey: a config that sets every key the
// RateLimitConfig proto has a field for (descriptors.Schema) is the same
// config after a trip through the resources and back (as a Sluice served
// them would build them): every key shows the same.
func TestResourcesCarryEveryXDSKey(t *testing.T) {
	cfg := load(t, xdsKeys)
	shown := map[string]bool{}
	want := showTree(cfg, shown)
	for _, k := range descriptors.Schema() {
		if k.XDS != "" && !shown[k.Level.String()+"."+k.Name] {
			t.Errorf("the test's config sets no %s of a %s: set it, so that its trip over xDS is checked", k.Name, k.Level)
		}
	}
	rcs, err := resources(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var docs []*descriptors.Document
	for _, rc := range rcs {
		docs = append(docs, xdsconfig.Document(rc))
	}
	back, err := descriptors.Build(docs...)
	if err != nil {
		t.Fatal(err)
	}
	if got := showTree(back, nil); !reflect.DeepEqual(got, want) {
		t.Errorf("after a trip over xDS the config shows\n%v\nwant\n%v", got, want)
	}
}

// showTree is what cfg shows of every domain, rule and limit (Show), as
// plain values; it notes in seen each level's keys shown.
func showTree(cfg *descriptors.Config, seen map[string]bool) []any {
	var walk func(level descriptors.Level, kvs []descriptors.KeyValue) any
	value := func(x any) any {
		switch x := x.(type) {
		case *descriptors.Limit:
			return walk(descriptors.LevelRateLimit, x.Show())
		case []*descriptors.Rule:
			var out []any
			for _, r := range x {
				out = append(out, walk(descriptors.LevelDescriptor, r.Show()))
			}
			return out
		}
		return x
	}
	walk = func(level descriptors.Level, kvs []descriptors.KeyValue) any {
		var out []any
		for _, kv := range kvs {
			l := levelOf(level, kv.Key)
			if seen != nil {
				seen[l.String()+"."+kv.Key] = true
			}
			out = append(out, kv.Key, value(kv.Value))
		}
		return out
	}
	var out []any
	for _, d := range cfg.Domains() {
		out = append(out, walk(descriptors.LevelDomain, d.Show()))
	}
	return out
}

// levelOf is the level of the key called key that an object of level shows:
// its own, or a deeper one's (a rule shows its rate_limit's unlimited).
func levelOf(level descriptors.Level, key string) descriptors.Level {
	for _, k := range descriptors.Schema() {
		if k.Name == key && k.Level >= level {
			return k.Level
		}
	}
	return level
}
