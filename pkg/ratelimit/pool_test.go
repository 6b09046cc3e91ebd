package ratelimit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// poolYAML is a pool of 10 a second (fixed, so that counts are plain) with
// default at 80% and critical at 100%; ceiling is default's.
func poolYAML(ceiling string) string {
	return `domain: edge
descriptors:
  - key: pool
    value: db
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: fixed_window}
    classes:
      key: priority
      ceilings:
        - {value: critical, ceiling: 100%}
        - {value: default, ceiling: ` + ceiling + `}
`
}

func poolConfig(t *testing.T, ceiling string) *descriptors.Config {
	t.Helper()
	c, err := descriptors.Parse(descriptors.Source{Name: "pool.yaml", Data: []byte(poolYAML(ceiling))})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// poolClient decides one descriptor of the pool's class at a time.
type poolClient struct {
	t *testing.T
	s *ratelimit.Service
}

func (c poolClient) decide(class string) ratelimit.Status {
	c.t.Helper()
	es := entries("pool", "db", "priority", class)
	if class == "" {
		es = es[:1]
	}
	d, err := c.s.Decide(context.Background(), &ratelimit.Request{Domain: "edge", Descriptors: []ratelimit.Descriptor{{Entries: es}}})
	if err != nil {
		c.t.Fatalf("Decide(%v): %v", es, err)
	}
	return d.Statuses[0]
}

// TestPoolClasses: the classes of a pool share its one counter, each up to
// its ceiling; a missing class is the lowest; the status names the class's
// ceiling in requests; a reload that lowers a ceiling keeps the counter;
// the metrics count each class's admitted and shed hits.
func TestPoolClasses(t *testing.T) {
	clk := testclock.New(epoch.Add(100 * time.Millisecond))
	reg := prometheus.NewRegistry()
	m, err := ratelimit.NewMetrics(reg, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := ratelimit.New(ratelimit.Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now}), Metrics: m})
	s.SetConfig(poolConfig(t, "80%"))
	c := poolClient{t, s}
	step := func(class string, code ratelimit.Code, remaining uint64, ceiling uint32) {
		t.Helper()
		st := c.decide(class)
		if st.Code != code || st.Result.Remaining != remaining || st.Limit.CeilingRequests() != ceiling {
			t.Fatalf("class %q: %v remaining %d ceiling %d, want %v remaining %d ceiling %d",
				class, st.Code, st.Result.Remaining, st.Limit.CeilingRequests(), code, remaining, ceiling)
		}
	}
	step("critical", ratelimit.OK, 9, 10)
	for i := range 6 {
		step("default", ratelimit.OK, uint64(6-i), 8)
	}
	step("", ratelimit.OK, 0, 8) // the lowest class: default, the 8th hit
	step("default", ratelimit.OverLimit, 0, 8)
	step("unknown", ratelimit.OverLimit, 0, 8)
	step("critical", ratelimit.OK, 1, 10)

	// An operator lowers default to 50% mid-window: the pool's 9 hits stay.
	s.SetConfig(poolConfig(t, "50%"))
	step("default", ratelimit.OverLimit, 0, 5)
	step("critical", ratelimit.OK, 0, 10)
	step("critical", ratelimit.OverLimit, 0, 10)

	clk.Advance(time.Second)
	for i := range 5 {
		step("default", ratelimit.OK, uint64(4-i), 5)
	}
	step("default", ratelimit.OverLimit, 0, 5)

	want := `
# HELP sluice_pool_class_admitted_total Hits of a class that its pool admitted (within the class's ceiling), by domain, pool rule and class.
# TYPE sluice_pool_class_admitted_total counter
sluice_pool_class_admitted_total{class="critical",domain="edge",rule="pool_db"} 3
sluice_pool_class_admitted_total{class="default",domain="edge",rule="pool_db"} 12
# HELP sluice_pool_class_shed_total Hits of a class that its pool shed (over the class's ceiling; shadow mode aside), by domain, pool rule and class.
# TYPE sluice_pool_class_shed_total counter
sluice_pool_class_shed_total{class="critical",domain="edge",rule="pool_db"} 1
sluice_pool_class_shed_total{class="default",domain="edge",rule="pool_db"} 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_pool_class_admitted_total", "sluice_pool_class_shed_total"); err != nil {
		t.Error(err)
	}
}
