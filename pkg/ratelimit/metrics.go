package ratelimit

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/shortval"
	"github.com/sluicehq/sluice/pkg/descriptors"
)

// DefaultNearLimitRatio is the share of a limit above which an admitted hit
// also counts as near limit, as in envoyproxy/ratelimit (NEAR_LIMIT_RATIO).
const DefaultNearLimitRatio = 0.8

// Metrics are the Prometheus metrics of decisions, whatever front end asked
// for them. Rate-limit counters are labelled by domain and rule: the rule's
// rate_limit.name when it has one, else its FullKey without the domain; never
// by a raw descriptor value, unless the rule sets detailed_metric (the
// request's entries, values included) or an entry's node sets value_to_metric
// (that entry's value), which ask for the values and so win over the name.
// All hit counters count hits (hits_addend), not calls. Hits given back
// (is_negative_hits) are not hits: they count in refunded_hits, or for a
// concurrency limit in released_slots, and in no other counter. A pool's
// classes also count, by domain, pool rule and class, the hits each class
// had admitted and shed (pool_class_admitted, pool_class_shed), and their
// near-limit ratio is of the class's ceiling. Metrics is safe for
// concurrent use; a nil *Metrics records nothing.
type Metrics struct {
	nearRatio float64

	totalHits       *prometheus.CounterVec
	overLimit       *prometheus.CounterVec
	nearLimit       *prometheus.CounterVec
	withinLimit     *prometheus.CounterVec
	shadowOverLimit *prometheus.CounterVec
	blocked         *prometheus.CounterVec
	refundedHits    *prometheus.CounterVec
	releasedSlots   *prometheus.CounterVec
	failureAnswers  *prometheus.CounterVec
	storeCalls      *prometheus.CounterVec
	storeLatency    prometheus.Histogram
	storeOK         func() prometheus.Counter // storeCalls{result="ok"}, looked up once
	classAdmitted   *prometheus.CounterVec
	classShed       *prometheus.CounterVec

	// rules caches the hit counters of the rule labels that come from the
	// config (not from request values), so that a decision does not look
	// them up in their vectors (hashing and comparing the labels) each time.
	mu      sync.RWMutex
	rules   map[ruleKey]*ruleCounters
	classes map[classKey]*[2]prometheus.Counter // admitted, shed
}

// classKey is the labels of the counters of one class of a pool.
type classKey struct{ domain, rule, class string }

// The hit counters of one rule, indexes into ruleCounters.
const (
	hitsTotal = iota
	hitsWithin
	hitsNear
	hitsShadowOver
	hitsOver
	hitsRefunded
	hitsReleased
	hitsBlocked
	hitsCounters
)

// ruleKey is the labels of the hit counters of one rule.
type ruleKey struct{ domain, rule string }

// ruleCounters are the hit counters of one rule, each looked up in its
// vector when first counted (its series appears then, as without the
// cache) and kept.
type ruleCounters [hitsCounters]atomic.Pointer[prometheus.Counter]

// LatencyBuckets are the histogram buckets, in seconds, of Sluice's latency
// metrics: from 100 us to 100 ms, around Envoy's 20 ms filter timeout.
var LatencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .015, .025, .05, .1}

// NewMetrics creates the metrics and registers them with reg. nearRatio is the
// near-limit ratio in (0, 1]; 0 means DefaultNearLimitRatio. It returns the
// registration error if a metric of the same name is already registered.
func NewMetrics(reg prometheus.Registerer, nearRatio float64) (*Metrics, error) {
	if nearRatio <= 0 || nearRatio > 1 {
		nearRatio = DefaultNearLimitRatio
	}
	rule := []string{"domain", "rule"}
	poolClass := []string{"domain", "rule", "class"}
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m := &Metrics{
		nearRatio: nearRatio,
		totalHits: counter("sluice_rate_limit_total_hits_total",
			"Hits (hits_addend) evaluated against a limit, by domain and rule; refunds and releases are not hits.", rule),
		overLimit:       counter("sluice_rate_limit_over_limit_total", "Hits denied by an enforced limit, by domain and rule.", rule),
		nearLimit:       counter("sluice_rate_limit_near_limit_total", "Admitted hits that left the limit above the near-limit ratio, by domain and rule.", rule),
		withinLimit:     counter("sluice_rate_limit_within_limit_total", "Hits the limit admitted, by domain and rule.", rule),
		shadowOverLimit: counter("sluice_rate_limit_shadow_mode_over_limit_total", "Hits a shadow-mode limit would have denied, by domain and rule.", rule),
		blocked: counter("sluice_rate_limit_penalty_blocked_total",
			"Hits denied by a penalty's block (rate_limit.penalty; shadow-mode ones, which it would have denied, included), by domain and rule.", rule),
		refundedHits: counter("sluice_rate_limit_refunded_hits_total",
			"Hits given back (is_negative_hits) to a limit other than a concurrency one, by domain and rule; not counted in total_hits.", rule),
		releasedSlots: counter("sluice_rate_limit_released_slots_total",
			"Slots of a concurrency limit released (is_negative_hits, the stream's end), by domain and rule; not counted in total_hits.", rule),
		failureAnswers: counter("sluice_failure_mode_answers_total",
			"Calls answered by the failure mode because the store failed, by domain and mode (allow, deny, error).", []string{"domain", "mode"}),
		storeCalls: counter("sluice_store_calls_total", "Store calls, by result (ok, error).", []string{"result"}),
		storeLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_store_call_duration_seconds",
			Help: "Latency of store calls.", Buckets: LatencyBuckets}),
		classAdmitted: counter("sluice_pool_class_admitted_total",
			"Hits of a class that its pool admitted (within the class's ceiling), by domain, pool rule and class.", poolClass),
		classShed: counter("sluice_pool_class_shed_total",
			"Hits of a class that its pool shed (over the class's ceiling; shadow mode aside), by domain, pool rule and class.", poolClass),
	}
	m.rules = make(map[ruleKey]*ruleCounters)
	m.classes = make(map[classKey]*[2]prometheus.Counter)
	m.storeOK = sync.OnceValue(func() prometheus.Counter { return m.storeCalls.WithLabelValues("ok") })
	for _, c := range []prometheus.Collector{m.totalHits, m.overLimit, m.nearLimit, m.withinLimit, m.shadowOverLimit, m.blocked,
		m.refundedHits, m.releasedSlots, m.failureAnswers, m.storeCalls, m.storeLatency, m.classAdmitted, m.classShed} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// metricRule is the rule label of Sluice's own metrics: the rule's
// rate_limit.name when it has one and neither detailed_metric nor
// value_to_metric asks for the values, else ruleLabel (followed, for a rule
// with several limits, by descriptors.Rule.LimitSuffix of l).  l is the
// limit counted, one of st.Limits. fixed reports a label that request
// values do not change.
func metricRule(domain string, st *Status, l *descriptors.Limit, entries []descriptors.Entry) (rule string, fixed bool) {
	valued := st.Rule != nil && (st.Rule.DetailedMetric || slices.ContainsFunc(st.Rule.Lineage, func(n *descriptors.Rule) bool { return n.ValueToMetric }))
	if r := st.Rule; r != nil && l.Name != "" && !valued {
		return l.Name, true
	}
	if r := st.Rule; r != nil && len(st.Limits) > 1 {
		suffix := r.LimitSuffix(l)
		if st.ruleLimits != nil { // a tenant's plan may have other limits than the rule
			suffix = descriptors.LimitSuffixAmong(l, st.ruleLimits)
		}
		return ruleLabel(domain, st, entries) + suffix, !valued
	}
	return ruleLabel(domain, st, entries), !valued
}

// ruleLabel is the key path of a counted descriptor's rule, as
// envoyproxy/ratelimit names it in stats: the rule's FullKey without the
// domain, with values put back where detailed_metric or value_to_metric ask
// for them; an override's name when no rule matched.
func ruleLabel(domain string, st *Status, entries []descriptors.Entry) string {
	if st.Rule == nil {
		return st.Name // a limit override: its name says its rate
	}
	detailed, valued := st.Rule.DetailedMetric, false
	for _, n := range st.Rule.Lineage {
		valued = valued || n.ValueToMetric
	}
	if !detailed && !valued {
		return strings.TrimPrefix(st.Rule.FullKey, domain+".")
	}
	var b strings.Builder
	for i, n := range st.Rule.Lineage {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(n.Key)
		switch {
		case i < len(entries) && (detailed || n.ValueToMetric):
			b.WriteByte('_')
			b.WriteString(labelSafe(entries[i].Value))
		case n.Value != "":
			b.WriteByte('_')
			b.WriteString(n.Value)
		}
	}
	return b.String()
}

// MaxLabelValue is the longest request value a metric label holds as it is
// (detailed_metric, value_to_metric): a longer one keeps its start, "…#"
// and a hash of the whole value (internal/shortval, as the status page
// shows it), so that a client that fills a header cannot make each series
// tens of kilobytes of /metrics and of memory.
const MaxLabelValue = 64

// labelSafe is v as a label shows it: at most MaxLabelValue bytes, and with
// every run of bytes that are not UTF-8 replaced by U+FFFD. A request's
// value, unlike the config's, may hold any bytes (Envoy passes header bytes
// 0x80-0xFF through), and Prometheus panics on a label value that is not
// UTF-8. A short valid v is returned as it is, without a copy.
func labelSafe(v string) string {
	if len(v) > MaxLabelValue {
		v = string(shortval.Append(nil, v, MaxLabelValue))
	}
	return strings.ToValidUTF8(v, "\uFFFD")
}

var _ Observer = (*Metrics)(nil)

// ObserveDescriptor implements Observer: it counts the descriptor's hits as
// total, within limit (and near limit), over limit or shadow over limit, or
// hits given back as refunded hits or (concurrency) released slots, once
// per limit it counts: a rule with rate_limits has one rule label per
// limit, the rule's followed by descriptors.Rule.LimitSuffix ("api.user/1s").
func (m *Metrics) ObserveDescriptor(dom *descriptors.Domain, st *Status, entries []descriptors.Entry) {
	if m == nil {
		return
	}
	for i := range st.Limits {
		ls := &st.Limits[i]
		rule, fixed := metricRule(dom.Name, st, ls.Limit, entries)
		if st.Refund {
			m.observeRefund(dom.Name, rule, fixed, st.Hits, ls.Limit.Algorithm.Traits().InFlight)
			continue
		}
		m.observe(dom.Name, rule, fixed, st.Hits, ls.Result.Allowed, st.Shadow, ls.Result.Remaining, uint64(ls.Limit.CeilingRequests()))
		if ls.Result.Blocked {
			m.counter(m.countersIf(fixed, dom.Name, rule), hitsBlocked, dom.Name, rule).Add(float64(st.Hits))
		}
	}
	if r := st.Rule; r != nil && r.Class != nil && !st.Refund && !st.Override && len(st.Limits) > 0 {
		m.observeClass(dom.Name, r.Class, st.Hits, st.Limits[0].Result.Allowed, st.Shadow)
	}
}

// observeClass records the outcome of a pool's class: hits admitted, or
// shed (a shadow-mode pool sheds nothing). The rule label is the pool's:
// its limit's name, else its FullKey without the domain.
func (m *Metrics) observeClass(domain string, c *descriptors.Class, hits uint64, allowed, shadow bool) {
	if !allowed && shadow {
		return
	}
	rule := c.Pool.Limit.Name
	if rule == "" {
		rule = strings.TrimPrefix(c.Pool.FullKey, domain+".")
	}
	k := classKey{domain, rule, c.Value}
	m.mu.RLock()
	cs := m.classes[k]
	m.mu.RUnlock()
	if cs == nil {
		m.mu.Lock()
		if cs = m.classes[k]; cs == nil {
			cs = &[2]prometheus.Counter{m.classAdmitted.WithLabelValues(domain, rule, c.Value),
				m.classShed.WithLabelValues(domain, rule, c.Value)}
			m.classes[k] = cs
		}
		m.mu.Unlock()
	}
	if allowed {
		cs[0].Add(float64(hits))
	} else {
		cs[1].Add(float64(hits))
	}
}

// observe records one counted descriptor's outcome. fixed says that rule
// comes from the config: its counters are cached.
func (m *Metrics) observe(domain, rule string, fixed bool, hits uint64, allowed, shadow bool, remaining, limit uint64) {
	var rc *ruleCounters
	if fixed {
		rc = m.countersOf(domain, rule)
	}
	n := float64(hits)
	m.counter(rc, hitsTotal, domain, rule).Add(n)
	switch {
	case allowed:
		m.counter(rc, hitsWithin, domain, rule).Add(n)
		if limit > 0 && float64(limit-min(remaining, limit)) > m.nearRatio*float64(limit) {
			m.counter(rc, hitsNear, domain, rule).Add(n)
		}
	case shadow:
		m.counter(rc, hitsShadowOver, domain, rule).Add(n)
	default:
		m.counter(rc, hitsOver, domain, rule).Add(n)
	}
}

// countersIf is the cached counters of rule when fixed (see observe), else
// nil.
func (m *Metrics) countersIf(fixed bool, domain, rule string) *ruleCounters {
	if !fixed {
		return nil
	}
	return m.countersOf(domain, rule)
}

// observeRefund records hits given back to a limit: released slots of a
// limit that counts requests in flight (limiter.Traits.InFlight: a
// concurrency limit), refunded hits of any other.
func (m *Metrics) observeRefund(domain, rule string, fixed bool, hits uint64, release bool) {
	var rc *ruleCounters
	if fixed {
		rc = m.countersOf(domain, rule)
	}
	i := hitsRefunded
	if release {
		i = hitsReleased
	}
	m.counter(rc, i, domain, rule).Add(float64(hits))
}

// countersOf returns the cached counters of domain and rule, adding them.
func (m *Metrics) countersOf(domain, rule string) *ruleCounters {
	k := ruleKey{domain, rule}
	m.mu.RLock()
	rc := m.rules[k]
	m.mu.RUnlock()
	if rc != nil {
		return rc
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if rc = m.rules[k]; rc == nil {
		rc = new(ruleCounters)
		m.rules[k] = rc
	}
	return rc
}

// counter returns hit counter i of domain and rule, from rc when not nil
// (looking it up and keeping it there the first time).
func (m *Metrics) counter(rc *ruleCounters, i int, domain, rule string) prometheus.Counter {
	if rc != nil {
		if c := rc[i].Load(); c != nil {
			return *c
		}
	}
	c := m.vec(i).WithLabelValues(domain, rule)
	if rc != nil {
		rc[i].Store(&c)
	}
	return c
}

// vec is the vector of hit counter i.
func (m *Metrics) vec(i int) *prometheus.CounterVec {
	return [hitsCounters]*prometheus.CounterVec{m.totalHits, m.withinLimit, m.nearLimit, m.shadowOverLimit, m.overLimit,
		m.refundedHits, m.releasedSlots, m.blocked}[i]
}

func (m *Metrics) observeStore(d time.Duration, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.storeCalls.WithLabelValues("error").Inc()
	} else {
		m.storeOK().Inc()
	}
	m.storeLatency.Observe(d.Seconds())
}

func (m *Metrics) observeFailure(domain, mode string) {
	if m == nil {
		return
	}
	m.failureAnswers.WithLabelValues(domain, mode).Inc()
}
