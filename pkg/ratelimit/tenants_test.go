package ratelimit_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// rows is a tenant table held in a map: table, then value, to row text.
type rows map[string]map[string]string

func (r rows) Tenant(_ context.Context, table, value string) *descriptors.TenantRow {
	s, ok := r[table][value]
	if !ok {
		return nil
	}
	row, err := descriptors.ParseTenantRow(s)
	if err != nil {
		panic(err)
	}
	return row
}

// TestTenantPlans: a rule with tenants_from counts each value's plan or
// own limits, and a value the table lacks counts the rule's own.
func TestTenantPlans(t *testing.T) {
	cfg, err := descriptors.Parse(descriptors.Source{Name: "api.yaml", Data: []byte(`domain: api
descriptors:
  - key: tenant
    tenants_from: api_tenants
    rate_limit: {unit: minute, requests_per_unit: 2}
    plans:
      pro:
        rate_limits:
          - {unit: minute, requests_per_unit: 5}
          - {unit: day, requests_per_unit: 1000}
      staff: {rate_limit: {unlimited: true}}
`)})
	if err != nil {
		t.Fatal(err)
	}
	table := rows{"api_tenants": {"acme": "pro", "big": "3/minute", "alice": "staff"}}
	s := ratelimit.New(ratelimit.Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{Now: testclock.New(epoch).Now}), Tenants: table})
	s.SetConfig(cfg)
	admitted := func(tenant string) int {
		n := 0
		for range 10 {
			d, err := s.Decide(context.Background(), &ratelimit.Request{Domain: "api",
				Descriptors: []ratelimit.Descriptor{{Entries: entries("tenant", tenant)}}})
			if err != nil {
				t.Fatal(err)
			}
			if d.Code == ratelimit.OK {
				n++
			}
		}
		return n
	}
	for tenant, want := range map[string]int{"acme": 5, "big": 3, "nobody": 2, "alice": 10} {
		if got := admitted(tenant); got != want {
			t.Errorf("tenant %s: %d of 10 admitted, want %d", tenant, got, want)
		}
	}
	d, _ := s.Decide(context.Background(), &ratelimit.Request{Domain: "api",
		Descriptors: []ratelimit.Descriptor{{Entries: entries("tenant", "acme")}}})
	if st := d.Statuses[0]; len(st.Limits) != 2 || st.Limits[1].Name != "tenant/24h" || st.Limits[1].Limit.RequestsPerUnit != 1000 {
		t.Errorf("acme's limits: %+v", st.Limits)
	}
}
