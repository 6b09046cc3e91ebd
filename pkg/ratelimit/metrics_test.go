package ratelimit_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// edgeService is a Service on the repository's config/edge.yaml (its
// token budget and concurrency rules) over a MemoryStore, with Sluice's
// metrics registered in a registry of its own.
func edgeService(t *testing.T) (*ratelimit.Service, *prometheus.Registry) {
	t.Helper()
	cfg, err := descriptors.Load("../../config/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := ratelimit.NewMetrics(reg, 0)
	if err != nil {
		t.Fatal(err)
	}
	clk := testclock.New(epoch)
	s := ratelimit.New(ratelimit.Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now}), Metrics: m})
	s.SetConfig(cfg)
	return s, reg
}

func decideEdge(t *testing.T, s *ratelimit.Service, d ratelimit.Descriptor) {
	t.Helper()
	if _, err := s.Decide(context.Background(), &ratelimit.Request{Domain: "edge", Descriptors: []ratelimit.Descriptor{d}}); err != nil {
		t.Fatalf("Decide(%v): %v", d.Entries, err)
	}
}

// edgeRuleMetrics are the rule counters of Sluice's metrics, as /metrics
// shows them.
const edgeRuleMetrics = `sluice_rate_limit_total_hits_total sluice_rate_limit_within_limit_total
sluice_rate_limit_near_limit_total sluice_rate_limit_over_limit_total sluice_rate_limit_refunded_hits_total
sluice_rate_limit_released_slots_total`

// TestMetricsRefundsAreNotHits: a token budget's reports of 70 and 80 hits
// and a refund of 60 are 150 hits and 60 refunded hits (not 210 hits), and 5
// acquires and 5 releases of a concurrency limit are 5 hits and 5 released
// slots (not 10 hits).
func TestMetricsRefundsAreNotHits(t *testing.T) {
	t.Run("token budget", func(t *testing.T) {
		s, reg := edgeService(t)
		budget := func(n uint64, refund bool) ratelimit.Descriptor {
			return ratelimit.Descriptor{Entries: entries("token_budget", "key-1"), HitsAddend: n, HasHitsAddend: true, IsNegativeHits: refund}
		}
		decideEdge(t, s, budget(70, false))
		decideEdge(t, s, budget(80, false))
		decideEdge(t, s, budget(60, true))
		want := `
# HELP sluice_rate_limit_refunded_hits_total Hits given back (is_negative_hits) to a limit other than a concurrency one, by domain and rule; not counted in total_hits.
# TYPE sluice_rate_limit_refunded_hits_total counter
sluice_rate_limit_refunded_hits_total{domain="edge",rule="tokens_per_api_key"} 60
# HELP sluice_rate_limit_total_hits_total Hits (hits_addend) evaluated against a limit, by domain and rule; refunds and releases are not hits.
# TYPE sluice_rate_limit_total_hits_total counter
sluice_rate_limit_total_hits_total{domain="edge",rule="tokens_per_api_key"} 150
# HELP sluice_rate_limit_within_limit_total Hits the limit admitted, by domain and rule.
# TYPE sluice_rate_limit_within_limit_total counter
sluice_rate_limit_within_limit_total{domain="edge",rule="tokens_per_api_key"} 150
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), strings.Fields(edgeRuleMetrics)...); err != nil {
			t.Error(err)
		}
	})
	t.Run("concurrency", func(t *testing.T) {
		s, reg := edgeService(t)
		stream := func(release bool) ratelimit.Descriptor {
			return ratelimit.Descriptor{Entries: entries("streams", "key-1"), IsNegativeHits: release}
		}
		for range 5 {
			decideEdge(t, s, stream(false))
		}
		for range 5 {
			decideEdge(t, s, stream(true))
		}
		want := `
# HELP sluice_rate_limit_near_limit_total Admitted hits that left the limit above the near-limit ratio, by domain and rule.
# TYPE sluice_rate_limit_near_limit_total counter
sluice_rate_limit_near_limit_total{domain="edge",rule="streams_per_api_key"} 1
# HELP sluice_rate_limit_released_slots_total Slots of a concurrency limit released (is_negative_hits, the stream's end), by domain and rule; not counted in total_hits.
# TYPE sluice_rate_limit_released_slots_total counter
sluice_rate_limit_released_slots_total{domain="edge",rule="streams_per_api_key"} 5
# HELP sluice_rate_limit_total_hits_total Hits (hits_addend) evaluated against a limit, by domain and rule; refunds and releases are not hits.
# TYPE sluice_rate_limit_total_hits_total counter
sluice_rate_limit_total_hits_total{domain="edge",rule="streams_per_api_key"} 5
# HELP sluice_rate_limit_within_limit_total Hits the limit admitted, by domain and rule.
# TYPE sluice_rate_limit_within_limit_total counter
sluice_rate_limit_within_limit_total{domain="edge",rule="streams_per_api_key"} 5
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), strings.Fields(edgeRuleMetrics)...); err != nil {
			t.Error(err)
		}
	})
}

// TestMetricsPenaltyBlocked: of 6 hits on a limit of 2 with a penalty, the
// third is the offence and the three after it hit the block: all four are
// blocked hits, and over the limit; a shadow rule's are blocked hits too,
// and shadow over the limit.
func TestMetricsPenaltyBlocked(t *testing.T) {
	cfg, err := descriptors.Parse(descriptors.Source{Name: "p.yaml", Data: []byte(`domain: p
descriptors:
  - key: offender
    rate_limit: {unit: second, requests_per_unit: 2, penalty: {block: 1m}}
  - key: watched
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 2, penalty: {block: 1m}}
`)})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := ratelimit.NewMetrics(reg, 0)
	if err != nil {
		t.Fatal(err)
	}
	clk := testclock.New(epoch)
	s := ratelimit.New(ratelimit.Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now}), Metrics: m})
	s.SetConfig(cfg)
	for _, key := range []string{"offender", "watched"} {
		for range 6 {
			d := ratelimit.Descriptor{Entries: entries(key, "acme")}
			if _, err := s.Decide(context.Background(), &ratelimit.Request{Domain: "p", Descriptors: []ratelimit.Descriptor{d}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := `
# HELP sluice_rate_limit_over_limit_total Hits denied by an enforced limit, by domain and rule.
# TYPE sluice_rate_limit_over_limit_total counter
sluice_rate_limit_over_limit_total{domain="p",rule="offender"} 4
# HELP sluice_rate_limit_penalty_blocked_total Hits denied by a penalty's block (rate_limit.penalty; shadow-mode ones, which it would have denied, included), by domain and rule.
# TYPE sluice_rate_limit_penalty_blocked_total counter
sluice_rate_limit_penalty_blocked_total{domain="p",rule="offender"} 4
sluice_rate_limit_penalty_blocked_total{domain="p",rule="watched"} 4
# HELP sluice_rate_limit_shadow_mode_over_limit_total Hits a shadow-mode limit would have denied, by domain and rule.
# TYPE sluice_rate_limit_shadow_mode_over_limit_total counter
sluice_rate_limit_shadow_mode_over_limit_total{domain="p",rule="watched"} 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_rate_limit_over_limit_total",
		"sluice_rate_limit_penalty_blocked_total", "sluice_rate_limit_shadow_mode_over_limit_total"); err != nil {
		t.Error(err)
	}
}
