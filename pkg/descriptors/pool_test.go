package descriptors_test

import (
	"testing"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

const poolConfig = `domain: edge
descriptors:
  - key: pool
    value: checkout_db
    rate_limit: {unit: second, requests_per_unit: 1000, name: checkout}
    shadow_mode: true
    classes:
      key: priority
      ceilings:
        - {value: critical, ceiling: 100%}
        - {value: default, ceiling: 80%}
        - {value: test, ceiling: 12.5%}
        - {value: batch, ceiling: 70%}
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: concurrency}
    classes:
      key: priority
      ceilings: [{value: gold, ceiling: 100%}, {value: free, ceiling: 50%}]
`

// TestMatchPoolClasses: a pool's class entry picks its class; a missing or
// unknown one the lowest; the class's rule carries the pool's limit at the
// class's ceiling and the pool's flags, and counts on the pool's entries.
func TestMatchPoolClasses(t *testing.T) {
	c := mustParse(t, poolConfig)
	for _, tc := range []struct {
		name    string
		entries []descriptors.Entry
		full    string // FullKey, "" for no match
		ceiling uint16
		pooled  int // PoolEntries
	}{
		{"critical", entries("pool", "checkout_db", "priority", "critical"), "edge.pool_checkout_db.priority_critical", 1000, 1},
		{"default", entries("pool", "checkout_db", "priority", "default"), "edge.pool_checkout_db.priority_default", 800, 1},
		{"unknown class is the lowest", entries("pool", "checkout_db", "priority", "vip"), "edge.pool_checkout_db.priority_test", 125, 1},
		{"empty class is the lowest", entries("pool", "checkout_db", "priority", ""), "edge.pool_checkout_db.priority_test", 125, 1},
		{"missing class is the lowest", entries("pool", "checkout_db"), "edge.pool_checkout_db.priority_test", 125, 1},
		{"other children still match", entries("pool", "checkout_db", "path", "/"), "edge.pool_checkout_db.path", 0, 2},
		{"nothing after the class entry", entries("pool", "checkout_db", "priority", "critical", "path", "/"), "", 0, 0},
		{"a pool per tenant", entries("tenant", "acme", "priority", "gold"), "edge.tenant.priority_gold", 1000, 1},
		{"a pool per tenant, no class", entries("tenant", "acme"), "edge.tenant.priority_free", 500, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.Match("edge", tc.entries)
			if tc.full == "" {
				if r != nil {
					t.Fatalf("Match(%v) = %s, want nil", tc.entries, r.FullKey)
				}
				return
			}
			if r == nil || r.FullKey != tc.full {
				t.Fatalf("Match(%v) = %v, want %s", tc.entries, r, tc.full)
			}
			if got := r.Limit.Ceiling; got != tc.ceiling {
				t.Errorf("Match(%v).Limit.Ceiling = %d, want %d", tc.entries, got, tc.ceiling)
			}
			if got := r.PoolEntries(len(tc.entries)); got != tc.pooled {
				t.Errorf("Match(%v).PoolEntries = %d, want %d", tc.entries, got, tc.pooled)
			}
		})
	}
	crit := c.Match("edge", entries("pool", "checkout_db", "priority", "critical"))
	pool := crit.Class.Pool
	if !crit.ShadowMode || crit.Limit.Name != "checkout" || crit.Limit.RequestsPerUnit != 1000 || len(crit.Limits) != 1 {
		t.Errorf("critical class rule = %+v (limit %+v), want the pool's shadow_mode and limit", crit, crit.Limit)
	}
	if pool.Limit.Ceiling != 0 || pool.Pool.Lowest.Value != "test" || len(pool.Children) != 1 {
		t.Errorf("pool rule: ceiling %d, lowest %q, %d children; want 0, test, 1 (classes are no children)",
			pool.Limit.Ceiling, pool.Pool.Lowest.Value, len(pool.Children))
	}
	def := c.Match("edge", entries("pool", "checkout_db", "priority", "default"))
	if got := def.Limit.CeilingRequests(); got != 800 {
		t.Errorf("default's CeilingRequests() = %d, want 800", got)
	}
	want := limiter.Limit{Requests: 1000, Window: 1e9, SubWindows: limiter.DefaultSubWindows, Ceiling: 800}
	if got := def.Limit.Store(); got != want {
		t.Errorf("default's Store() = %+v, want %+v", got, want)
	}
	if got := pool.Pool.Classes[2].CeilingText(); got != "12.5%" {
		t.Errorf("CeilingText() = %q, want 12.5%%", got)
	}
}

func TestParseCeiling(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint16
		ok   bool
	}{
		{"100%", 1000, true}, {"80%", 800, true}, {"0.1%", 1, true}, {"12.5%", 125, true}, {" 50 %", 500, true},
		{"100.0%", 1000, true}, {"100.1%", 0, false}, {"0%", 0, false}, {"80", 0, false}, {"%", 0, false},
		{"-5%", 0, false}, {"1e2%", 0, false}, {".5%", 0, false}, {"5.%", 0, false}, {"1000000%", 0, false},
	} {
		got, msg := descriptors.ParseCeiling(tc.in)
		if got != tc.want || (msg == "") != tc.ok {
			t.Errorf("ParseCeiling(%q) = %d, %q; want %d, ok %v", tc.in, got, msg, tc.want, tc.ok)
		}
	}
}
