package ratelimit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

func TestSanitizeStatName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"edge.remote_address", "edge.remote_address"},
		{"edge.remote_address_10.0.0.1", "edge.remote_address_10_0_0_1"},
		{"edge.header_a:b|c", "edge.header_a_b_c"},
		{"d.v_1.2.3", "d.v_1.2.3"},                                   // three parts: no address
		{"d.k_1234.5.6.7", "d.k_1234_5_6_7"},                         // the regex matches from "234"
		{"d.a_1.2.3.4567.b", "d.a_1_2_3_4567.b"},                     // at most 3 digits a part
		{"d.a_192.168.0.1.b_10.1.1.1", "d.a_192_168_0_1.b_10_1_1_1"}, // every address
	} {
		if got := sanitizeStatName(tc.in); got != tc.want {
			t.Errorf("sanitizeStatName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPeerLabels(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"edge.remote_address", []string{"edge", "remote_address"}},
		{"edge.api_key.route_search", []string{"edge", "api_key", "route_search"}},
		{"edge.a.b.c.d", []string{"edge", "a", "b"}},
	} {
		if got := peerLabels(tc.in); strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("peerLabels(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestPeerMetrics drives the decision core and reads envoyproxy/ratelimit's
// metric names with their exact values and labels.
func TestPeerMetrics(t *testing.T) {
	cfg, err := descriptors.Parse(descriptors.Source{Name: "peer.yaml", Data: []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: api_key
    descriptors:
      - key: route
        value: search
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`)})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	pm, err := NewPeerMetrics(reg, 0.8)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000-1_800_000_000%3600, 0)
	svc := New(Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{Now: func() time.Time { return now }}), Observers: []Observer{pm}})
	svc.SetConfig(cfg)
	call := func(hits uint64, kv ...string) {
		t.Helper()
		var es []descriptors.Entry
		for i := 0; i+1 < len(kv); i += 2 {
			es = append(es, descriptors.Entry{Key: kv[i], Value: kv[i+1]})
		}
		if _, err := svc.Decide(context.Background(), &Request{Domain: "edge", HitsAddend: hits, Descriptors: []Descriptor{{Entries: es}}}); err != nil {
			t.Fatal(err)
		}
	}
	for range 7 {
		call(1, "remote_address", "10.0.0.1")
	}
	call(3, "remote_address", "10.0.0.1") // 8..10: the threshold is 8, so 2 near
	call(1, "remote_address", "10.0.0.1") // denied
	for range 3 {
		call(1, "api_key", "k", "route", "search") // 2 admitted, 1 denied
	}
	call(1, "trial", "x")
	call(1, "trial", "x") // shadow: over its limit, not denied

	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"total_hits", map[string]string{"domain": "edge", "key1": "remote_address"}, 11},
		{"within_limit", map[string]string{"domain": "edge", "key1": "remote_address"}, 10},
		{"near_limit", map[string]string{"domain": "edge", "key1": "remote_address"}, 2},
		{"over_limit", map[string]string{"domain": "edge", "key1": "remote_address"}, 1},
		{"total_hits", map[string]string{"domain": "edge", "key1": "api_key", "key2": "route_search"}, 3},
		{"within_limit", map[string]string{"domain": "edge", "key1": "api_key", "key2": "route_search"}, 2},
		{"near_limit", map[string]string{"domain": "edge", "key1": "api_key", "key2": "route_search"}, 1},
		{"over_limit", map[string]string{"domain": "edge", "key1": "api_key", "key2": "route_search"}, 1},
		{"total_hits", map[string]string{"domain": "edge", "key1": "trial"}, 2},
		{"over_limit", map[string]string{"domain": "edge", "key1": "trial"}, 1},
		{"shadow_mode", map[string]string{"domain": "edge", "key1": "trial"}, 1},
	} {
		if got := counterValue(t, reg, "ratelimit_service_rate_limit_"+tc.name, tc.labels); got != tc.want {
			t.Errorf("ratelimit_service_rate_limit_%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}

	// Errors: a store failure is a redis_error, other failed calls are
	// service errors.
	pm.ObserveError("edge", errors.Join(limiter.ErrStoreUnavailable, errors.New("refused")))
	if _, err := svc.Decide(context.Background(), &Request{}); err == nil {
		t.Fatal("empty domain decided")
	}
	if got := testutil.ToFloat64(pm.errors.WithLabelValues("redis_error")); got != 1 {
		t.Errorf("redis_error = %v, want 1", got)
	}
	if got := testutil.ToFloat64(pm.errors.WithLabelValues("service_error")); got != 1 {
		t.Errorf("service_error = %v, want 1", got)
	}
}

// TestMetricsValueNotUTF8: a request whose value on a detailed_metric or
// value_to_metric rule is not UTF-8 (Envoy passes header bytes 0x80-0xFF
// through) is decided and counted under a label with U+FFFD, in Sluice's
// metrics and the peer's; it once panicked in Prometheus and took the
// process down.
func TestMetricsValueNotUTF8(t *testing.T) {
	cfg, err := descriptors.Parse(descriptors.Source{Name: "utf8.yaml", Data: []byte(`
domain: edge
descriptors:
  - key: key7
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 70}
  - key: vm
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 70}
`)})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg, 0)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := NewPeerMetrics(reg, 0)
	if err != nil {
		t.Fatal(err)
	}
	svc := New(Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{}), Observers: []Observer{m, pm}})
	svc.SetConfig(cfg)
	for _, e := range []descriptors.Entry{{Key: "key7", Value: "caf\xe9"}, {Key: "vm", Value: "\xff\xfe"}} {
		d, err := svc.Decide(context.Background(), &Request{Domain: "edge", Descriptors: []Descriptor{{Entries: []descriptors.Entry{e}}}})
		if err != nil || d.Code != OK {
			t.Fatalf("%s=%q: %v, %v; want OK", e.Key, e.Value, d.Code, err)
		}
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
	}{
		{"sluice_rate_limit_total_hits_total", map[string]string{"domain": "edge", "rule": "key7_caf\uFFFD"}},
		{"sluice_rate_limit_total_hits_total", map[string]string{"domain": "edge", "rule": "vm_\uFFFD"}},
		{"ratelimit_service_rate_limit_total_hits", map[string]string{"domain": "edge", "key1": "key7_caf\uFFFD"}},
		{"ratelimit_service_rate_limit_total_hits", map[string]string{"domain": "edge", "key1": "vm_\uFFFD"}},
	} {
		if got := counterValue(t, reg, tc.name, tc.labels); got != 1 {
			t.Errorf("%s%v = %v, want 1", tc.name, tc.labels, got)
		}
	}
}

// TestPeerMetricsStoreFailure: a store failure counts one redis_error
// whether the failure mode answers or returns the error.
func TestPeerMetricsStoreFailure(t *testing.T) {
	for _, mode := range []descriptors.FailureMode{descriptors.FailureModeError, descriptors.FailureModeAllow} {
		pm, err := NewPeerMetrics(prometheus.NewRegistry(), 0)
		if err != nil {
			t.Fatal(err)
		}
		svc := New(Options{Store: brokenStore{}, FailureMode: mode, Observers: []Observer{pm}})
		cfg, err := descriptors.Parse(descriptors.Source{Name: "f.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")})
		if err != nil {
			t.Fatal(err)
		}
		svc.SetConfig(cfg)
		svc.Decide(context.Background(), &Request{Domain: "d", Descriptors: []Descriptor{{Entries: []descriptors.Entry{{Key: "k", Value: "v"}}}}})
		if got := testutil.ToFloat64(pm.errors.WithLabelValues("redis_error")); got != 1 {
			t.Errorf("failure mode %v: redis_error = %v, want 1", mode, got)
		}
	}
}

type brokenStore struct{}

func (brokenStore) Apply(context.Context, []limiter.Hit) ([]limiter.Result, error) {
	return nil, limiter.ErrStoreUnavailable
}

// counterValue gathers reg and returns the counter name{labels} (labels
// exactly these), or -1 when there is none.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

// TestGlobalShadowMode: with Options.ShadowMode every counted limit is
// counted as if admitted and reported OK, and its would-be denials show as
// shadow mode.
func TestGlobalShadowMode(t *testing.T) {
	cfg, err := descriptors.Parse(descriptors.Source{Name: "s.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	pm, err := NewPeerMetrics(reg, 0)
	if err != nil {
		t.Fatal(err)
	}
	svc := New(Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{}), ShadowMode: true, Observers: []Observer{pm}})
	svc.SetConfig(cfg)
	for i := range 3 {
		d, err := svc.Decide(context.Background(), &Request{Domain: "d", Descriptors: []Descriptor{{Entries: []descriptors.Entry{{Key: "k", Value: "v"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if d.Code != OK || d.Statuses[0].Code != OK || !d.Statuses[0].Shadow || d.RetryAfter != 0 {
			t.Errorf("call %d: code %v, status %v, shadow %v, retry %v: want OK, OK, shadow, no Retry-After", i+1, d.Code, d.Statuses[0].Code, d.Statuses[0].Shadow, d.RetryAfter)
		}
	}
	if got := counterValue(t, reg, "ratelimit_service_rate_limit_shadow_mode", map[string]string{"domain": "d", "key1": "k"}); got != 2 {
		t.Errorf("shadow_mode = %v, want 2", got)
	}
}

// BenchmarkPeerMetrics measures a decision (one two-level descriptor, the
// in-memory store) with Sluice's metrics alone and with envoyproxy/
// ratelimit's names too (--compat-metrics), to show what the second set
// costs on the request path; "ip_value" is a rule whose stat name needs
// sanitising (value_to_metric with an IPv4 value).
func BenchmarkPeerMetrics(b *testing.B) {
	cfg, err := descriptors.Parse(descriptors.Source{Name: "b.yaml", Data: []byte(`
domain: edge
descriptors:
  - key: api_key
    descriptors:
      - key: route
        value: search
        rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: ip
    value_to_metric: true
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
`)})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		peer bool
		kv   []descriptors.Entry
	}{
		{"sluice_only", false, []descriptors.Entry{{Key: "api_key", Value: "k"}, {Key: "route", Value: "search"}}},
		{"with_peer_names", true, []descriptors.Entry{{Key: "api_key", Value: "k"}, {Key: "route", Value: "search"}}},
		{"with_peer_names_ip_value", true, []descriptors.Entry{{Key: "ip", Value: "10.1.2.3"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			reg := prometheus.NewRegistry()
			m, err := NewMetrics(reg, 0)
			if err != nil {
				b.Fatal(err)
			}
			o := Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{}), Metrics: m}
			if bc.peer {
				pm, err := NewPeerMetrics(reg, 0)
				if err != nil {
					b.Fatal(err)
				}
				o.Observers = []Observer{pm}
			}
			svc := New(o)
			svc.SetConfig(cfg)
			req := &Request{Domain: "edge", Descriptors: []Descriptor{{Entries: bc.kv}}}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := svc.Decide(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
