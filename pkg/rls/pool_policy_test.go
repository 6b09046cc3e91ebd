package rls

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// TestPoolClassPolicyNamesTheClass checks what docs/configuration.md says
// of a shed response's RateLimit-Policy: its item is named by the class's
// rule (the pool's entry, then the class's; the lowest class's for a request
// that names none), unless the pool's rate_limit has a name, and its q is
// the class's ceiling in requests.
func TestPoolClassPolicyNamesTheClass(t *testing.T) {
	for _, tc := range []struct {
		name, poolName string
		class          string // "" sends no class entry
		want           string
	}{
		{"a class", "", "default", `"pool_checkout_db.priority_default";q=8;w=60`},
		{"no class entry: the lowest", "", "", `"pool_checkout_db.priority_test";q=5;w=60`},
		{"an unknown class: the lowest", "", "gold", `"pool_checkout_db.priority_test";q=5;w=60`},
		{"a named pool", "checkout", "default", `"checkout";q=8;w=60`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			named := ""
			if tc.poolName != "" {
				named = "name: " + tc.poolName + ", "
			}
			cfg, err := descriptors.Parse(descriptors.Source{Name: "shop.yaml", Data: []byte(`domain: test
descriptors:
  - key: pool
    value: checkout_db
    rate_limit: {` + named + `unit: minute, requests_per_unit: 10}
    classes:
      key: priority
      ceilings:
        - {value: critical, ceiling: 100%}
        - {value: default, ceiling: 80%}
        - {value: test, ceiling: 50%}
`)})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestService(t, Options{Headers: HeadersDraft})
			s.opts.Decider.SetConfig(cfg)
			d := desc("pool", "checkout_db", "priority", tc.class)
			if tc.class == "" {
				d = desc("pool", "checkout_db")
			}
			var resp *rlsv3.RateLimitResponse
			for range 9 {
				resp = call(t, s, request(d))
			}
			if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("the 9th request: %v, want OVER_LIMIT (shed)", resp.GetOverallCode())
			}
			got := ""
			for _, h := range resp.GetResponseHeadersToAdd() {
				if h.GetKey() == "RateLimit-Policy" {
					got = h.GetValue()
				}
			}
			if got != tc.want {
				t.Errorf("RateLimit-Policy = %s, want %s", got, tc.want)
			}
		})
	}
}
