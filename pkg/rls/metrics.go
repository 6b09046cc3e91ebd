package rls

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// Metrics are the Prometheus metrics of the ShouldRateLimit front end: the
// latency of every call by gRPC code. (What was decided is counted by
// ratelimit.Metrics.) Metrics is safe for concurrent use; a nil *Metrics
// records nothing.
type Metrics struct {
	requestLatency *prometheus.HistogramVec
	okLatency      func() prometheus.Observer // requestLatency{code="OK"}, looked up once
}

// NewMetrics creates the metrics and registers them with reg. It returns the
// registration error if a metric of the same name is already registered.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requestLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_request_duration_seconds",
			Help: "Latency of ShouldRateLimit, by gRPC code.", Buckets: ratelimit.LatencyBuckets}, []string{"code"}),
	}
	m.okLatency = sync.OnceValue(func() prometheus.Observer { return m.requestLatency.WithLabelValues(codes.OK.String()) })
	if err := reg.Register(m.requestLatency); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Metrics) observeRequest(d time.Duration, code codes.Code) {
	if m == nil {
		return
	}
	if code == codes.OK {
		m.okLatency().Observe(d.Seconds())
		return
	}
	m.requestLatency.WithLabelValues(code.String()).Observe(d.Seconds())
}
