package statuspage

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/shortval"
	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// Defaults of Options.
const (
	// DefaultTopValues is Options.TopValues when zero.
	DefaultTopValues = 10
	// DefaultMaxRules is Options.MaxRules when zero.
	DefaultMaxRules = 1000
	// MaxValueBytes is the longest descriptor value kept as is; a longer one
	// is shortened to its start, "…" and a hash of the whole value.
	MaxValueBytes = 48
	// maxKeyBytes bounds a whole top-k key (every entry of a descriptor).
	maxKeyBytes = 160
	// ringSeconds is how far back the per-second counts go.
	ringSeconds = 120
	// generation is the life of one top-k summary: the page shows the
	// current and the previous one, so "right now" is the last 30 to 60 s.
	generation = 30
)

// Options configures a Recorder. The zero value is usable.
type Options struct {
	// TopValues is how many descriptor values the page shows per rule; the
	// summary tracks 4x as many, so the ones shown are found reliably. Zero
	// means DefaultTopValues; a negative value records no values at all.
	TopValues int
	// Sensitive lists the domains ("billing") and rules ("billing/per_card",
	// a rule named as in metrics: its rate_limit.name, else its key path)
	// whose descriptor values are never recorded.
	Sensitive []string
	// NearLimitRatio is the share of a limit above which an admitted hit is
	// near limit, as in the metrics; 0 means ratelimit.DefaultNearLimitRatio.
	NearLimitRatio float64
	// MaxRules bounds the rules tracked (overrides can add rules that no
	// config names); descriptors of further rules are not recorded. Zero
	// means DefaultMaxRules.
	MaxRules int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Recorder aggregates decisions for the status page. It is a
// ratelimit.Observer; its memory is bounded by MaxRules x (the ring of
// per-second counts + two top-k summaries of 4 x TopValues keys of at most
// maxKeyBytes). It is safe for concurrent use.
type Recorder struct {
	opts      Options
	size      int // top-k summary size, 0 when values are off
	sensitive map[string]bool
	start     time.Time

	mu      sync.RWMutex
	rules   map[ruleKey]*ruleStats
	dropped uint64 // descriptors of rules past MaxRules, under mu

	store storeStats
}

type ruleKey struct{ domain, rule string }

// ruleStats is what the page knows of one rule. Its fields are guarded by
// mu.
type ruleStats struct {
	domain, rule string
	hidden       bool // sensitive: no values recorded
	values       bool // cur and prev exist (read without mu: set once, before rs is shared)

	mu       sync.Mutex
	ring     [ringSeconds]bucket
	limit    *descriptors.Limit // last limit seen: config reloads may change it
	shadow   bool
	classes  []*classStats // a pool's classes, in the order first seen
	cur      *topK         // nil when hidden or values are off
	prev     *topK
	curStart int64 // Unix second at which cur started
}

// bucket holds one second of one rule's decisions. A descriptor that gives
// hits back (is_negative_hits: a refund, or a concurrency limit's release)
// counts only in refunded: it is neither a decision nor hits.
type bucket struct {
	sec                                   int64
	decisions, hits, over, near, shadowed uint64
	refunded                              uint64
}

var (
	_ ratelimit.Observer      = (*Recorder)(nil)
	_ ratelimit.StoreObserver = (*Recorder)(nil)
)

// NewRecorder returns a Recorder with o.
func NewRecorder(o Options) *Recorder {
	if o.TopValues == 0 {
		o.TopValues = DefaultTopValues
	}
	if o.NearLimitRatio <= 0 || o.NearLimitRatio > 1 {
		o.NearLimitRatio = ratelimit.DefaultNearLimitRatio
	}
	if o.MaxRules <= 0 {
		o.MaxRules = DefaultMaxRules
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	r := &Recorder{opts: o, sensitive: map[string]bool{}, rules: map[ruleKey]*ruleStats{}, start: o.Now()}
	if o.TopValues > 0 {
		r.size = 4 * o.TopValues
	}
	for _, s := range o.Sensitive {
		if s = strings.TrimSpace(s); s != "" {
			r.sensitive[s] = true
		}
	}
	return r
}

// ruleName names a counted descriptor's rule as the metrics do without
// values: its limit's name, else its FullKey without the domain, else (an
// override that matched no rule) the override's name.
func ruleName(domain string, st *ratelimit.Status) string {
	switch {
	case st.Rule == nil:
		return st.Name
	case st.Rule.Class != nil:
		return poolName(domain, st.Rule.Class.Pool)
	case st.Rule.Limit != nil && st.Rule.Limit.Name != "":
		return st.Rule.Limit.Name
	}
	return strings.TrimPrefix(st.Rule.FullKey, domain+".")
}

// poolName names a pool's rule (every class of it is one rule on the page):
// its limit's name, else its FullKey without the domain.
func poolName(domain string, pool *descriptors.Rule) string {
	if pool.Limit != nil && pool.Limit.Name != "" {
		return pool.Limit.Name
	}
	return strings.TrimPrefix(pool.FullKey, domain+".")
}

// ObserveDescriptor implements ratelimit.Observer: it counts the descriptor
// in its rule's current second and, unless the rule is sensitive, its
// values in the rule's top-k summary. Hits given back (st.Refund) count as
// refunded, and in nothing else.
func (r *Recorder) ObserveDescriptor(dom *descriptors.Domain, st *ratelimit.Status, entries []descriptors.Entry) {
	rs := r.rule(dom.Name, ruleName(dom.Name, st))
	if rs == nil {
		return
	}
	if st.Refund {
		rs.refund(r.opts.Now().Unix(), st)
		return
	}
	var over, near, shadowed uint64
	switch res := st.Result; {
	case res.Allowed:
		if l := uint64(st.Limit.CeilingRequests()); l > 0 && float64(l-min(res.Remaining, l)) > r.opts.NearLimitRatio*float64(l) {
			near = st.Hits
		}
	case st.Shadow:
		shadowed = st.Hits
	default:
		over = st.Hits
	}
	var buf [maxKeyBytes + 32]byte
	var key []byte
	if rs.values {
		key = valueKey(buf[:0], st.Rule, entries)
	}
	sec := r.opts.Now().Unix()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	b := rs.bucket(sec)
	b.decisions++
	b.hits += st.Hits
	b.over += over
	b.near += near
	b.shadowed += shadowed
	rs.limit, rs.shadow = st.Limit, st.Shadow
	if st.Rule != nil && st.Rule.Class != nil {
		rs.class(st.Rule.Class).count(sec, st.Hits, st.Result.Allowed, st.Shadow)
	}
	if rs.cur != nil {
		rs.rotate(sec)
		rs.cur.add(key, st.Hits, over)
	}
}

// classStats counts one class of a pool: per second, the hits its pool
// admitted and shed. Guarded by its ruleStats' mu.
type classStats struct {
	value, ceiling string
	ring           [ringSeconds]classBucket
}

type classBucket struct {
	sec            int64
	admitted, shed uint64
}

// maxClasses bounds the classes kept per pool rule (reloads may rename
// classes); further ones are not counted.
const maxClasses = 32

// class returns the stats of class c of the pool, adding them if there is
// room (a sink that is never shown otherwise). rs.mu must be held.
func (rs *ruleStats) class(c *descriptors.Class) *classStats {
	for _, cs := range rs.classes {
		if cs.value == c.Value {
			cs.ceiling = c.CeilingText()
			return cs
		}
	}
	cs := &classStats{value: strings.Clone(c.Value), ceiling: c.CeilingText()}
	if len(rs.classes) < maxClasses {
		rs.classes = append(rs.classes, cs)
	}
	return cs
}

// count adds a decision of hits in second sec: admitted, or shed unless in
// shadow mode (which sheds nothing).
func (cs *classStats) count(sec int64, hits uint64, allowed, shadow bool) {
	b := &cs.ring[sec%ringSeconds]
	if b.sec != sec {
		*b = classBucket{sec: sec}
	}
	switch {
	case allowed:
		b.admitted += hits
	case !shadow:
		b.shed += hits
	}
}

// refund counts st's hits given back in second sec.
func (rs *ruleStats) refund(sec int64, st *ratelimit.Status) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.bucket(sec).refunded += st.Hits
	rs.limit, rs.shadow = st.Limit, st.Shadow
}

// bucket returns the bucket of second sec, emptied if it held an older
// second. rs.mu must be held.
func (rs *ruleStats) bucket(sec int64) *bucket {
	b := &rs.ring[sec%ringSeconds]
	if b.sec != sec {
		*b = bucket{sec: sec}
	}
	return b
}

// rule returns the stats of (domain, rule), creating them if there is room.
func (r *Recorder) rule(domain, rule string) *ruleStats {
	k := ruleKey{domain, rule}
	r.mu.RLock()
	rs := r.rules[k]
	r.mu.RUnlock()
	if rs != nil {
		return rs
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rs = r.rules[k]; rs != nil {
		return rs
	}
	if len(r.rules) >= r.opts.MaxRules {
		r.dropped++
		return nil
	}
	rs = &ruleStats{domain: strings.Clone(domain), rule: strings.Clone(rule)}
	rs.hidden = r.sensitive[domain] || r.sensitive[domain+"/"+rule]
	if r.size > 0 && !rs.hidden {
		rs.cur, rs.prev, rs.values = newTopK(r.size), newTopK(r.size), true
		rs.curStart = r.opts.Now().Unix()
	}
	r.rules[k] = rs
	return rs
}

// rotate starts a new top-k generation when the current one is older than
// generation seconds; after two idle generations both are emptied.
func (rs *ruleStats) rotate(sec int64) {
	switch age := sec - rs.curStart; {
	case age < generation:
		return
	case age < 2*generation:
		rs.cur, rs.prev = rs.prev, rs.cur
	default:
		rs.prev.reset()
	}
	rs.cur.reset()
	rs.curStart = sec - (sec-rs.curStart)%generation
}

// valueKey appends to b what identifies a descriptor among those of its
// rule: "key=value" for every entry whose rule node does not fix the value
// (key-only and wildcard nodes; every entry for an override without a
// rule), joined by ", ". Values over MaxValueBytes are shortened, and a key
// over maxKeyBytes is cut, each with a hash of what was cut so distinct
// values stay distinct.
func valueKey(b []byte, rule *descriptors.Rule, entries []descriptors.Entry) []byte {
	for i, e := range entries {
		if rule != nil && i < len(rule.Lineage) {
			if n := rule.Lineage[i]; n.Value != "" && !n.Wildcard {
				continue
			}
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, e.Key...)
		b = append(b, '=')
		b = shortval.Append(b, e.Value, MaxValueBytes)
	}
	if len(b) > maxKeyBytes {
		h := shortval.FNV64(string(b))
		b = append(shortval.Cut(b, maxKeyBytes-20), "…#"...)
		b = strconv.AppendUint(b, h&0xffffffffff, 16)
	}
	return b
}
