package tenants_test

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/tenants"
)

// TestExample: the example's config loads, and every row of rows.csv is
// one the table accepts (each plan it names is one of the config's).
func TestExample(t *testing.T) {
	cfg, err := descriptors.Load("config")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("rows.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := tenants.ReadRows(f, "csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 5 {
		t.Fatalf("%d rows, want 5", len(rows))
	}
	if err := tenants.CheckAll(cfg, "api_tenants", rows); err != nil {
		t.Error(err)
	}
	r := cfg.Match("api", []descriptors.Entry{{Key: "tenant", Value: "acme"}})
	row, _ := descriptors.ParseTenantRow("pro")
	if ls, _ := r.TenantLimits(row); len(ls) != 2 || ls[1].RequestsPerUnit != 1_000_000 {
		t.Errorf("pro's limits: %v", ls)
	}
}
