package descriptors_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// egConfig is the shape of Envoy Gateway's generated config: a route's
// descriptor, a rule's below it.
const egConfig = `domain: default/eg/http
descriptors:
  - key: httproute/default/api/rule/0
    value: httproute/default/api/rule/0
    descriptors:
      - key: rule-0-match-0
        value: ""
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: httproute/default/shop/rule/0
    value: httproute/default/shop/rule/0
    descriptors:
      - key: rule-0-match-0
        rate_limit: {unit: minute, requests_per_unit: 100}
`

// overlayOf writes an overlay file in a temporary directory and loads it.
func overlayOf(t *testing.T, text string) (*descriptors.Overlay, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "overlay.yaml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	ov, err := descriptors.YAMLFiles.LoadOverlay(file)
	if err != nil {
		t.Fatal(err)
	}
	return ov, file
}

// TestOverlayAsWritten: an overlay's token bucket, pool with classes and
// fixed window on Envoy Gateway's generated keys build the rules that the
// same keys written in the file build, and each rule names the entry that
// changed it.
func TestOverlayAsWritten(t *testing.T) {
	ov, file := overlayOf(t, `domain: "default/eg/*"
descriptors:
  - key: "httproute/default/api/*"
    descriptors:
      - key: "rule-0-match-*"
        rate_limit: {algorithm: token_bucket, burst: 20}
  - key: "httproute/default/shop/rule/*"
    classes:
      key: priority
      ceilings: [{value: gold, ceiling: 100%}, {value: free, ceiling: 50%}]
    descriptors:
      - key: "*"
        rate_limit: {algorithm: fixed_window}
`)
	base, err := descriptors.Parse(descriptors.Source{Name: "eg.yaml", Data: []byte(strings.ReplaceAll(egConfig,
		"    descriptors:\n      - key: rule-0-match-0\n        rate_limit: {unit: minute",
		"    rate_limit: {unit: second, requests_per_unit: 50}\n    descriptors:\n      - key: rule-0-match-0\n        rate_limit: {unit: minute"))})
	if err != nil {
		t.Fatal(err)
	}
	got, err := (&descriptors.Policy{Overlay: ov}).Rebuild(base)
	if err != nil {
		t.Fatal(err)
	}
	written := egConfig
	for _, r := range [][2]string{
		{"{unit: second, requests_per_unit: 10}", "{unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20}"},
		{"{unit: minute, requests_per_unit: 100}", "{unit: minute, requests_per_unit: 100, algorithm: fixed_window}"},
		{"    descriptors:\n      - key: rule-0-match-0\n        rate_limit: {unit: minute",
			"    rate_limit: {unit: second, requests_per_unit: 50}\n    classes:\n      key: priority\n      ceilings: [{value: gold, ceiling: 100%}, {value: free, ceiling: 50%}]\n    descriptors:\n      - key: rule-0-match-0\n        rate_limit: {unit: minute"},
	} {
		written = strings.ReplaceAll(written, r[0], r[1])
	}
	want := mustParse(t, written)
	for _, entries := range [][]descriptors.Entry{
		{{"httproute/default/api/rule/0", "httproute/default/api/rule/0"}, {"rule-0-match-0", "x"}},
		{{"httproute/default/shop/rule/0", "httproute/default/shop/rule/0"}, {"rule-0-match-0", "y"}},
		{{"httproute/default/shop/rule/0", "httproute/default/shop/rule/0"}, {"priority", "free"}},
	} {
		g, w := got.Match("default/eg/http", entries), want.Match("default/eg/http", entries)
		if g == nil || w == nil || !reflect.DeepEqual(*g.Limit, *w.Limit) {
			t.Errorf("%v: overlay's limit %+v, want the file's %+v", entries, limitOf(g), limitOf(w))
		}
	}
	api := got.Domain("default/eg/http").Rules[0].Children[0]
	if want := []descriptors.Change{{By: file + ":5", Keys: []string{"rate_limit.algorithm", "rate_limit.burst"}}}; !reflect.DeepEqual(api.Changes, want) {
		t.Errorf("changes of the api rule: %+v, want %+v", api.Changes, want)
	}
}

func limitOf(r *descriptors.Rule) any {
	if r == nil {
		return nil
	}
	return *r.Limit
}

// TestOverlayErrors: what a selected rule cannot take is an error at the
// overlay's line, a key the source carries is refused, and a selector
// matching nothing is a warning at its line.
func TestOverlayErrors(t *testing.T) {
	base := mustParse(t, egConfig)
	ov, file := overlayOf(t, `domain: default/eg/http
descriptors:
  - key: "httproute/*"
    rate_limit: {algorithm: token_bucket}
  - key: "httproute/default/api/*"
    descriptors:
      - key: "*"
        rate_limit: {burst: 5}
`)
	_, err := (&descriptors.Policy{Overlay: ov}).Rebuild(base)
	for _, want := range []string{
		file + ":4:17: descriptors[0].rate_limit: selects key \"httproute/default/api/rule/0\"",
		file + ":8:22: descriptors[0].descriptors[0].rate_limit.burst: burst with algorithm sliding_window",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v: want %q", err, want)
		}
	}

	ov, file = overlayOf(t, "domain: default/eg/http\ndescriptors:\n  - key: nothing\n    rate_limit: {algorithm: fixed_window}\n")
	cfg, err := (&descriptors.Policy{Overlay: ov}).Rebuild(base)
	if err != nil || len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0].Error(), file+":3:5: descriptors[0]: key \"nothing\" selects no descriptor") {
		t.Errorf("unmatched selector: %v, warnings %v", err, cfg.Warnings)
	}

	file = filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(file, []byte("domain: x\ndescriptors:\n  - key: k\n    shadow_mode: true\n    rate_limit: {unit: minute}\n"), 0o644)
	_, err = descriptors.YAMLFiles.LoadOverlay(file)
	for _, want := range []string{file + ":4:5: descriptors[0].shadow_mode: an overlay sets only", file + ":5:18: descriptors[0].rate_limit.unit"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v: want %q", err, want)
		}
	}
}

// TestDefaults: the process defaults set the algorithm, sub-windows and a
// token bucket's burst of the limits that set none, naming the setting;
// a limit's own algorithm stays.
func TestDefaults(t *testing.T) {
	base := mustParse(t, `domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_window}
`)
	alg, burst := descriptors.Set("token_bucket"), descriptors.Set(uint32(150))
	alg.Pos.File, burst.Pos.File = "--algorithm", "--token-bucket-burst"
	cfg, err := (&descriptors.Policy{Defaults: descriptors.Defaults{Algorithm: alg, BurstPercent: burst}}).Rebuild(base)
	if err != nil {
		t.Fatal(err)
	}
	a, b := cfg.Domain("d").Rules[0], cfg.Domain("d").Rules[1]
	if a.Limit.Algorithm != limiter.TokenBucket || a.Limit.Burst != 15 || b.Limit.Algorithm != limiter.SlidingWindow {
		t.Errorf("a %+v, b %+v: want a token bucket of burst 15, b a sliding window", *a.Limit, *b.Limit)
	}
	if want := []descriptors.Change{{By: "--algorithm, --token-bucket-burst", Keys: []string{"rate_limit.algorithm", "rate_limit.burst"}}}; !reflect.DeepEqual(a.Changes, want) || b.Changes != nil {
		t.Errorf("changes %+v and %+v, want %+v and none", a.Changes, b.Changes, want)
	}
	sub := descriptors.Set(uint32(7))
	sub.Pos.File = "--sub-windows"
	_, err = (&descriptors.Policy{Defaults: descriptors.Defaults{SubWindows: sub}}).Rebuild(base)
	if want := "--sub-windows: descriptors[0].rate_limit.sub_windows: 7 does not divide the window (60000 ms)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v: want %q", err, want)
	}
}

// TestLean: a Config without its sources has the same domains and version.
func TestLean(t *testing.T) {
	c := mustParse(t, egConfig)
	l := c.Lean()
	if l.Version() != c.Version() || len(l.Domains()) != 1 || l.Domain("default/eg/http") != c.Domain("default/eg/http") {
		t.Errorf("lean config: version %s (want %s), domains %v", l.Version(), c.Version(), l.Domains())
	}
}

// TestOverlayTenants: an overlay gives a rule served over xDS a tenant
// table and plans, which a RateLimitConfig cannot carry; the rule's own
// limit stays the default plan.
func TestOverlayTenants(t *testing.T) {
	ov, _ := overlayOf(t, `domain: "default/eg/*"
descriptors:
  - key: "httproute/default/api/*"
    descriptors:
      - key: "rule-0-match-*"
        tenants_from: api_tenants
        plans:
          pro: {rate_limit: {unit: second, requests_per_unit: 1000}}
`)
	base, err := descriptors.Parse(descriptors.Source{Name: "eg.yaml", Data: []byte(egConfig)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := (&descriptors.Policy{Overlay: ov}).Rebuild(base)
	if err != nil {
		t.Fatal(err)
	}
	r := got.Match("default/eg/http", []descriptors.Entry{{Key: "httproute/default/api/rule/0", Value: "httproute/default/api/rule/0"}, {Key: "rule-0-match-0", Value: "acme"}})
	if r == nil || r.TenantsFrom != "api_tenants" || r.Plan("pro") == nil || r.Limit.RequestsPerUnit != 10 {
		t.Fatalf("rule after the overlay: %+v", r)
	}
	row, _ := descriptors.ParseTenantRow("pro")
	if ls, _ := r.TenantLimits(row); len(ls) != 1 || ls[0].RequestsPerUnit != 1000 {
		t.Errorf("pro's limits: %v", ls)
	}
}

// TestOverlayCache: an overlay sets cache on a domain and on a rule of a
// config that cannot carry it (Envoy Gateway's), with failure_mode local,
// and the rule says which entry changed it.
func TestOverlayCache(t *testing.T) {
	ov, file := overlayOf(t, `domain: "default/eg/*"
failure_mode: local
cache: false
descriptors:
  - key: "httproute/default/shop/rule/*"
    descriptors:
      - key: "*"
        rate_limit: {cache: true}
`)
	got, err := (&descriptors.Policy{Overlay: ov}).Rebuild(mustParse(t, egConfig))
	if err != nil {
		t.Fatal(err)
	}
	dom := got.Domain("default/eg/http")
	if dom.Cache == nil || *dom.Cache || dom.FailureMode != descriptors.FailureModeLocal {
		t.Errorf("domain cache %v, failure_mode %v; want false and local", dom.Cache, dom.FailureMode)
	}
	shop := dom.Rules[1].Children[0]
	if c := shop.Limit.Cache; c == nil || !*c {
		t.Errorf("shop rule's cache = %v, want true", c)
	}
	if api := dom.Rules[0].Children[0]; api.Limit.Cache != nil {
		t.Errorf("api rule's cache = %v, want unset", *api.Limit.Cache)
	}
	if want := []descriptors.Change{{By: file + ":7", Keys: []string{"rate_limit.cache"}}}; !reflect.DeepEqual(shop.Changes, want) {
		t.Errorf("changes of the shop rule: %+v, want %+v", shop.Changes, want)
	}
}
