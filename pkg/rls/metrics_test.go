package rls

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// TestMetrics drives a known sequence and asserts the exact counters.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	cm, err := ratelimit.NewMetrics(reg, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestService(t, Options{Metrics: m}, ratelimit.Options{Metrics: cm})
	key := desc("api_key", "a")
	// per_key is 3 a minute: 3 admitted (the 2nd and 3rd leave it over half
	// used: near limit), 2 denied.
	for range 5 {
		s.ShouldRateLimit(context.Background(), request(key))
	}
	// Shadow: 1 a second, 3 calls: 1 within, 2 shadow over limit.
	for range 3 {
		s.ShouldRateLimit(context.Background(), request(desc("shadow", "s")))
	}
	// A request hits_addend of 2 counts 2 hits.
	r := request(desc("generous", "g"))
	r.HitsAddend = 2
	s.ShouldRateLimit(context.Background(), r)
	// Invalid and unmatched calls count no hits.
	s.ShouldRateLimit(context.Background(), request())
	s.ShouldRateLimit(context.Background(), request(desc("nothing", "x")))

	want := `
# HELP sluice_rate_limit_near_limit_total Admitted hits that left the limit above the near-limit ratio, by domain and rule.
# TYPE sluice_rate_limit_near_limit_total counter
sluice_rate_limit_near_limit_total{domain="test",rule="per_key",} 2
sluice_rate_limit_near_limit_total{domain="test",rule="trial"} 1
# HELP sluice_rate_limit_over_limit_total Hits denied by an enforced limit, by domain and rule.
# TYPE sluice_rate_limit_over_limit_total counter
sluice_rate_limit_over_limit_total{domain="test",rule="per_key"} 2
# HELP sluice_rate_limit_shadow_mode_over_limit_total Hits a shadow-mode limit would have denied, by domain and rule.
# TYPE sluice_rate_limit_shadow_mode_over_limit_total counter
sluice_rate_limit_shadow_mode_over_limit_total{domain="test",rule="trial"} 2
# HELP sluice_rate_limit_total_hits_total Hits (hits_addend) evaluated against a limit, by domain and rule; refunds and releases are not hits.
# TYPE sluice_rate_limit_total_hits_total counter
sluice_rate_limit_total_hits_total{domain="test",rule="per_key"} 5
sluice_rate_limit_total_hits_total{domain="test",rule="generous"} 2
sluice_rate_limit_total_hits_total{domain="test",rule="trial"} 3
# HELP sluice_rate_limit_within_limit_total Hits the limit admitted, by domain and rule.
# TYPE sluice_rate_limit_within_limit_total counter
sluice_rate_limit_within_limit_total{domain="test",rule="per_key"} 3
sluice_rate_limit_within_limit_total{domain="test",rule="generous"} 2
sluice_rate_limit_within_limit_total{domain="test",rule="trial"} 1
# HELP sluice_store_calls_total Store calls, by result (ok, error).
# TYPE sluice_store_calls_total counter
sluice_store_calls_total{result="ok"} 9
`
	want = strings.Replace(want, `rule="per_key",}`, `rule="per_key"}`, 1)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"sluice_rate_limit_total_hits_total", "sluice_rate_limit_over_limit_total", "sluice_rate_limit_near_limit_total",
		"sluice_rate_limit_within_limit_total", "sluice_rate_limit_shadow_mode_over_limit_total", "sluice_store_calls_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.requestLatency); n != 2 {
		t.Errorf("request latency series = %d, want 2 (OK and InvalidArgument)", n)
	}
}

// TestMetricsPerLimit: a rule with rate_limits counts each limit under its
// own rule label: the rule's and the window, or the limit's name.
func TestMetricsPerLimit(t *testing.T) {
	reg := prometheus.NewRegistry()
	cm, err := ratelimit.NewMetrics(reg, 0.8)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestService(t, Options{}, ratelimit.Options{Metrics: cm})
	// 2 a second and 3 a minute: 2 admitted, the 3rd denied by the second's.
	for range 3 {
		s.ShouldRateLimit(context.Background(), request(desc("tenant_multi", "t")))
	}
	want := `
# HELP sluice_rate_limit_over_limit_total Hits denied by an enforced limit, by domain and rule.
# TYPE sluice_rate_limit_over_limit_total counter
sluice_rate_limit_over_limit_total{domain="test",rule="tenant_multi/1s"} 1
# HELP sluice_rate_limit_within_limit_total Hits the limit admitted, by domain and rule.
# TYPE sluice_rate_limit_within_limit_total counter
sluice_rate_limit_within_limit_total{domain="test",rule="tenant_multi/1s"} 2
sluice_rate_limit_within_limit_total{domain="test",rule="tenant_per_minute"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_rate_limit_over_limit_total", "sluice_rate_limit_within_limit_total"); err != nil {
		t.Error(err)
	}
}
