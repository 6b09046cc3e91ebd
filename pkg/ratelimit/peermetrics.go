package ratelimit

import (
	"errors"
	"math"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// PeerMetrics records decisions under the Prometheus names that
// envoyproxy/ratelimit exports with USE_PROMETHEUS=true, as its default
// statsd-exporter mapping (src/stats/prom/default_mapper.yaml) produces
// them, so that dashboards and alerts written for it keep working:
//
//   - ratelimit_service_rate_limit_total_hits, _over_limit, _near_limit,
//     _within_limit and _shadow_mode, counters of hits (hits_addend)
//     labelled domain and key1 for a one-level rule, and domain, key1 and
//     key2 for a deeper one (the first two levels), as the mapping splits
//     the stat name "domain.key1.key2..." at its dots;
//   - ratelimit_service_should_rate_limit_error{err_type}, calls that
//     failed: "redis_error" when the store failed (whatever the failure
//     mode then answered), "service_error" for any other error of Decide.
//
// The stat name is the rule's FullKey as envoyproxy/ratelimit builds it
// ("domain.key_value.key2"), with ':' and '|' and the dots inside IPv4
// addresses written as '_' (its SanitizeStatName). Values appear in it only
// where the config asks for them (detailed_metric, value_to_metric), so the
// number of series is bounded by the config, as for Metrics. A limit
// override is named by its rate ("override_10_per_minute"), not by the
// request's values.
//
// The counts follow Sluice's decisions: a denied request adds all its hits
// to over_limit and nothing to within_limit (it consumed nothing); near
// limit counts the admitted hits above the near-limit ratio, as
// envoyproxy/ratelimit splits them. A shadow-mode limit over its limit adds
// its hits to both over_limit and shadow_mode, as there.
//
// PeerMetrics is safe for concurrent use; a nil *PeerMetrics records
// nothing.
type PeerMetrics struct {
	nearRatio float64
	// by stat kind: [0] labelled {domain, key1}, [1] {domain, key1, key2}
	totalHits, overLimit, nearLimit, withinLimit, shadowMode [2]*prometheus.CounterVec
	errors                                                   *prometheus.CounterVec
}

var (
	_ Observer      = (*PeerMetrics)(nil)
	_ ErrorObserver = (*PeerMetrics)(nil)
)

// NewPeerMetrics creates the metrics and registers them with reg.
// nearRatio is envoyproxy/ratelimit's NEAR_LIMIT_RATIO in (0, 1]; 0 means
// DefaultNearLimitRatio. It returns the registration error if a metric of
// the same name is already registered.
func NewPeerMetrics(reg prometheus.Registerer, nearRatio float64) (*PeerMetrics, error) {
	if nearRatio <= 0 || nearRatio > 1 {
		nearRatio = DefaultNearLimitRatio
	}
	m := &PeerMetrics{nearRatio: nearRatio}
	vecs := func(stat string) [2]*prometheus.CounterVec {
		opts := prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + stat,
			Help: "envoyproxy/ratelimit's " + stat + " stat: hits by domain and rule (key1, key2: its first two levels)."}
		return [2]*prometheus.CounterVec{
			prometheus.NewCounterVec(opts, []string{"domain", "key1"}),
			prometheus.NewCounterVec(opts, []string{"domain", "key1", "key2"}),
		}
	}
	m.totalHits, m.overLimit, m.nearLimit = vecs("total_hits"), vecs("over_limit"), vecs("near_limit")
	m.withinLimit, m.shadowMode = vecs("within_limit"), vecs("shadow_mode")
	m.errors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_should_rate_limit_error",
		Help: "ShouldRateLimit calls that failed, by err_type (redis_error, service_error)."}, []string{"err_type"})
	if err := reg.Register(m.errors); err != nil {
		return nil, err
	}
	// One name with two label sets, as the exporter's two mappings make:
	// a registry accepts that only from a collector that describes nothing.
	if err := reg.Register(peerCollector{m}); err != nil {
		return nil, err
	}
	return m, nil
}

// peerCollector collects the rate-limit vectors of a PeerMetrics without
// describing them (an unchecked collector).
type peerCollector struct{ m *PeerMetrics }

func (peerCollector) Describe(chan<- *prometheus.Desc) {}

func (c peerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, v := range [][2]*prometheus.CounterVec{c.m.totalHits, c.m.overLimit, c.m.nearLimit, c.m.withinLimit, c.m.shadowMode} {
		v[0].Collect(ch)
		v[1].Collect(ch)
	}
}

// ObserveDescriptor implements Observer.
func (m *PeerMetrics) ObserveDescriptor(dom *descriptors.Domain, st *Status, entries []descriptors.Entry) {
	if m == nil {
		return
	}
	labels := peerLabels(sanitizeStatName(dom.Name + "." + ruleLabel(dom.Name, st, entries)))
	level := len(labels) - 2
	n := float64(st.Hits)
	m.totalHits[level].WithLabelValues(labels...).Add(n)
	if !st.Result.Allowed {
		m.overLimit[level].WithLabelValues(labels...).Add(n)
		if st.Shadow {
			m.shadowMode[level].WithLabelValues(labels...).Add(n)
		}
		return
	}
	m.withinLimit[level].WithLabelValues(labels...).Add(n)
	if near := m.nearHits(st); near > 0 {
		m.nearLimit[level].WithLabelValues(labels...).Add(float64(near))
	}
}

// nearHits is how many of an admitted descriptor's hits landed above the
// near-limit threshold, floor(requests_per_unit x ratio), as
// envoyproxy/ratelimit counts them: all of them when the count was already
// there before, else those past it.
func (m *PeerMetrics) nearHits(st *Status) uint64 {
	limit := uint64(st.Limit.CeilingRequests()) // a pool's class: of its ceiling
	threshold := uint64(math.Floor(float64(limit) * m.nearRatio))
	after := limit - min(st.Result.Remaining, limit)
	if after <= threshold {
		return 0
	}
	before := after - min(st.Hits, after)
	if before >= threshold {
		return st.Hits
	}
	return after - threshold
}

// ObserveError implements ErrorObserver.
func (m *PeerMetrics) ObserveError(_ string, err error) {
	if m == nil {
		return
	}
	kind := "service_error"
	if errors.Is(err, limiter.ErrStoreUnavailable) {
		kind = "redis_error"
	}
	m.errors.WithLabelValues(kind).Inc()
}

// peerLabels splits a stat name at its dots into the label values of the
// exporter's mapping: domain and key1 for two parts, domain, key1 and key2
// for three or more (the rest is dropped, as the mapping's regex does).
func peerLabels(stat string) []string {
	domain, rest, _ := strings.Cut(stat, ".")
	key1, rest, deeper := strings.Cut(rest, ".")
	if !deeper {
		return []string{domain, key1}
	}
	key2, _, _ := strings.Cut(rest, ".")
	return []string{domain, key1, key2}
}

// sanitizeStatName writes ':' and '|' as '_', and the dots of every IPv4
// address (four runs of 1 to 3 digits joined by dots) as '_', as
// envoyproxy/ratelimit's SanitizeStatName does. It returns s itself when
// there is nothing to change.
func sanitizeStatName(s string) string {
	if !strings.ContainsAny(s, ":|") && !hasIPv4(s) {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if c == ':' || c == '|' {
			b[i] = '_'
		}
	}
	for i := 0; i < len(s); {
		if n := ipv4At(s, i); n > 0 {
			for j := i; j < i+n; j++ {
				if b[j] == '.' {
					b[j] = '_'
				}
			}
			i += n
			continue
		}
		i++
	}
	return string(b)
}

func hasIPv4(s string) bool {
	for i := 0; i < len(s); i++ {
		if ipv4At(s, i) > 0 {
			return true
		}
	}
	return false
}

// ipv4At returns the length of the IPv4-like run \d{1,3}(\.\d{1,3}){3}
// that starts at s[i], 0 if none does. Like the regular expression it
// mirrors, it matches the leftmost run and takes at most 3 digits a part.
func ipv4At(s string, i int) int {
	start := i
	for part := 0; part < 4; part++ {
		if part > 0 {
			if i >= len(s) || s[i] != '.' {
				return 0
			}
			i++
		}
		d := 0
		for i < len(s) && d < 3 && s[i] >= '0' && s[i] <= '9' {
			i++
			d++
		}
		if d == 0 {
			return 0
		}
	}
	return i - start
}

// RegisterPeerConfigLoads registers with reg envoyproxy/ratelimit's
// config-load counters under the names its default statsd-exporter mapping
// gives its config_load_success and config_load_error stats:
// ratelimit_service_config_load_success and
// ratelimit_service_config_load_error, counters without labels, which its
// users alert on. loads returns their values: the config loads that
// succeeded and those that failed so far, the first load included. It
// returns the registration error if a metric of either name is already
// registered.
func RegisterPeerConfigLoads(reg prometheus.Registerer, loads func() (ok, failed uint64)) error {
	success := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ratelimit_service_config_load_success",
		Help: "envoyproxy/ratelimit's config_load_success stat: config loads that succeeded."},
		func() float64 { ok, _ := loads(); return float64(ok) })
	failure := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ratelimit_service_config_load_error",
		Help: "envoyproxy/ratelimit's config_load_error stat: config loads that failed (the config in force stayed)."},
		func() float64 { _, failed := loads(); return float64(failed) })
	if err := reg.Register(success); err != nil {
		return err
	}
	return reg.Register(failure)
}
