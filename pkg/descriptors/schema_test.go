package descriptors

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestSchemaShape: each key is declared once, with the reader of its own
// level's source tree, one object of the model that shows it, and a line
// in the docs.
func TestSchemaShape(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Schema() {
		id := k.Level.String() + "." + k.Name
		if seen[id] {
			t.Errorf("%s is declared twice", id)
		}
		seen[id] = true
		readers := []bool{k.doc.decode != nil, k.node.decode != nil, k.rl.decode != nil}
		for l, has := range readers {
			if has != (Level(l) == k.Level) {
				t.Errorf("%s: a reader of a %s's source: %v, want one for its own level only", id, Level(l), has)
			}
		}
		if k.doc.given == nil && k.node.given == nil && k.rl.given == nil {
			t.Errorf("%s: no given (whether a source tree gives it)", id)
		}
		shows := 0
		for _, has := range []bool{k.domain.show != nil, k.rule.show != nil, k.limit.show != nil} {
			if has {
				shows++
			}
		}
		if shows != 1 {
			t.Errorf("%s is shown on %d objects of the model, want 1", id, shows)
		}
		if k.Doc == "" || strings.Contains(k.Doc, "|") || strings.Contains(k.Doc, "\n") {
			t.Errorf("%s: doc %q, want one line of a table", id, k.Doc)
		}
		if k.Level != LevelRateLimit && k.unlimited != unlimitedRefuses {
			t.Errorf("%s: says what it means beside unlimited, which only a rate_limit's key can be", id)
		}
	}
}

// everyKey is a config that sets every key of the format (schema.go), each
// at a value that is not its default.
var everyKey = []Source{{Name: "every.yaml", Data: []byte(`domain: every
failure_mode: deny
cache: true
descriptors:
  - key: pool
    value: db
    rate_limit: {name: pool, unit: second, requests_per_unit: 100, algorithm: token_bucket, burst: 20}
    classes:
      key: priority
      ceilings: [{value: critical, ceiling: 100%}, {value: batch, ceiling: 50%}]
    shadow_mode: true
    quota_mode: true
    detailed_metric: true
    value_to_metric: true
    metadata: {team: storage}
    descriptors:
      - key: user
        rate_limits:
          - {unit: minute, requests_per_unit: 10, replaces: [{name: pool}]}
          - {unit: hour, requests_per_unit: 100}
  - key: window
    rate_limit: {unit: hour, unit_multiplier: 2, requests_per_unit: 100, sub_windows: 10, overdraw: true, cache: true}
  - key: internal
    value: "svc-*"
    share_threshold: true
    rate_limit: {unlimited: true}
  - key: tenant
    tenants_from: api_tenants
    rate_limit: {unit: minute, requests_per_unit: 100}
    plans:
      pro: {rate_limits: [{unit: minute, requests_per_unit: 10000}, {unit: month, requests_per_unit: 1000000}]}
      staff: {rate_limit: {unlimited: true}}
  - key: quota
    rate_limit: {unit: month, requests_per_unit: 1000, algorithm: fixed_window, calendar: {time_zone: Europe/Berlin}}
  - key: offender
    rate_limit: {unit: second, requests_per_unit: 5, penalty: {block: 10m, escalate: 2, max: 24h, forget: 24h}}
`)}}

// TestEveryKeyReadAndShown: every key of the schema is read onto the
// source tree (Given) and shown of the built config (Show): a key declared
// without a reader or a show, or that the decoder drops, fails here. The
// keys without an xDS field are the ones WithoutXDS reports.
func TestEveryKeyReadAndShown(t *testing.T) {
	doc, errs := decodeYAML(everyKey[0].Name, everyKey[0].Data)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	given := map[string]bool{}
	note := func(l Level, keys []string) {
		for _, k := range keys {
			given[l.String()+"."+k] = true
		}
	}
	note(LevelDomain, doc.Given())
	var nodes func([]*Node)
	nodes = func(ns []*Node) {
		for _, n := range ns {
			note(LevelDescriptor, n.Given())
			rls := n.RateLimits.Value
			if n.RateLimit != nil {
				rls = append(rls, n.RateLimit)
			}
			for _, rl := range rls {
				note(LevelRateLimit, rl.Given())
			}
			nodes(n.Descriptors)
		}
	}
	nodes(doc.Descriptors)

	cfg, err := Parse(everyKey...)
	if err != nil {
		t.Fatal(err)
	}
	shown, withoutXDS := map[string]bool{}, map[string]bool{}
	show := func(l Level, kvs []KeyValue) {
		for _, kv := range kvs {
			shown[levelOf(l, kv.Key).String()+"."+kv.Key] = true
		}
	}
	d := cfg.Domain("every")
	show(LevelDomain, d.Show())
	for _, k := range d.WithoutXDS() {
		withoutXDS[k] = true
	}
	var rules func([]*Rule)
	rules = func(rs []*Rule) {
		for _, r := range rs {
			show(LevelDescriptor, r.Show())
			for _, l := range r.Limits {
				show(LevelRateLimit, l.Show())
			}
			for _, k := range r.WithoutXDS() {
				withoutXDS[k] = true
			}
			rules(r.Children)
		}
	}
	rules(d.Rules)

	for _, k := range Schema() {
		id := k.Level.String() + "." + k.Name
		if !given[id] {
			t.Errorf("%s: not read onto the source tree (or everyKey does not set it)", id)
		}
		if !shown[id] {
			t.Errorf("%s: not shown of the built config (or everyKey does not set it)", id)
		}
		if k.XDS == "" && !withoutXDS[k.Path()] {
			t.Errorf("%s: has no xDS field, but WithoutXDS does not report it", id)
		}
	}
}

// levelOf is the level of the key called key that an object of level
// shows: its own, or a deeper one's (a rule shows its rate_limit's
// unlimited).
func levelOf(level Level, key string) Level {
	for _, k := range schema {
		if k.Name == key && k.Level >= level {
			return k.Level
		}
	}
	return level
}

// TestKeysTableInDocs keeps the table of keys in docs/configuration.md
// equal to the schema.
func TestKeysTableInDocs(t *testing.T) {
	docs, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	writeKeysTable(&b)
	if !strings.Contains(string(docs), b.String()) {
		t.Errorf("docs/configuration.md does not hold the table of keys; paste this:\n%s", b.String())
	}
}

// writeKeysTable writes the schema as the docs' Markdown table.
func writeKeysTable(w io.Writer) {
	fmt.Fprintln(w, "| key | in | over xDS (RateLimitConfig) | meaning |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	for _, k := range schema {
		xds := "`" + k.Level.XDSMessage() + "." + k.XDS + "`"
		switch {
		case k.XDS != "":
		case k.Addition:
			xds = "none: a Sluice addition ([overlay](#policy-overlay))"
		default:
			xds = "none in the proto Sluice is built with ([overlay](#policy-overlay))"
		}
		fmt.Fprintf(w, "| `%s` | %s | %s | %s |\n", k.Name, k.Level, xds, k.Doc)
	}
}

// TestWithoutXDSOrder: the keys a rule sets without an xDS field come in
// the schema's order, a descriptor's before its rate_limit's.
func TestWithoutXDSOrder(t *testing.T) {
	cfg, err := Parse(everyKey...)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key  string
		want []string
	}{
		{"pool", []string{"quota_mode", "value_to_metric", "metadata", "classes", "rate_limit.algorithm", "rate_limit.burst"}},
		{"window", []string{"rate_limit.unit_multiplier", "rate_limit.sub_windows", "rate_limit.overdraw", "rate_limit.cache"}},
	} {
		var got []string
		for _, r := range cfg.Domain("every").Rules {
			if r.Key == tc.key {
				got = r.WithoutXDS()
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("rule %s: WithoutXDS() = %q, want %q", tc.key, got, tc.want)
		}
	}
}
