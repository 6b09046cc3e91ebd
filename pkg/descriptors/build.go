package descriptors

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// MaxWindow is the longest window a limit may have (unit times
// unit_multiplier): ten years of 365 days. It is ten times the longest unit
// of envoyproxy/ratelimit (a year), far beyond any quota a deployment counts
// while it runs, and small enough that no arithmetic on a window overflows:
// the current time plus two windows (a counter's lifetime) fits in an int64
// of nanoseconds until the year 2242, and a window in milliseconds is exact
// in the float64 of a Redis Lua script. Build refuses a limit whose window is
// longer, and the layer that reads a descriptor's limit override must refuse
// one that is: Limit.Window saturates rather than overflows, so comparing it
// with MaxWindow is safe for any unit and multiplier.
const MaxWindow = 10 * 365 * 24 * time.Hour

// maxWindowText says MaxWindow in words, for errors.
const maxWindowText = "10 years of 365 days"

const (
	unitChoices = "second, minute, hour, day, week, month or year"
	// minUnitMultiplier is the smallest unit_multiplier.
	minUnitMultiplier = 1
)

// Build validates docs, each one domain, and returns the immutable Config
// they make. It is the one place where the rules of the format are checked,
// whatever the source: Load and Parse decode YAML files into Documents and
// call it, and an xDS source converts RateLimitConfig resources into
// Documents and calls it.
//
// Build returns every problem at once: nil and an errors.Join of *Error
// values, sorted by file, line, column, path and message. Each Error has the
// Document's File, the Pos of the field at fault (zero for a source without
// positions, which Error.Error then leaves out) and the path of the field
// ("descriptors[1].rate_limit.unit"). Warnings go to Config.Warnings the same
// way. A FieldInvalid field or a nil entry in a list is an error too ("a
// value its source could not decode"), so that no Config is made from a tree
// with holes in it: a source that cannot convert something reports it
// itself, as the YAML decoder does (Load and Parse then leave these out).
// nil Documents are skipped, and Build never modifies the Documents, so a
// caller may keep them; the Config shares their Metadata maps, which must
// not change afterwards. No Documents at all give an empty Config. Build is
// pure (no I/O, no logging) and safe for concurrent use.
func Build(docs ...*Document) (*Config, error) {
	return build(docs, nil)
}

// build builds docs, adding errs (problems the sources found) to the
// builder's own.
func build(docs []*Document, errs []*Error) (*Config, error) {
	c := &Config{domains: make(map[string]*Domain), sources: docs}
	reported := make(map[string]bool) // files with problems from their source
	for _, e := range errs {
		reported[e.File] = true
	}
	var warns []*Error
	for _, doc := range docs {
		if doc == nil {
			continue
		}
		b := &builder{report: report{file: doc.File}}
		d := b.document(doc)
		if d.Name != "" {
			if first, ok := c.domains[d.Name]; ok {
				b.errorAt(d.pos, "domain", "domain %s is already defined in %s (%s)",
					quote(d.Name), where(first.File, first.pos), mergeHint(doc.File))
			} else {
				c.domains[d.Name] = d
			}
		}
		errs = append(errs, b.errs...)
		if !reported[doc.File] {
			errs = append(errs, b.undecodable...)
		}
		warns = append(warns, b.warns...)
		c.Files = append(c.Files, doc.File)
	}
	if len(errs) > 0 {
		return nil, errors.Join(asErrors(sortErrors(errs))...)
	}
	for _, d := range c.domains {
		d.index = newIndex(d.Rules)
		c.sorted = append(c.sorted, d)
	}
	slices.SortFunc(c.sorted, func(a, b *Domain) int { return cmp.Compare(a.Name, b.Name) })
	slices.Sort(c.Files)
	c.Warnings = asErrors(sortErrors(warns))
	c.version = sync.OnceValue(c.fingerprint)
	return c, nil
}

// builder validates one Document into a Domain, collecting its errors and
// warnings.
type builder struct {
	report
	names map[string]bool // limit names in the domain, for replaces
	repl  []replaceRef
	// undecodable lists the fields and entries that the source could not
	// decode (FieldInvalid, nil entries). A source reports those itself;
	// build reports these only for a document whose source reported
	// nothing, so that no Config is made from a tree with holes in it.
	undecodable []*Error
}

// state returns the state of f at path, recording a field that the source
// could not decode (or a state that is none of the FieldStates) in
// b.undecodable; both are FieldInvalid.
func state[T any](b *builder, f Field[T], path string) FieldState {
	if f.State == FieldAbsent || f.State == FieldSet {
		return f.State
	}
	b.undecoded(f.Pos, path)
	return FieldInvalid
}

// undecoded records that the source could not decode what is at path.
func (b *builder) undecoded(pos Pos, path string) {
	if len(b.undecodable) < maxErrors {
		b.undecodable = append(b.undecodable, &Error{File: b.fileOf(pos), Line: pos.Line, Column: pos.Column, Path: path,
			Msg: "a value its source could not decode"})
	}
}

type replaceRef struct {
	name string
	pos  Pos
	path string
}

// document builds the Domain of doc. The Domain is partial when b has
// errors; its Name is "" when the domain is missing or empty.
func (b *builder) document(doc *Document) *Domain {
	d := &Domain{File: doc.File, Changes: doc.Changes}
	switch f := doc.Domain; state(b, f, "domain") {
	case FieldAbsent:
		b.errorAt(doc.Pos, "domain", "missing domain")
	case FieldSet:
		if f.Value == "" {
			b.errorAt(f.Pos, "domain", "empty domain")
		}
		d.Name, d.pos = f.Value, f.Pos
	}
	if f := doc.FailureMode; state(b, f, "failure_mode") == FieldSet {
		if mode, ok := ParseFailureMode(f.Value); ok {
			d.FailureMode = mode
		} else {
			b.errorAt(f.Pos, "failure_mode", "unknown failure_mode %s (want error, allow, deny or local)", quote(f.Value))
		}
	}
	if f := doc.Cache; state(b, f, "cache") == FieldSet {
		v := f.Value
		d.Cache = &v
	}
	b.names = make(map[string]bool)
	d.Rules = b.descriptors(doc.Descriptors, "descriptors", d.Name+".", nil, 1)
	for _, r := range b.repl {
		if !b.names[r.name] {
			b.warnAt(r.pos, r.path, "replaces %s, which names no limit in domain %s", quote(r.name), quote(d.Name))
		}
	}
	return d
}

// descriptors builds the rules of one level at path. prefix is the FullKey
// of the parent plus ".", lineage the parent's Lineage, depth the level
// (1 for the top).
func (b *builder) descriptors(nodes []*Node, path, prefix string, lineage []*Rule, depth int) []*Rule {
	if len(nodes) == 0 {
		return nil
	}
	if depth > maxDepth {
		b.errorAt(firstPos(nodes), path, "%s", depthMessage)
		return nil
	}
	type sibling struct {
		pos  Pos
		path string
	}
	seen := make(map[Entry]sibling)
	var rules []*Rule
	for i, n := range nodes {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		if n == nil {
			b.undecoded(Pos{}, ipath)
			continue
		}
		r := b.rule(n, ipath, prefix, lineage, depth)
		rules = append(rules, r)
		if r.Key == "" {
			continue
		}
		e := Entry{r.Key, r.Value}
		if first, dup := seen[e]; dup {
			what := fmt.Sprintf("key %s with value %s", quote(r.Key), quote(r.Value))
			if r.Value == "" {
				what = fmt.Sprintf("key %s without a value", quote(r.Key))
			}
			at := first.path
			if first.pos.Line > 0 {
				at = fmt.Sprintf("line %d, column %d", first.pos.Line, first.pos.Column)
			}
			b.errorAt(n.Pos, ipath, "duplicate descriptor: %s is already at %s", what, at)
			continue
		}
		seen[e] = sibling{n.Pos, ipath}
	}
	return rules
}

// depthMessage is the error for descriptors nested deeper than maxDepth,
// which the YAML decoder also reports (it must stop there, since an alias
// can make a list contain itself).
var depthMessage = fmt.Sprintf("descriptors nested more than %d deep", maxDepth)

func firstPos(nodes []*Node) Pos {
	for _, n := range nodes {
		if n != nil {
			return n.Pos
		}
	}
	return Pos{}
}

// rule builds the Rule of node n at path.
func (b *builder) rule(n *Node, path, prefix string, lineage []*Rule, depth int) *Rule {
	r := &Rule{File: b.file, Line: n.Pos.Line, Column: n.Pos.Column, Changes: n.Changes}
	switch f := n.Key; state(b, f, path+".key") {
	case FieldAbsent:
		b.errorAt(n.Pos, path+".key", "missing key")
	case FieldSet:
		if f.Value == "" {
			b.errorAt(f.Pos, path+".key", "empty key")
		}
		r.Key = f.Value
	}
	if state(b, n.Value, path+".value") == FieldSet {
		r.Value = n.Value.Value
	}
	if r.Wildcard = strings.Contains(r.Value, "*"); r.Wildcard {
		r.segments = strings.Split(r.Value, "*")
	}
	r.FullKey = prefix + r.Key
	if r.Value != "" {
		r.FullKey += "_" + r.Value
	}
	r.Lineage = make([]*Rule, len(lineage)+1)
	copy(r.Lineage, lineage)
	r.Lineage[len(lineage)] = r

	for _, k := range schema {
		if k.buildRule != nil {
			k.buildRule(b, n, r, path)
		}
	}
	if n.RateLimit != nil {
		r.Limit, r.Unlimited = b.rateLimit(n.RateLimit, path+".rate_limit")
		if r.Limit != nil {
			r.Limits = []*Limit{r.Limit}
		}
	}
	if state(b, n.RateLimits, path+".rate_limits") == FieldSet {
		if n.RateLimit != nil {
			b.errorAt(n.RateLimits.KeyPos, path+".rate_limits", "rate_limits with rate_limit (put every limit in rate_limits)")
		}
		r.Limits = b.rateLimitList(n.RateLimits, path+".rate_limits")
		if len(r.Limits) > 0 {
			r.Limit = r.Limits[0]
		}
	}
	r.Children = b.descriptors(n.Descriptors, path+".descriptors", r.FullKey+".", r.Lineage, depth+1)
	if n.RateLimit == nil && n.RateLimits.State == FieldAbsent && len(r.Children) == 0 && n.Classes == nil && r.TenantsFrom == "" {
		b.warnAt(n.Pos, path, "no rate_limit and no descriptors: a request that matches here is never limited")
	}
	if n.Classes != nil {
		r.Pool = b.pool(n, r, path+".classes")
	}
	return r
}

// rateLimit builds a rate_limit at path. It returns the Limit (nil when
// unlimited or when whether it is unlimited is unknown) and whether it is
// unlimited.
func (b *builder) rateLimit(rl *RateLimitNode, path string) (*Limit, bool) {
	l := &Limit{UnitMultiplier: 1}
	if state(b, rl.Name, path+".name") == FieldSet && rl.Name.Value != "" {
		l.Name = rl.Name.Value
		b.names[l.Name] = true
	}
	l.Replaces = b.replaces(rl.Replaces, path+".replaces", l.Name)
	switch unlimited := state(b, rl.Unlimited, path+".unlimited"); {
	case unlimited == FieldInvalid:
		return nil, false // whether unit and requests_per_unit belong here is unknown
	case unlimited == FieldSet && rl.Unlimited.Value:
		b.unlimited(rl, path, len(l.Replaces) > 0)
		return nil, true
	}
	b.limit(rl, path, l)
	return l, false
}

// unlimited reports the keys of rl that make no sense on an unlimited
// limit: those that configure counting (every key of a rate_limit whose
// KeySpec does not say otherwise).
func (b *builder) unlimited(rl *RateLimitNode, path string, replaces bool) {
	for _, k := range schema {
		if k.rl.given == nil || k.unlimited == unlimitedFits {
			continue
		}
		f, kpath := k.rl.given(rl), path+"."+k.Name
		switch f.State {
		case FieldAbsent:
		case FieldSet:
			if k.unlimited == unlimitedWarns {
				// envoyproxy/ratelimit loads these beside unlimited (it
				// refuses only a unit), so a config it runs must load.
				b.warnAt(f.KeyPos, kpath, "%s with unlimited: true has no effect (an unlimited limit counts nothing)", k.Name)
			} else {
				b.errorAt(f.KeyPos, kpath, "%s with unlimited: true (an unlimited limit counts nothing; remove one of them)", k.Name)
			}
		default:
			b.undecoded(f.Pos, kpath)
		}
	}
	if replaces {
		// Rule.Limit is nil for an unlimited rule, so the names would be
		// lost; envoyproxy/ratelimit accepts them, so only warn.
		b.warnAt(rl.Replaces.KeyPos, path+".replaces", "replaces with unlimited: true has no effect (an unlimited limit is never checked, so it replaces nothing)")
	}
}

// limit fills l from the counting fields of rl: unit, requests_per_unit,
// unit_multiplier (within MaxWindow) and algorithm.
func (b *builder) limit(rl *RateLimitNode, path string, l *Limit) {
	errs := len(b.errs)
	switch f := rl.Unit; state(b, f, path+".unit") {
	case FieldAbsent:
		b.errorAt(rl.Pos, path+".unit", "missing unit (want %s)", unitChoices)
	case FieldSet:
		if u, ok := ParseUnit(f.Value); ok {
			l.Unit = u
		} else {
			b.errorAt(f.Pos, path+".unit", "unknown unit %s (want %s)", quote(f.Value), unitChoices)
		}
	}
	switch f := rl.RequestsPerUnit; state(b, f, path+".requests_per_unit") {
	case FieldAbsent:
		b.errorAt(rl.Pos, path+".requests_per_unit", "missing requests_per_unit (0 or more; use unlimited: true for no limit)")
	case FieldSet:
		l.RequestsPerUnit = f.Value
	}
	if f := rl.UnitMultiplier; state(b, f, path+".unit_multiplier") == FieldSet {
		switch {
		case f.Value < minUnitMultiplier:
			b.errorAt(f.Pos, path+".unit_multiplier", "want an integer from %d to %d, got the integer %d", minUnitMultiplier, uint64(math.MaxUint32), f.Value)
		case l.Unit != UnitUnknown && (&Limit{Unit: l.Unit, UnitMultiplier: f.Value}).Window() > MaxWindow:
			// A unit alone is at most a year, so only a multiplier makes a
			// window too long.
			b.errorAt(f.Pos, path+".unit_multiplier", "want an integer from %d to %d with unit %s (a window is at most %s), got the integer %d",
				minUnitMultiplier, MaxWindow/l.Unit.Duration(), l.Unit, maxWindowText, f.Value)
		default:
			l.UnitMultiplier = f.Value
		}
	}
	if f := rl.Algorithm; state(b, f, path+".algorithm") == FieldSet {
		if a, ok := limiter.ParseAlgorithm(f.Value); ok {
			l.Algorithm = a
		} else {
			b.errorAt(f.Pos, path+".algorithm", "unknown algorithm %s (want %s)", quote(f.Value), algorithmChoices())
			return
		}
	}
	b.parameters(rl, path, l, len(b.errs) == errs)
}

// parameters fills and checks the algorithm parameters of l from rl (the
// keys of a rate_limit with a buildLimit: burst, sub_windows, overdraw),
// then the sliding log's cap and the token bucket's precision, these last
// only when the limit so far is clean. l's algorithm is known.
func (b *builder) parameters(rl *RateLimitNode, path string, l *Limit, clean bool) {
	errs := len(b.errs)
	for _, k := range schema {
		if k.buildLimit != nil {
			k.buildLimit(b, rl, l, path)
		}
	}
	if l.Unit == UnitUnknown || !clean || len(b.errs) > errs {
		return
	}
	switch err := l.Store().Validate(); {
	case err == nil:
	case l.Algorithm.Traits().MaxRequests > 0 && uint64(l.RequestsPerUnit) > l.Algorithm.Traits().MaxRequests:
		b.errorAt(rl.RequestsPerUnit.Pos, path+".requests_per_unit", "%d is over %d, the most a %s counts (it keeps one entry per hit; use %s for larger limits)",
			l.RequestsPerUnit, l.Algorithm.Traits().MaxRequests, l.Algorithm, limiter.Algorithm(0))
	default:
		b.errorAt(rl.Pos, path, "%s", strings.TrimPrefix(err.Error(), "limiter: "))
	}
}

// burst fills l.Burst from rl's burst at path: a capacity for an algorithm
// that takes one, of 1 or more, and not on a bucket that never refills.
func (b *builder) burst(rl *RateLimitNode, l *Limit, path string) {
	f := rl.Burst
	if state(b, f, path+".burst") != FieldSet {
		return
	}
	switch {
	case !l.Algorithm.Traits().Burst:
		b.errorAt(f.KeyPos, path+".burst", "burst with algorithm %s (only %s a burst)", l.Algorithm,
			algorithmsWith(func(t limiter.Traits) bool { return t.Burst }))
	case f.Value < 1:
		b.errorAt(f.Pos, path+".burst", "want an integer from 1 to %d, got the integer 0", uint64(math.MaxUint32))
	case rl.RequestsPerUnit.State == FieldSet && l.RequestsPerUnit == 0:
		b.errorAt(f.KeyPos, path+".burst", "burst with requests_per_unit: 0 (a bucket that never refills; remove burst to deny every hit)")
	default:
		l.Burst = f.Value
	}
}

// subWindows fills l.SubWindows from rl's sub_windows at path, for an
// algorithm of sub-windows: DefaultSubWindows when unset.
func (b *builder) subWindows(rl *RateLimitNode, l *Limit, path string) {
	f := rl.SubWindows
	if state(b, f, path+".sub_windows") != FieldSet {
		if l.Algorithm.Traits().SubWindows {
			l.SubWindows = limiter.DefaultSubWindows // divides every whole second
		}
		return
	}
	w := l.Window().Milliseconds()
	switch {
	case !l.Algorithm.Traits().SubWindows:
		b.errorAt(f.KeyPos, path+".sub_windows", "sub_windows with algorithm %s (only %s sub-windows)", l.Algorithm,
			algorithmsWith(func(t limiter.Traits) bool { return t.SubWindows }))
	case f.Value < 1 || f.Value > limiter.MaxSubWindows:
		b.errorAt(f.Pos, path+".sub_windows", "want an integer from 1 to %d, got the integer %d", limiter.MaxSubWindows, f.Value)
	case l.Unit != UnitUnknown && w%int64(f.Value) != 0:
		b.errorAt(f.Pos, path+".sub_windows", "%d does not divide the window (%d ms) into whole milliseconds", f.Value, w)
	default:
		l.SubWindows = uint8(f.Value)
	}
}

// overdraw fills l.Overdraw from rl's overdraw at path (nil when unset),
// refusing true for an algorithm that cannot overdraw.
func (b *builder) overdraw(rl *RateLimitNode, l *Limit, path string) {
	f := rl.Overdraw
	if state(b, f, path+".overdraw") != FieldSet {
		return
	}
	if f.Value && !l.Algorithm.Traits().Overdraw {
		b.errorAt(f.KeyPos, path+".overdraw", "overdraw with algorithm %s (it keeps one entry per admitted hit; overdraw needs %s)", l.Algorithm,
			choices(algorithmNames(func(t limiter.Traits) bool { return t.Overdraw })))
		return
	}
	v := f.Value
	l.Overdraw = &v
}

// cache fills l.Cache from rl's cache at path (nil when unset), refusing
// true for an algorithm that counts requests in flight: a slot must be
// taken in the store, or two instances could both hand out the last one.
func (b *builder) cache(rl *RateLimitNode, l *Limit, path string) {
	f := rl.Cache
	if state(b, f, path+".cache") != FieldSet {
		return
	}
	if f.Value && l.Algorithm.Traits().InFlight {
		b.errorAt(f.KeyPos, path+".cache", "cache with algorithm %s (requests in flight are counted exactly in the store; cache needs %s)", l.Algorithm,
			choices(algorithmNames(func(t limiter.Traits) bool { return !t.InFlight })))
		return
	}
	v := f.Value
	l.Cache = &v
}

// rateLimitList builds rate_limits at path: each item a limit of its own
// (unlimited is not one), no two with the same window and algorithm, nor
// with the same name, and a concurrency limit only beside other
// concurrency limits (see listMix).
func (b *builder) rateLimitList(f Field[[]*RateLimitNode], path string) []*Limit {
	if len(f.Value) == 0 {
		b.errorAt(f.Pos, path, "empty rate_limits (want at least one limit, or remove it)")
		return nil
	}
	type seen struct {
		window time.Duration
		alg    limiter.Algorithm
	}
	first := make(map[seen]int)
	named := make(map[string]int)
	var limits []*Limit
	var at []int // at[k] is the index in f.Value of limits[k]
	for i, rl := range f.Value {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		if rl == nil {
			b.undecoded(f.Pos, ipath)
			continue
		}
		if u := rl.Unlimited; state(b, u, ipath+".unlimited") == FieldSet && u.Value {
			b.errorAt(u.KeyPos, ipath+".unlimited", "unlimited in rate_limits (an unlimited rule has one rate_limit: {unlimited: true})")
			continue
		}
		l, _ := b.rateLimit(rl, ipath)
		if l == nil {
			continue
		}
		if k := (seen{l.Window(), l.Algorithm}); l.Unit != UnitUnknown && algorithmKnown(rl) {
			if j, dup := first[k]; dup {
				b.errorAt(rl.Pos, ipath, "a second limit with window %s and algorithm %s (rate_limits[%d] has them; one counter each, so combine them)",
					windowName(l), l.Algorithm, j)
				continue
			}
			first[k] = i
		}
		if j, dup := named[l.Name]; dup && l.Name != "" {
			b.errorAt(rl.Name.Pos, ipath+".name", "name %s is rate_limits[%d]'s too (the RateLimit headers and metrics tell the limits apart by name; rename one, or remove both names)",
				quote(l.Name), j)
			continue
		}
		named[l.Name] = i
		limits = append(limits, l)
		at = append(at, i)
	}
	b.listMix(f.Value, limits, at, path)
	return limits
}

// listMix refuses a limit that counts requests in flight (a concurrency
// limit: limiter.Traits.InFlight) in rate_limits beside a limit of an
// algorithm that counts requests: Envoy's release (is_negative_hits) gives its hits back
// to every limit of the descriptor, so the other limit would count requests
// in flight, not requests. limits[k] is built from nodes[at[k]].
func (b *builder) listMix(nodes []*RateLimitNode, limits []*Limit, at []int, path string) {
	other := -1
	for k, l := range limits {
		if !l.Algorithm.Traits().InFlight && algorithmKnown(nodes[at[k]]) {
			other = k
			break
		}
	}
	if other < 0 {
		return
	}
	for k, l := range limits {
		if !l.Algorithm.Traits().InFlight {
			continue
		}
		i := at[k]
		ipath := fmt.Sprintf("%s[%d].algorithm", path, i)
		b.errorAt(nodes[i].Algorithm.Pos, ipath, "%s beside %s (rate_limits[%d]): the release when a stream ends (is_negative_hits) gives its hits back to every limit of the descriptor, so rate_limits[%d] would count requests in flight; put the %s limit on a descriptor of its own",
			l.Algorithm, limits[other].Algorithm, at[other], at[other], l.Algorithm)
	}
}

// algorithmKnown reports whether rl's algorithm is absent (the default) or
// one ParseAlgorithm knows. A Limit whose algorithm is unknown holds the
// default instead, which the checks across rate_limits must not take for
// what the user wrote (the unknown algorithm is reported already).
func algorithmKnown(rl *RateLimitNode) bool {
	if rl.Algorithm.State != FieldSet {
		return rl.Algorithm.State == FieldAbsent
	}
	_, ok := limiter.ParseAlgorithm(rl.Algorithm.Value)
	return ok
}

// windowName names a limit's window in a limit's default name and in
// errors: Go's duration text without its zero minutes and seconds ("1s",
// "5m", "1h30m", "24h", "168h" for a week, "1h0m30s" for 3630 seconds).
// Every window is whole seconds, so there is never a fraction.
func windowName(l *Limit) string {
	s := l.Window().String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// LimitName is the name responses and metrics give l, one of r's Limits, in
// domain: l's name, else the rule's FullKey without the domain, followed
// for a rule with several limits by "/" and l's window ("api.user/1s"), and
// by "/" and its algorithm when another of the rule's limits has the same
// window ("api.user/1m/token_bucket"). It is stable across reloads.
func (r *Rule) LimitName(domain string, l *Limit) string {
	if l.Name != "" {
		return l.Name
	}
	return strings.TrimPrefix(r.FullKey, domain+".") + r.LimitSuffix(l)
}

// LimitSuffix tells l apart from r's other Limits in names and metric
// labels: "" for a rule with one limit, else "/" and l's window, and "/"
// and its algorithm when another limit of r has the same window.
func (r *Rule) LimitSuffix(l *Limit) string { return limitSuffix(l, r.Limits) }

// LimitNameAmong is LimitName for l, one of limits, the limits the rule
// counts for a tenant (Rule.TenantLimits) rather than its own.
func (r *Rule) LimitNameAmong(domain string, l *Limit, limits []*Limit) string {
	if l.Name != "" {
		return l.Name
	}
	return strings.TrimPrefix(r.FullKey, domain+".") + LimitSuffixAmong(l, limits)
}

// LimitSuffixAmong is LimitSuffix for l, one of limits, the limits a rule
// counts for a tenant (Rule.TenantLimits) rather than its own.
func LimitSuffixAmong(l *Limit, limits []*Limit) string { return limitSuffix(l, limits) }

func limitSuffix(l *Limit, limits []*Limit) string {
	if len(limits) < 2 {
		return ""
	}
	suffix := "/" + windowName(l)
	for _, o := range limits {
		if o != l && o.Window() == l.Window() {
			return suffix + "/" + l.Algorithm.String()
		}
	}
	return suffix
}

// replaces builds rate_limit.replaces at path for the limit called self.
func (b *builder) replaces(f Field[[]*ReplaceNode], path, self string) []string {
	if state(b, f, path) != FieldSet {
		return nil
	}
	var names []string
	for i, item := range f.Value {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		if item == nil {
			b.undecoded(f.Pos, ipath)
			continue
		}
		switch name := item.Name; {
		case state(b, name, ipath+".name") == FieldAbsent:
			b.errorAt(item.Pos, ipath+".name", "missing name (the name of the limit to replace)")
		case name.State != FieldSet:
		case name.Value == "":
			b.errorAt(name.Pos, ipath+".name", "empty name (want the name of the limit to replace)")
		case name.Value == self:
			b.errorAt(name.Pos, ipath+".name", "limit %s replaces itself", quote(name.Value))
		default:
			names = append(names, name.Value)
			b.repl = append(b.repl, replaceRef{name.Value, name.Pos, ipath + ".name"})
		}
	}
	return names
}

// mergeHint says how to fix a domain defined twice, in the terms of the
// source of file: a file path, or "xds:" and a resource name.
func mergeHint(file string) string {
	if strings.HasPrefix(file, "xds:") {
		return "one domain per resource; the xDS server must send each domain in a single RateLimitConfig"
	}
	return "one domain per file; merge the two files"
}

// where formats a position in file for a message: "file:line:col", or the
// file alone for a source without positions.
func where(file string, pos Pos) string {
	if pos.Line > 0 {
		return fmt.Sprintf("%s:%d:%d", file, pos.Line, pos.Column)
	}
	return file
}

// report collects the errors and warnings of one document. After maxErrors
// errors it reports one more, that it stopped, and then nothing, so that a
// hostile input cannot make an unbounded list.
type report struct {
	file  string
	errs  []*Error
	warns []*Error
	stop  bool
}

func (r *report) errorAt(pos Pos, path, format string, args ...any) {
	if r.stop {
		return
	}
	if len(r.errs) >= maxErrors {
		r.stop = true
		r.errs = append(r.errs, &Error{File: r.file, Line: pos.Line, Column: pos.Column,
			Msg: fmt.Sprintf("too many errors (more than %d); stopping", maxErrors)})
		return
	}
	r.errs = append(r.errs, &Error{File: r.fileOf(pos), Line: pos.Line, Column: pos.Column, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// fileOf is the source a position is in: its own File, else the
// document's.
func (r *report) fileOf(pos Pos) string {
	if pos.File != "" {
		return pos.File
	}
	return r.file
}

func (r *report) warnAt(pos Pos, path, format string, args ...any) {
	r.warns = append(r.warns, &Error{File: r.fileOf(pos), Line: pos.Line, Column: pos.Column, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// sortErrors sorts errs by file, line, column, path and message and drops
// exact repeats (a YAML alias can report one node's problem twice).
func sortErrors(errs []*Error) []*Error {
	slices.SortStableFunc(errs, func(a, b *Error) int {
		return cmp.Or(
			cmp.Compare(a.File, b.File),
			cmp.Compare(a.Line, b.Line),
			cmp.Compare(a.Column, b.Column),
			cmp.Compare(a.Path, b.Path),
			cmp.Compare(a.Msg, b.Msg),
		)
	})
	return slices.CompactFunc(errs, func(a, b *Error) bool { return *a == *b })
}

func asErrors(errs []*Error) []error {
	if len(errs) == 0 {
		return nil
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return out
}

// algorithmsWith lists the algorithms whose Traits has as "a, b or c",
// with the verb that agrees with them: "token_bucket has".
func algorithmsWith(has func(limiter.Traits) bool) string {
	names := algorithmNames(has)
	if len(names) == 1 {
		return names[0] + " has"
	}
	return choices(names) + " have"
}

// algorithmNames is the config spellings of the algorithms whose Traits has.
func algorithmNames(has func(limiter.Traits) bool) []string {
	var names []string
	for _, a := range limiter.AlgorithmsWith(has) {
		names = append(names, a.String())
	}
	return names
}

// algorithmChoices lists the algorithms' config spellings as "a, b or c".
func algorithmChoices() string {
	var names []string
	for _, a := range limiter.Algorithms() {
		names = append(names, a.String())
	}
	return choices(names)
}
