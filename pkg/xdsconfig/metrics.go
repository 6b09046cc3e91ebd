package xdsconfig

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the Client's Prometheus metrics. A nil *Metrics records
// nothing. It is safe for concurrent use.
type Metrics struct {
	connected prometheus.Gauge
	version   *prometheus.GaugeVec
	acks      prometheus.Counter
	nacks     prometheus.Counter
	resends   prometheus.Counter
	streams   prometheus.Counter
}

// NewMetrics registers the xDS metrics on reg:
//   - sluice_xds_connected: 1 while a stream to the xDS server is open;
//   - sluice_xds_config_info{version}: 1 for the version_info of the config
//     in force (the last ACKed), no series before the first;
//   - sluice_xds_acks_total and sluice_xds_nacks_total: ACKs and NACKs
//     sent, a re-sent refused response's NACK included;
//   - sluice_xds_refused_resends_total: responses identical to the one
//     last refused (a server that re-sends a NACKed version), answered
//     without building them again;
//   - sluice_xds_streams_total: streams opened (the first and each
//     reconnection).
//
// It returns an error if a metric of the same name is already registered.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_xds_connected",
			Help: "1 while a stream to the xDS config server is open, else 0."}),
		version: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_xds_config_info",
			Help: "1 for the version_info of the xDS config in force (the last one ACKed)."}, []string{"version"}),
		acks: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_xds_acks_total",
			Help: "xDS responses ACKed: their config built and is in force."}),
		nacks: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_xds_nacks_total",
			Help: "xDS responses NACKed: their config did not build; the config in force stays."}),
		resends: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_xds_refused_resends_total",
			Help: "xDS responses identical to the one last refused, NACKed again without a new build."}),
		streams: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_xds_streams_total",
			Help: "xDS streams opened: the first and every reconnection."}),
	}
	for _, c := range []prometheus.Collector{m.connected, m.version, m.acks, m.nacks, m.resends, m.streams} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) setConnected(up bool) {
	if m == nil {
		return
	}
	if up {
		m.connected.Set(1)
	} else {
		m.connected.Set(0)
	}
}

func (m *Metrics) setVersion(v string) {
	if m == nil {
		return
	}
	m.version.Reset()
	m.version.WithLabelValues(v).Set(1)
}

// count increments the counter c picks, unless m is nil.
func (m *Metrics) count(c func(*Metrics) prometheus.Counter) {
	if m != nil {
		c(m).Inc()
	}
}

func acks(m *Metrics) prometheus.Counter    { return m.acks }
func nacks(m *Metrics) prometheus.Counter   { return m.nacks }
func resends(m *Metrics) prometheus.Counter { return m.resends }
func streams(m *Metrics) prometheus.Counter { return m.streams }
