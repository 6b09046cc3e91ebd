package descriptors

import (
	"strings"
	"testing"
)

const tenantYAML = `domain: api
descriptors:
  - key: tenant
    tenants_from: api_tenants
    rate_limit: {unit: minute, requests_per_unit: 100}
    plans:
      pro:
        rate_limits:
          - {unit: minute, requests_per_unit: 10000}
          - {unit: month, requests_per_unit: 1000000}
      contract: {rate_limit: {unit: minute, requests_per_unit: 50000, algorithm: token_bucket}}
      staff: {rate_limit: {unlimited: true}}
`

// TestTenantLimits: a row naming a plan counts the plan's limits, a row of
// its own limits counts them with the default plan's algorithm, and a
// missing row or a plan the config lost counts the node's own limits.
func TestTenantLimits(t *testing.T) {
	cfg, err := Parse(Source{Name: "api.yaml", Data: []byte(tenantYAML)})
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Match("api", []Entry{{"tenant", "acme"}})
	if r.TenantsFrom != "api_tenants" || len(r.Plans) != 3 || len(cfg.TenantRules("api_tenants")) != 1 {
		t.Fatalf("rule: tenants_from %q, %d plans", r.TenantsFrom, len(r.Plans))
	}
	row := func(s string) *TenantRow {
		t.Helper()
		x, err := ParseTenantRow(s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	for _, c := range []struct {
		row       *TenantRow
		want      []uint32
		unlimited bool
	}{
		{nil, []uint32{100}, false},
		{row("pro"), []uint32{10000, 1000000}, false},
		{row("contract"), []uint32{50000}, false},
		{row("staff"), nil, true},
		{row("gone"), []uint32{100}, false},
		{row("7/second, 300/30second"), []uint32{7, 300}, false},
	} {
		ls, unl := r.TenantLimits(c.row)
		var got []uint32
		for _, l := range ls {
			got = append(got, l.RequestsPerUnit)
		}
		if unl != c.unlimited || len(got) != len(c.want) || (len(got) > 0 && got[len(got)-1] != c.want[len(c.want)-1]) || (len(got) > 0 && got[0] != c.want[0]) {
			t.Errorf("row %v: limits %v unlimited %v, want %v %v", c.row, got, unl, c.want, c.unlimited)
		}
	}
	own, _ := r.TenantLimits(row("300/30second"))
	if own[0].Window().String() != "30s" || own[0].Algorithm != r.Limit.Algorithm {
		t.Errorf("own limit: window %v algorithm %v", own[0].Window(), own[0].Algorithm)
	}
	if err := r.CheckTenantRow(row("gold")); err == nil || !strings.Contains(err.Error(), `unknown plan "gold" (want pro, contract or staff)`) {
		t.Errorf("unknown plan: %v", err)
	}
}

// TestParseTenantRowErrors: each bad row is refused with what is wrong.
func TestParseTenantRowErrors(t *testing.T) {
	for row, want := range map[string]string{
		"":                   "empty row",
		"100":                `limit "100" has no unit`,
		"100/":               `limit "100/" has no unit`,
		"100/5":              `limit "100/5" has no unit`,
		"x/minute":           `requests "x" is not a whole number`,
		"10/fortnight":       `unknown unit "fortnight"`,
		"10/0minute":         `multiplier "0"`,
		"1/minute,2/60s":     `unknown unit "s"`,
		"1/minute,2/1minute": "a second limit with window 1m0s",
		"1/99999year":        "longer than the longest",
	} {
		_, err := ParseTenantRow(row)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTenantRow(%q) = %v, want an error with %q", row, err, want)
		}
	}
}

// TestPlanErrors: bad plans are refused with their position and path.
func TestPlanErrors(t *testing.T) {
	_, err := Parse(Source{Name: "bad.yaml", Data: []byte(`domain: api
descriptors:
  - key: tenant
    plans:
      pro: {rate_limit: {requests_per_unit: 10}}
      9lives: {rate_limit: {unit: minute, requests_per_unit: 1}}
      empty: {}
  - key: other
    tenants_from: "bad name"
`)})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"bad.yaml:4:5: descriptors[0].plans: plans without tenants_from",
		"bad.yaml:5:25: descriptors[0].plans.pro.rate_limit.unit: missing unit",
		"bad.yaml:6:7: descriptors[0].plans.9lives: plan name \"9lives\"",
		"bad.yaml:7:7: descriptors[0].plans.empty: plan without limits",
		"bad.yaml:9:19: descriptors[1].tenants_from: table name \"bad name\"",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\nlacks %q", err, want)
		}
	}
}
