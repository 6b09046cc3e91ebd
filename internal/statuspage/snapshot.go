package statuspage

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// seriesSeconds is the length of each live chart, rateSeconds the span of
// every rate and share: the last complete seconds (the current second is
// still filling up).
const (
	seriesSeconds = 60
	rateSeconds   = 10
)

// ConfigStatus is what the page shows of the config in force: where it came
// from and when. internal/app fills it from its config source.
type ConfigStatus struct {
	// Source says where the config comes from, e.g. "files: config/edge.yaml".
	Source string `json:"source"`
	// Version identifies the config in force (a hash of its files, an xDS
	// version_info); "" when none is loaded.
	Version string `json:"version"`
	// LoadedAt is when the config in force was loaded; zero when none is.
	LoadedAt time.Time `json:"loaded_at,omitzero"`
	// Errors are the errors of the last load, empty when it succeeded.
	Errors []string `json:"errors,omitempty"`
	// ErrorAt is when the last load failed; zero when it succeeded.
	ErrorAt time.Time `json:"error_at,omitzero"`
}

// view is the JSON of /ui/api.
type view struct {
	Now          time.Time    `json:"now"`
	Started      time.Time    `json:"started"`
	Version      string       `json:"version"`
	Store        storeView    `json:"store"`
	Config       ConfigStatus `json:"config"`
	Rules        []ruleView   `json:"rules"`
	DroppedRules uint64       `json:"dropped_rules,omitempty"`
	TopValues    int          `json:"top_values"`
}

type storeView struct {
	Kind         string    `json:"kind"`
	Healthy      bool      `json:"healthy"`
	Reason       string    `json:"reason,omitempty"`
	CallsPerSec  float64   `json:"calls_per_s"`
	ErrorsPerSec float64   `json:"errors_per_s"`
	P50Ms        float64   `json:"p50_ms"`
	P99Ms        float64   `json:"p99_ms"`
	Calls        []uint64  `json:"calls"`
	Errors       []uint64  `json:"errors"`
	LastError    string    `json:"last_error,omitempty"`
	LastErrorAt  time.Time `json:"last_error_at,omitzero"`
}

type ruleView struct {
	Domain          string      `json:"domain"`
	Rule            string      `json:"rule"`
	Limit           string      `json:"limit"`
	Algorithm       string      `json:"algorithm,omitempty"`
	Shadow          bool        `json:"shadow,omitempty"`
	DecisionsPerSec float64     `json:"decisions_per_s"`
	HitsPerSec      float64     `json:"hits_per_s"`
	RefundedPerSec  float64     `json:"refunded_per_s"` // hits given back (released, for concurrency), not in HitsPerSec
	OverShare       float64     `json:"over_share"`
	NearShare       float64     `json:"near_share"`
	Decisions       []uint64    `json:"decisions"`
	Over            []uint64    `json:"over"`
	Top             []valueView `json:"top"`
	ValuesHidden    bool        `json:"values_hidden,omitempty"`
	Classes         []classView `json:"classes,omitempty"` // a pool's classes: the config's, in its order, then others seen
}

// classView is one class of a pool: its ceiling and the hits per second its
// pool admitted and shed over the last rateSeconds.
type classView struct {
	Class          string  `json:"class"`
	Ceiling        string  `json:"ceiling"`
	AdmittedPerSec float64 `json:"admitted_per_s"`
	ShedPerSec     float64 `json:"shed_per_s"`
}

type valueView struct {
	Value string `json:"value"`
	Hits  uint64 `json:"hits"`
	Over  uint64 `json:"over"`
	// Hits is a lower bound of the value's hits in the summary's span:
	// exact unless the value took the place of another (space-saving), and
	// then at most MaxError below the truth.
	// MaxError is the count the value inherited when it took that place.
	MaxError uint64 `json:"max_error,omitempty"`
}

// ruleViews returns a view of every rule seen and every limited rule of cfg,
// sorted by domain and rule, at now.
func (r *Recorder) ruleViews(now time.Time, cfg *descriptors.Config) []ruleView {
	sec := now.Unix()
	configured := configuredRules(cfg)
	r.mu.RLock()
	stats := make([]*ruleStats, 0, len(r.rules))
	for _, rs := range r.rules {
		stats = append(stats, rs)
	}
	r.mu.RUnlock()
	var out []ruleView
	for _, rs := range stats {
		v := rs.view(sec, r.opts.TopValues)
		if l, ok := configured[ruleKey{rs.domain, rs.rule}]; ok {
			v.Limit, v.Algorithm = describeRule(l)
			v.Shadow = l.ShadowMode
			v.Classes = configClasses(l, v.Classes)
			delete(configured, ruleKey{rs.domain, rs.rule})
		}
		out = append(out, v)
	}
	for k, rule := range configured {
		limit, alg := describeRule(rule)
		out = append(out, ruleView{Domain: k.domain, Rule: k.rule, Limit: limit, Algorithm: alg,
			Shadow: rule.ShadowMode, Decisions: make([]uint64, seriesSeconds), Over: make([]uint64, seriesSeconds),
			Top: []valueView{}, ValuesHidden: r.sensitive[k.domain] || r.sensitive[k.domain+"/"+k.rule],
			Classes: configClasses(rule, nil)})
	}
	slices.SortFunc(out, func(a, b ruleView) int {
		return cmp.Or(strings.Compare(a.Domain, b.Domain), strings.Compare(a.Rule, b.Rule))
	})
	return out
}

// view is rs at second sec: rates over the last rateSeconds complete
// seconds, the last seriesSeconds for the charts, the top n values.
func (rs *ruleStats) view(sec int64, n int) ruleView {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	v := ruleView{Domain: rs.domain, Rule: rs.rule, Shadow: rs.shadow, ValuesHidden: rs.hidden,
		Decisions: make([]uint64, seriesSeconds), Over: make([]uint64, seriesSeconds), Top: []valueView{}}
	if rs.limit != nil {
		v.Limit, v.Algorithm = describe(rs.limit), rs.limit.Algorithm.String()
	}
	var decisions, hits, over, near, refunded uint64
	for i := range seriesSeconds {
		s := sec - seriesSeconds + int64(i) // complete seconds only
		b := &rs.ring[s%ringSeconds]
		if b.sec != s {
			continue
		}
		v.Decisions[i], v.Over[i] = b.decisions, b.over
		if s >= sec-rateSeconds {
			decisions, hits, over, near = decisions+b.decisions, hits+b.hits, over+b.over, near+b.near
			refunded += b.refunded
		}
	}
	for _, cs := range rs.classes {
		v.Classes = append(v.Classes, cs.view(sec))
	}
	v.DecisionsPerSec = float64(decisions) / rateSeconds
	v.HitsPerSec = float64(hits) / rateSeconds
	v.RefundedPerSec = float64(refunded) / rateSeconds
	if hits > 0 {
		v.OverShare, v.NearShare = float64(over)/float64(hits), float64(near)/float64(hits)
	}
	if rs.cur != nil {
		rs.rotate(sec)
		for _, it := range merge(n, rs.cur, rs.prev) {
			v.Top = append(v.Top, valueView{Value: strings.ToValidUTF8(it.key, "\uFFFD"), Hits: it.count - it.err, Over: it.over, MaxError: it.err})
		}
	}
	return v
}

// view is cs at second sec, its rates over the last rateSeconds complete
// seconds. The caller holds its ruleStats' mu.
func (cs *classStats) view(sec int64) classView {
	var admitted, shed uint64
	for s := sec - rateSeconds; s < sec; s++ {
		if b := &cs.ring[s%ringSeconds]; b.sec == s {
			admitted, shed = admitted+b.admitted, shed+b.shed
		}
	}
	return classView{Class: cs.value, Ceiling: cs.ceiling, AdmittedPerSec: float64(admitted) / rateSeconds,
		ShedPerSec: float64(shed) / rateSeconds}
}

// configClasses returns the classes of pool rule r in config order (each
// with its ceiling in force and the rates of seen, when seen holds it),
// then the classes of seen that the config no longer has; seen when r is
// no pool.
func configClasses(r *descriptors.Rule, seen []classView) []classView {
	if r.Pool == nil {
		return seen
	}
	out := make([]classView, 0, len(r.Pool.Classes)+len(seen))
	for _, c := range r.Pool.Classes {
		v := classView{Class: c.Value}
		if i := slices.IndexFunc(seen, func(s classView) bool { return s.Class == c.Value }); i >= 0 {
			v = seen[i]
			seen = slices.Delete(seen, i, i+1)
		}
		v.Ceiling = c.CeilingText()
		out = append(out, v)
	}
	return append(out, seen...)
}

// store is the store's view at second sec.
func (s *storeStats) view(sec int64) storeView {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := storeView{Calls: make([]uint64, seriesSeconds), Errors: make([]uint64, seriesSeconds), LastError: s.lastErr, LastErrorAt: s.errAt}
	hist := make([]uint64, len(latencyBounds)+1)
	var calls, errs uint64
	for i := range seriesSeconds {
		t := sec - seriesSeconds + int64(i) // complete seconds only
		b := &s.ring[t%ringSeconds]
		if b.sec != t {
			continue
		}
		v.Calls[i], v.Errors[i] = b.calls, b.errors
		if t >= sec-rateSeconds {
			calls, errs = calls+b.calls, errs+b.errors
			for j, n := range b.latency {
				hist[j] += uint64(n)
			}
		}
	}
	v.CallsPerSec, v.ErrorsPerSec = float64(calls)/rateSeconds, float64(errs)/rateSeconds
	v.P50Ms = float64(quantile(0.5, hist)) / float64(time.Millisecond)
	v.P99Ms = float64(quantile(0.99, hist)) / float64(time.Millisecond)
	return v
}

// configuredRules returns every rule of cfg that carries a limit, by the
// name the page gives it.
func configuredRules(cfg *descriptors.Config) map[ruleKey]*descriptors.Rule {
	out := map[ruleKey]*descriptors.Rule{}
	var walk func(domain string, rules []*descriptors.Rule)
	walk = func(domain string, rules []*descriptors.Rule) {
		for _, r := range rules {
			if r.Limit != nil && !r.Unlimited {
				name := r.Limit.Name
				if name == "" {
					name = strings.TrimPrefix(r.FullKey, domain+".")
				}
				out[ruleKey{domain, name}] = r
			}
			walk(domain, r.Children)
		}
	}
	for _, d := range cfg.Domains() {
		walk(d.Name, d.Rules)
	}
	return out
}

// describeRule renders r's limits, every limit of a rate_limits list in
// config order joined by ", " ("5 / second, 1000 / hour"), and their
// algorithms likewise, each named once.
func describeRule(r *descriptors.Rule) (limit, algorithm string) {
	ls := r.Limits
	if len(ls) == 0 {
		ls = []*descriptors.Limit{r.Limit}
	}
	var lims, algs []string
	for _, l := range ls {
		lims = append(lims, describe(l))
		if a := l.Algorithm.String(); !slices.Contains(algs, a) {
			algs = append(algs, a)
		}
	}
	return strings.Join(lims, ", "), strings.Join(algs, ", ")
}

// describe renders a limit as "100 / minute" or "30 / 5 minutes".
func describe(l *descriptors.Limit) string {
	if l == nil {
		return ""
	}
	rate := strconv.FormatUint(uint64(l.RequestsPerUnit), 10) + " / "
	if m := l.UnitMultiplier; m > 1 {
		return rate + strconv.FormatUint(uint64(m), 10) + " " + l.Unit.String() + "s"
	}
	return rate + l.Unit.String()
}
