package rls

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// Metrics are the Prometheus metrics of the ShouldRateLimit front end: the
// latency of every call by gRPC code. (What was decided is counted by
// ratelimit.Metrics.) Metrics is safe for concurrent use; a nil *Metrics
// records nothing.
type Metrics struct {
	requestLatency *prometheus.HistogramVec
}

// NewMetrics creates the metrics and registers them with reg. It returns the
// registration error if a metric of the same name is already registered.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requestLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_request_duration_seconds",
			Help: "Latency of ShouldRateLimit, by gRPC code.", Buckets: ratelimit.LatencyBuckets}, []string{"code"}),
	}
	if err := reg.Register(m.requestLatency); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Metrics) observeRequest(d time.Duration, code string) {
	if m == nil {
		return
	}
	m.requestLatency.WithLabelValues(code).Observe(d.Seconds())
}
