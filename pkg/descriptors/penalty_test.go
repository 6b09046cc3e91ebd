package descriptors

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestPenaltyConfig: a penalty builds to the limiter's, escalate and max
// defaulting to 1 and block; a bad field, and a penalty on concurrency,
// with cache or on a pool with classes, are refused at their field. A
// penalized limit is not divided among RLQS holders.
func TestPenaltyConfig(t *testing.T) {
	cfg, err := Parse(Source{Name: "p.yaml", Data: []byte(`domain: p
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100, penalty: {block: 10m, escalate: 2, max: 24h, forget: 24h}}
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 5, penalty: {block: 30s}}
`)})
	if err != nil {
		t.Fatal(err)
	}
	rules := cfg.Domain("p").Rules
	want := limiter.Penalty{Block: 10 * time.Minute, Escalate: 2, Max: 24 * time.Hour, Forget: 24 * time.Hour}
	if l := rules[0].Limit.Store(); l.Penalty != want || l.Validate() != nil {
		t.Errorf("built %+v, want penalty %+v", l.Penalty, want)
	}
	if rules[0].Limit.Shares() {
		t.Error("a penalized limit Shares: RLQS holders would admit past its block")
	}
	want = limiter.Penalty{Block: 30 * time.Second, Escalate: 1, Max: 30 * time.Second}
	if l := rules[1].Limit.Store(); l.Penalty != want || l.Validate() != nil {
		t.Errorf("built %+v, want penalty %+v", l.Penalty, want)
	}
	for _, tc := range []struct{ rl, want string }{
		{`{unit: second, requests_per_unit: 1, penalty: {block: 0s}}`,
			`p.yaml:3:80: descriptors[0].rate_limit.penalty.block: block "0s" (want a duration above 0`},
		{`{unit: second, requests_per_unit: 1, penalty: {block: 10m, escalate: 0}}`,
			`descriptors[0].rate_limit.penalty.escalate: escalate 0 (want 1 or more`},
		{`{unit: second, requests_per_unit: 1, penalty: {block: 10m, max: 1m}}`,
			`descriptors[0].rate_limit.penalty.max: max 1m0s below block 10m0s`},
		{`{unit: second, requests_per_unit: 1, penalty: {block: 10m, forget: -1s}}`,
			`descriptors[0].rate_limit.penalty.forget: forget "-1s"`},
		{`{unit: second, requests_per_unit: 1, penalty: {escalate: 2}}`,
			`descriptors[0].rate_limit.penalty.block: missing block`},
		{`{unit: second, requests_per_unit: 1, penalty: {block: soon}}`,
			`descriptors[0].rate_limit.penalty.block: block "soon"`},
		{`{unit: second, requests_per_unit: 1, algorithm: concurrency, penalty: {block: 1m}}`,
			`descriptors[0].rate_limit.penalty: penalty with algorithm concurrency`},
		{`{unit: second, requests_per_unit: 1, cache: true, penalty: {block: 1m}}`,
			`descriptors[0].rate_limit.penalty: penalty with cache: true`},
	} {
		_, err := Parse(Source{Name: "p.yaml", Data: []byte("domain: p\ndescriptors:\n  - {key: k, rate_limit: " + tc.rl + "}\n")})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.rl, err, tc.want)
		}
	}
	_, err = Parse(Source{Name: "p.yaml", Data: []byte(`domain: p
descriptors:
  - key: pool
    rate_limit: {unit: second, requests_per_unit: 10, penalty: {block: 1m}}
    classes:
      key: priority
      ceilings: [{value: critical, ceiling: 100%}]
`)})
	if want := "descriptors[0].classes.ceilings: classes with a penalty"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a penalty on a pool: error %v, want %q", err, want)
	}
}
