package rlqs

import (
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"
)

// Metrics are the Prometheus metrics of the quota service. It is safe for
// concurrent use; a nil *Metrics records nothing.
type Metrics struct {
	streams    prometheus.Gauge
	buckets    prometheus.Gauge
	reports    *prometheus.CounterVec // by gRPC code of the outcome
	actions    *prometheus.CounterVec // by action
	failures   *prometheus.CounterVec // by failure mode
	refused    *prometheus.CounterVec // by bound
	overflowed *prometheus.CounterVec // by bound
	evicted    *prometheus.CounterVec // by bound
}

// NewMetrics creates the metrics and registers them with reg. It returns the
// registration error if a metric of the same name is already registered.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_rlqs_streams",
			Help: "Open rate limit quota streams (one per Envoy worker group)."}),
		buckets: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_rlqs_buckets",
			Help: "Buckets tracked, over every open quota stream."}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_rlqs_reports_total",
			Help: "Usage reports handled, by gRPC code (OK, or the code that ended the stream)."}, []string{"code"}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_rlqs_actions_total",
			Help: "Bucket actions sent: token_bucket, allow_all, deny_all or abandon."}, []string{"action"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_rlqs_store_failures_total",
			Help: "Reports whose shares the store could not divide, by the failure mode that answered."}, []string{"failure_mode"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_rlqs_refused_total",
			Help: "Streams refused at their start, by the bound they were past: max_streams (all connections) or max_streams_per_connection."}, []string{"bound"}),
		overflowed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_rlqs_overflowed_total",
			Help: "New buckets past a bound (max_buckets, max_total_buckets) with none idle to evict, answered untracked from their rule's overflow limit; counted at each report that holds one."}, []string{"bound"}),
		evicted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_rlqs_evicted_total",
			Help: "Idle buckets evicted (abandoned) to make room for new ones under a bound (max_buckets, max_total_buckets)."}, []string{"bound"}),
	}
	for _, c := range []prometheus.Collector{m.streams, m.buckets, m.reports, m.actions, m.failures, m.refused, m.overflowed, m.evicted} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) streamOpened() {
	if m != nil {
		m.streams.Inc()
	}
}

func (m *Metrics) streamClosed(buckets int) {
	if m != nil {
		m.streams.Dec()
		m.buckets.Sub(float64(buckets))
	}
}

func (m *Metrics) bucketsAdded(n int) {
	if m != nil {
		m.buckets.Add(float64(n))
	}
}

// refuse counts one stream refused by bound.
func (m *Metrics) refuse(bound string) {
	if m != nil {
		m.refused.WithLabelValues(bound).Inc()
	}
}

// overflow counts one bucket answered past bound.
func (m *Metrics) overflow(bound string) {
	if m != nil {
		m.overflowed.WithLabelValues(bound).Inc()
	}
}

// evict counts one bucket evicted to make room under bound.
func (m *Metrics) evict(bound string) {
	if m != nil {
		m.evicted.WithLabelValues(bound).Inc()
	}
}

func (m *Metrics) observeReport(err error) {
	if m != nil {
		m.reports.WithLabelValues(status.Code(err).String()).Inc()
	}
}

func (m *Metrics) observeFailure(mode string) {
	if m != nil {
		m.failures.WithLabelValues(mode).Inc()
	}
}

func (m *Metrics) observeAction(a *action) {
	if m == nil {
		return
	}
	name := "abandon"
	if q := a.GetQuotaAssignmentAction(); q != nil {
		switch s := q.GetRateLimitStrategy(); {
		case s.GetTokenBucket() != nil:
			name = "token_bucket"
		case s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL:
			name = "deny_all"
		default:
			name = "allow_all"
		}
	}
	m.actions.WithLabelValues(name).Inc()
}
