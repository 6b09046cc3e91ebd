package descriptors

import (
	"fmt"
	"slices"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// This file declares every key of the config format once: where it is
// written, which field of the RateLimitConfig proto carries it over xDS,
// its line in the docs, how the YAML decoder reads it onto the source tree
// (Document, Node, RateLimitNode) and what a reader of the built Config is
// shown of it (Show). The decoder's lists of allowed keys, the error that
// names them, the refusal of a counting key beside unlimited: true, /config
// and the docs' table of keys all read this table; tests hold the proto's
// fields, the xDS conversions and the docs to it. A new key is a row here,
// a field of the source tree and one of the built model, and the builder's
// checks of it.

// Level is the mapping of the format that a key is written in.
type Level uint8

const (
	// LevelDomain is a file's root mapping: one domain (a RateLimitConfig
	// over xDS).
	LevelDomain Level = iota
	// LevelDescriptor is a descriptor (a RateLimitDescriptor).
	LevelDescriptor
	// LevelRateLimit is a rate_limit, and each item of rate_limits (a
	// RateLimitPolicy).
	LevelRateLimit
)

var levelNames = [...]string{"domain", "descriptor", "rate_limit"}

// String names the mapping: "domain" (a file's root), "descriptor" or
// "rate_limit".
func (l Level) String() string {
	if int(l) < len(levelNames) {
		return levelNames[l]
	}
	return fmt.Sprintf("level(%d)", uint8(l))
}

// xdsMessages are the proto messages of each Level.
var xdsMessages = [...]string{"RateLimitConfig", "RateLimitDescriptor", "RateLimitPolicy"}

// XDSMessage is the message of the RateLimitConfig proto that a mapping of
// level l is: RateLimitConfig, RateLimitDescriptor or RateLimitPolicy.
func (l Level) XDSMessage() string {
	if int(l) < len(xdsMessages) {
		return xdsMessages[l]
	}
	return l.String()
}

// KeySpec is one key of the config format. Schema lists them all; every
// part of Sluice that knows the keys reads them there.
type KeySpec struct {
	// Level is the mapping the key is written in.
	Level Level
	// Name is the YAML key ("burst").
	Name string
	// XDS is the field of the Level's message of the RateLimitConfig proto
	// that carries the key over xDS ("shadow_mode"), "" when the proto Sluice
	// is built with has none: a config served over xDS cannot set it.
	XDS string
	// Addition reports a Sluice addition, a key that envoyproxy/ratelimit's
	// format does not have (an old config never sets it). A key of that
	// format may lack an xDS field too (quota_mode).
	Addition bool
	// Doc is the key's line in the docs' table of keys (Markdown).
	Doc string

	// The source side: how the decoder reads the key onto the source tree
	// and whether a tree gives it, set for the key's Level only.
	doc  source[*Document]
	node source[*Node]
	rl   source[*RateLimitNode]
	// The built side: what a reader is shown of the key, on the object of
	// the model that holds its value (for unlimited, the rule), and
	// whether that object sets it; one of the three is set.
	domain built[*Domain]
	rule   built[*Rule]
	limit  built[*Limit]
	// buildRule and buildLimit build the key onto a rule or a limit, for
	// keys the builder's walk does not build itself. buildLimit runs once
	// the limit's algorithm is known.
	buildRule  func(b *builder, n *Node, r *Rule, path string)
	buildLimit func(b *builder, rl *RateLimitNode, l *Limit, path string)
	// unlimited is what a key of a rate_limit means beside unlimited: true.
	unlimited besideUnlimited
}

// Path is the key's path from the mapping its Level's parent writes it in:
// "rate_limit.burst" for a rate_limit's key, the name for the others.
func (k KeySpec) Path() string {
	if k.Level == LevelRateLimit {
		return "rate_limit." + k.Name
	}
	return k.Name
}

// source is how a key is read onto N, a mapping of the source tree.
type source[N any] struct {
	// decode reads the key called key of m, the mapping at path depth
	// levels down, onto n.
	decode func(p *decoder, m yamlMap, key, path string, depth int, n N)
	// given says whether n gives the key, and where.
	given func(n N) keyState
	// copy sets the key of dst to src's, for a policy overlay; nil for the
	// keys an overlay selects by or walks (domain, key, value,
	// descriptors, rate_limit).
	copy func(dst, src N)
}

// keyState is whether a source tree gives a key, and where its key and
// value are (zero when the tree has no positions, or the key is a mapping
// or a list of its own).
type keyState struct {
	State       FieldState
	KeyPos, Pos Pos
}

// built is what a reader is shown of a key on B, an object of the model.
type built[B any] struct {
	// show returns the key's value as shown, nil when nothing is shown.
	show func(x B) any
	// set reports whether x sets the key, for a key without an xDS field:
	// whether a RateLimitConfig could not carry x. nil means show(x) != nil.
	set func(x B) bool
}

func (c built[B]) isSet(x B) bool {
	if c.set != nil {
		return c.set(x)
	}
	return c.show(x) != nil
}

// besideUnlimited is what a rate_limit's key means beside unlimited: true.
type besideUnlimited uint8

const (
	// unlimitedRefuses: the key configures counting, which an unlimited
	// limit does not do: an error. The default, so that a new counting key
	// is refused there without a word.
	unlimitedRefuses besideUnlimited = iota
	// unlimitedWarns: envoyproxy/ratelimit loads it beside unlimited, so a
	// config it runs must load: a warning that it has no effect.
	unlimitedWarns
	// unlimitedFits: the key means something on an unlimited limit too.
	unlimitedFits
)

// scalar is the source side of a key held in a Field of N, decoded by dec
// (given the depth, for a list of mappings).
func scalar[N, T any](at func(N) *Field[T], dec func(p *decoder, depth int) func(field, string) (T, bool)) source[N] {
	return source[N]{
		decode: func(p *decoder, m yamlMap, key, path string, depth int, n N) {
			*at(n) = get(p, m, key, path, dec(p, depth))
		},
		given: func(n N) keyState {
			f := at(n)
			return keyState{f.State, f.KeyPos, f.Pos}
		},
		copy: func(dst, src N) { *at(dst) = *at(src) },
	}
}

// nested is the source side of a key whose value is decoded by decode, a
// mapping or a list of the source tree's own; given says whether a tree has
// it; copy (nil for none) sets dst's value to src's, for an overlay.
func nested[N any](decode func(p *decoder, f field, path string, depth int, n N), given func(N) bool, copy func(dst, src N)) source[N] {
	return source[N]{
		copy: copy,
		decode: func(p *decoder, m yamlMap, key, path string, depth int, n N) {
			if f, ok := m.fields[key]; ok {
				decode(p, f, join(path, key), depth, n)
			}
		},
		given: func(n N) keyState {
			if given(n) {
				return keyState{State: FieldSet}
			}
			return keyState{}
		},
	}
}

func strValue(p *decoder, _ int) func(field, string) (string, bool) { return p.str }
func boolValue(p *decoder, _ int) func(field, string) (bool, bool)  { return p.boolean }

// uintValue decodes an integer from lo (the smallest the key allows, named
// in the error) to 2^32-1.
func uintValue(lo uint64) func(p *decoder, _ int) func(field, string) (uint32, bool) {
	return func(p *decoder, _ int) func(field, string) (uint32, bool) { return p.uint32(lo) }
}

// ruleFlag is a descriptor's key that is a flag of its rule, at n and r in
// the source tree and the model: decoded as a bool, shown when true.
func ruleFlag(k KeySpec, n func(*Node) *Field[bool], r func(*Rule) *bool) KeySpec {
	k.Level = LevelDescriptor
	k.node = scalar(n, boolValue)
	k.buildRule = func(b *builder, nd *Node, rule *Rule, path string) {
		if f := n(nd); state(b, *f, join(path, k.Name)) == FieldSet {
			*r(rule) = f.Value
		}
	}
	k.rule = built[*Rule]{show: func(rule *Rule) any { return shownIf(true, *r(rule)) }}
	return k
}

// shownIf returns v when show is true, else nil (nothing shown).
func shownIf(v any, show bool) any {
	if !show {
		return nil
	}
	return v
}

// schema is every key of the format: the file's, then a descriptor's,
// then a rate_limit's, each in the order errors list them. Set by init,
// since its decoders reach the decoder, which reads it.
var schema []KeySpec

// The keys each mapping allows, from schema, in its order.
var fileKeys, descriptorKeys, rateLimitKeys []string

func init() {
	schema = schemaTable()
	for _, k := range schema {
		switch k.Level {
		case LevelDomain:
			fileKeys = append(fileKeys, k.Name)
		case LevelDescriptor:
			descriptorKeys = append(descriptorKeys, k.Name)
		case LevelRateLimit:
			rateLimitKeys = append(rateLimitKeys, k.Name)
		}
	}
}

// Schema returns every key of the format, in the order of the levels
// (LevelDomain, LevelDescriptor, LevelRateLimit) and, within a level, the
// order in which errors list the keys allowed. The slice is a fresh copy.
func Schema() []KeySpec {
	return slices.Clone(schema)
}

// schemaTable is the table of keys.
func schemaTable() []KeySpec {
	return slices.Concat(domainKeys(), nodeKeys(), rateLimitKeySpecs())
}

func domainKeys() []KeySpec {
	return []KeySpec{
		{Level: LevelDomain, Name: "domain", XDS: "domain",
			Doc:    "the domain a request names first; one per file (per resource over xDS), required",
			doc:    scalar(func(d *Document) *Field[string] { return &d.Domain }, strValue),
			domain: built[*Domain]{show: func(d *Domain) any { return d.Name }}},
		{Level: LevelDomain, Name: "descriptors", XDS: "descriptors",
			Doc: "the top-level descriptors, matched in this order",
			doc: nested(func(p *decoder, f field, path string, depth int, d *Document) {
				d.Descriptors = p.descriptors(f.val, path, depth+1)
			}, func(d *Document) bool { return d.Descriptors != nil }, nil),
			domain: built[*Domain]{show: func(d *Domain) any { return d.Rules }}},
		{Level: LevelDomain, Name: "failure_mode", Addition: true,
			Doc: "what the domain answers when the store fails: `error` (gRPC UNAVAILABLE, for Envoy's failure_mode_deny to decide), " +
				"`allow`, `deny` or `local` (decide in process with the limit divided by the live instances until the store answers); unset, `--failure-mode`",
			doc: scalar(func(d *Document) *Field[string] { return &d.FailureMode }, strValue),
			domain: built[*Domain]{show: func(d *Domain) any {
				return shownIf(d.FailureMode.String(), d.FailureMode != FailureModeUnset)
			}}},
		{Level: LevelDomain, Name: "cache", Addition: true,
			Doc: "the `cache` of every rate_limit of the domain that sets none; unset, `--cache` (default false)",
			doc: scalar(func(d *Document) *Field[bool] { return &d.Cache }, boolValue),
			domain: built[*Domain]{show: func(d *Domain) any {
				return shownIf(d.Cache, d.Cache != nil)
			}}},
	}
}

func nodeKeys() []KeySpec {
	return []KeySpec{
		{Level: LevelDescriptor, Name: "key", XDS: "key",
			Doc:  "the key of the request's entry at this depth, required",
			node: scalar(func(n *Node) *Field[string] { return &n.Key }, strValue),
			rule: built[*Rule]{show: func(r *Rule) any { return r.Key }}},
		{Level: LevelDescriptor, Name: "value", XDS: "value",
			Doc: "the entry's value, `*` standing for any run of characters; unset, any value " +
				"(an exact value wins over the first wildcard that matches, which wins over no value)",
			node: scalar(func(n *Node) *Field[string] { return &n.Value }, strValue),
			rule: built[*Rule]{show: func(r *Rule) any { return shownIf(r.Value, r.Value != "") }}},
		{Level: LevelDescriptor, Name: "rate_limit", XDS: "rate_limit",
			Doc: "the limit of a request whose last entry matches here (keys below); none: never limited",
			node: nested(func(p *decoder, f field, path string, depth int, n *Node) {
				n.RateLimit = p.rateLimit(f.val, path, depth)
			}, func(n *Node) bool { return n.RateLimit != nil }, nil),
			rule: built[*Rule]{show: func(r *Rule) any { return shownIf(r.Limit, r.Limit != nil) }}},
		{Level: LevelDescriptor, Name: "rate_limits", Addition: true,
			Doc: "instead of `rate_limit`, several limits, each a `rate_limit` counted on its own; a request is admitted " +
				"only if every one admits it",
			node: scalar(func(n *Node) *Field[[]*RateLimitNode] { return &n.RateLimits },
				func(p *decoder, depth int) func(field, string) ([]*RateLimitNode, bool) {
					return func(f field, path string) ([]*RateLimitNode, bool) { return p.rateLimits(f.val, path, depth) }
				}),
			rule: built[*Rule]{show: func(r *Rule) any { return shownIf(r.Limits, len(r.Limits) > 1) }}},
		{Level: LevelDescriptor, Name: "descriptors", XDS: "descriptors",
			Doc: "the nested descriptors, for the request's next entry",
			node: nested(func(p *decoder, f field, path string, depth int, n *Node) {
				n.Descriptors = p.descriptors(f.val, path, depth+1)
			}, func(n *Node) bool { return n.Descriptors != nil }, nil),
			rule: built[*Rule]{show: func(r *Rule) any { return shownIf(r.Children, len(r.Children) > 0) }}},
		ruleFlag(KeySpec{Name: "shadow_mode", XDS: "shadow_mode",
			Doc: "count and measure as usual, but answer OK"},
			func(n *Node) *Field[bool] { return &n.ShadowMode }, func(r *Rule) *bool { return &r.ShadowMode }),
		ruleFlag(KeySpec{Name: "quota_mode",
			Doc: "a quota: over its limit, it makes the request OVER_LIMIT only when every quota descriptor of the request is over"},
			func(n *Node) *Field[bool] { return &n.QuotaMode }, func(r *Rule) *bool { return &r.QuotaMode }),
		ruleFlag(KeySpec{Name: "detailed_metric", XDS: "detailed_metric",
			Doc: "name the request's entries, values included, in the rule's metrics"},
			func(n *Node) *Field[bool] { return &n.DetailedMetric }, func(r *Rule) *bool { return &r.DetailedMetric }),
		ruleFlag(KeySpec{Name: "value_to_metric",
			Doc: "name the value the request sent for this descriptor (a wildcard's or a key-only one's) in the metrics"},
			func(n *Node) *Field[bool] { return &n.ValueToMetric }, func(r *Rule) *bool { return &r.ValueToMetric }),
		ruleFlag(KeySpec{Name: "share_threshold",
			Doc: "with a wildcard `value`: every value it matches shares one counter"},
			func(n *Node) *Field[bool] { return &n.ShareThreshold }, func(r *Rule) *bool { return &r.ShareThreshold }),
		{Level: LevelDescriptor, Name: "metadata",
			Doc: "a mapping returned to Envoy as dynamic metadata when the rule matches (`--dynamic-metadata`)",
			node: nested(func(p *decoder, f field, path string, _ int, n *Node) {
				n.Metadata = p.metadata(f.val, path)
			}, func(n *Node) bool { return n.Metadata != nil }, func(dst, src *Node) { dst.Metadata = src.Metadata }),
			buildRule: func(_ *builder, n *Node, r *Rule, _ string) { r.Metadata = n.Metadata },
			rule:      built[*Rule]{show: func(r *Rule) any { return shownIf(r.Metadata, len(r.Metadata) > 0) }}},
		{Level: LevelDescriptor, Name: "classes", Addition: true,
			Doc: "priority classes sharing the `rate_limit` as one pool: `key`, the entry that names a request's class, and " +
				"`ceilings`, a list of `{value, ceiling}`, each class admitted while the pool is under its ceiling (a percentage)",
			node: nested(func(p *decoder, f field, path string, depth int, n *Node) {
				n.Classes = p.classes(f, path, depth)
			}, func(n *Node) bool { return n.Classes != nil }, func(dst, src *Node) { dst.Classes = src.Classes }),
			rule: built[*Rule]{show: showPool}},
		{Level: LevelDescriptor, Name: "tenants_from", Addition: true,
			Doc: "the name of a tenant table (`sluice tenants`) that gives each value of this entry a plan or limits of its own; " +
				"a value the table lacks gets this node's limits (the default plan)",
			node:      scalar(func(n *Node) *Field[string] { return &n.TenantsFrom }, strValue),
			buildRule: (*builder).tenantsFrom,
			rule:      built[*Rule]{show: func(r *Rule) any { return shownIf(r.TenantsFrom, r.TenantsFrom != "") }}},
		{Level: LevelDescriptor, Name: "plans", Addition: true,
			Doc: "with `tenants_from`: named limits that the table's rows name, each `NAME: {rate_limit: ...}` or " +
				"`NAME: {rate_limits: [...]}` (any algorithm)",
			node: scalar(func(n *Node) *Field[[]*PlanNode] { return &n.Plans },
				func(p *decoder, depth int) func(field, string) ([]*PlanNode, bool) {
					return func(f field, path string) ([]*PlanNode, bool) { return p.plans(f.val, path, depth) }
				}),
			buildRule: (*builder).plans,
			rule:      built[*Rule]{show: showPlans}},
	}
}

// showPool shows a pool's classes: its key, each class's ceiling as written
// and in requests (what it admits of requests_per_unit), and the lowest
// class (a request's whose class entry is missing or names no class).
func showPool(r *Rule) any {
	p := r.Pool
	if p == nil {
		return nil
	}
	ceilings := make([][]KeyValue, len(p.Classes))
	for i, c := range p.Classes {
		ceilings[i] = []KeyValue{{"value", c.Value}, {"ceiling", c.CeilingText()}, {"requests", c.Rule.Limit.CeilingRequests()}}
	}
	return []KeyValue{{"key", p.Key}, {"ceilings", ceilings}, {"lowest", p.Lowest.Value}}
}

func rateLimitKeySpecs() []KeySpec {
	return append(rateLimitEnvoySpecs(), rateLimitAdditionSpecs()...)
}

// rateLimitEnvoySpecs are the keys of a rate_limit that the peer's format
// has too, in the order of the docs' table.
func rateLimitEnvoySpecs() []KeySpec {
	limitShow := func(show func(l *Limit) any) built[*Limit] { return built[*Limit]{show: show} }
	return []KeySpec{
		{Level: LevelRateLimit, Name: "unit", XDS: "unit",
			Doc:   "the window's unit: " + unitChoices + " (month 30 days, year 365), any case; required",
			rl:    scalar(func(rl *RateLimitNode) *Field[string] { return &rl.Unit }, strValue),
			limit: limitShow(func(l *Limit) any { return l.Unit.String() })},
		{Level: LevelRateLimit, Name: "requests_per_unit", XDS: "requests_per_unit",
			Doc:       "hits admitted per window; 0 denies every hit; required",
			rl:        scalar(func(rl *RateLimitNode) *Field[uint32] { return &rl.RequestsPerUnit }, uintValue(0)),
			limit:     limitShow(func(l *Limit) any { return l.RequestsPerUnit }),
			unlimited: unlimitedWarns},
		{Level: LevelRateLimit, Name: "unlimited", XDS: "unlimited",
			Doc:       "matched, never limited, not counted (with no other counting key)",
			rl:        scalar(func(rl *RateLimitNode) *Field[bool] { return &rl.Unlimited }, boolValue),
			rule:      built[*Rule]{show: func(r *Rule) any { return shownIf(true, r.Unlimited) }},
			unlimited: unlimitedFits},
		{Level: LevelRateLimit, Name: "name", XDS: "name",
			Doc:       "the limit's name in headers, metrics and `replaces`",
			rl:        scalar(func(rl *RateLimitNode) *Field[string] { return &rl.Name }, strValue),
			limit:     limitShow(func(l *Limit) any { return shownIf(l.Name, l.Name != "") }),
			unlimited: unlimitedFits},
		{Level: LevelRateLimit, Name: "replaces", XDS: "replaces",
			Doc: "a list of `{name: ...}`: the named limits of the request's other descriptors that this one replaces",
			rl: scalar(func(rl *RateLimitNode) *Field[[]*ReplaceNode] { return &rl.Replaces },
				func(p *decoder, depth int) func(field, string) ([]*ReplaceNode, bool) {
					return func(f field, path string) ([]*ReplaceNode, bool) { return p.replaces(f.val, path, depth) }
				}),
			limit:     limitShow(func(l *Limit) any { return shownIf(l.Replaces, len(l.Replaces) > 0) }),
			unlimited: unlimitedFits},
	}
}

// rateLimitAdditionSpecs are the keys of a rate_limit that Sluice adds
// (none has an xDS field), in the order of the docs' table.
func rateLimitAdditionSpecs() []KeySpec {
	limitShow := func(show func(l *Limit) any) built[*Limit] { return built[*Limit]{show: show} }
	return []KeySpec{
		{Level: LevelRateLimit, Name: "unit_multiplier", Addition: true,
			Doc:       fmt.Sprintf("the window in units (`unit: second`, `unit_multiplier: 30`: 30 s), %d or more, the window at most %s; default 1", minUnitMultiplier, maxWindowText),
			rl:        scalar(func(rl *RateLimitNode) *Field[uint32] { return &rl.UnitMultiplier }, uintValue(minUnitMultiplier)),
			limit:     limitShow(func(l *Limit) any { return shownIf(l.UnitMultiplier, l.UnitMultiplier > 1) }),
			unlimited: unlimitedWarns},
		{Level: LevelRateLimit, Name: "algorithm", Addition: true,
			Doc: "how the limit counts: " + algorithmChoices() + "; unset, `--algorithm` (default " + limiter.Algorithm(0).String() + ")",
			rl:  scalar(func(rl *RateLimitNode) *Field[string] { return &rl.Algorithm }, strValue),
			limit: built[*Limit]{show: func(l *Limit) any { return l.Algorithm.String() },
				set: func(l *Limit) bool { return l.Algorithm != limiter.Algorithm(0) }}},
		{Level: LevelRateLimit, Name: "burst", Addition: true,
			Doc:        "with " + choices(algorithmNames(func(t limiter.Traits) bool { return t.Burst })) + ": the bucket's capacity in hits; unset, `--token-bucket-burst` of `requests_per_unit` (default all of it)",
			rl:         scalar(func(rl *RateLimitNode) *Field[uint32] { return &rl.Burst }, uintValue(1)),
			buildLimit: (*builder).burst,
			limit:      limitShow(func(l *Limit) any { return shownIf(l.Burst, l.Burst != 0) })},
		{Level: LevelRateLimit, Name: "sub_windows", Addition: true,
			Doc: fmt.Sprintf("with %s: the counters per window, 1 to %d, each dividing the window into whole milliseconds; unset, `--sub-windows` (default %d)",
				choices(algorithmNames(func(t limiter.Traits) bool { return t.SubWindows })), limiter.MaxSubWindows, limiter.DefaultSubWindows),
			rl:         scalar(func(rl *RateLimitNode) *Field[uint32] { return &rl.SubWindows }, uintValue(1)),
			buildLimit: (*builder).subWindows,
			limit: built[*Limit]{show: func(l *Limit) any { return shownIf(l.SubWindows, l.SubWindows != 0) },
				set: func(l *Limit) bool { return l.SubWindows != 0 && l.SubWindows != limiter.DefaultSubWindows }}},
		{Level: LevelRateLimit, Name: "overdraw", Addition: true,
			Doc:        "count every hit the limit is sent, admitted or not, and admit while under the limit (response cost, token budgets); unset, `--overdraw`",
			rl:         scalar(func(rl *RateLimitNode) *Field[bool] { return &rl.Overdraw }, boolValue),
			buildLimit: (*builder).overdraw,
			limit:      limitShow(func(l *Limit) any { return shownIf(l.Overdraw, l.Overdraw != nil) })},
		{Level: LevelRateLimit, Name: "calendar", Addition: true,
			Doc: "with " + limiter.FixedWindow.String() + " and unit day, week or month: `{time_zone: Europe/Berlin}` resets the count at " +
				"the start of each calendar day, ISO week (Monday) or month in that zone, however long (23 or 25 hours across a DST change)",
			rl: scalar(func(rl *RateLimitNode) *Field[*CalendarNode] { return &rl.Calendar },
				func(p *decoder, depth int) func(field, string) (*CalendarNode, bool) {
					return func(f field, path string) (*CalendarNode, bool) { return p.calendar(f.val, path, depth) }
				}),
			buildLimit: (*builder).calendar,
			limit:      limitShow(showCalendar)},
		{Level: LevelRateLimit, Name: "penalty", Addition: true,
			Doc: "`{block: 10m, escalate: 2, max: 24h, forget: 24h}`: once the limit denies a key it stays over the limit for `block` " +
				"(Retry-After says until when); each further offence within `forget` after the last block multiplies the block by `escalate` " +
				"(default 1), up to `max` (default `block`); not with concurrency, classes or `cache`; a shadow rule reports blocks without denying",
			rl: scalar(func(rl *RateLimitNode) *Field[*PenaltyNode] { return &rl.Penalty },
				func(p *decoder, depth int) func(field, string) (*PenaltyNode, bool) {
					return func(f field, path string) (*PenaltyNode, bool) { return p.penalty(f.val, path, depth) }
				}),
			buildLimit: (*builder).penalty,
			limit:      limitShow(showPenalty)},
		{Level: LevelRateLimit, Name: "cache", Addition: true,
			Doc: "decide in process from the counter's last shared count plus this instance's hits since, synced every " +
				"`--cache-sync` (default 100 ms), and through the store near the limit (the bound: see the limiter cache); " +
				"not with concurrency or classes; unset, the domain's `cache`, else `--cache` (default false)",
			rl:         scalar(func(rl *RateLimitNode) *Field[bool] { return &rl.Cache }, boolValue),
			buildLimit: (*builder).cache,
			limit:      limitShow(func(l *Limit) any { return shownIf(l.Cache, l.Cache != nil) })},
	}
}

// KeyValue is one key of the format and its value as built, for a reader of
// the config (/config). Value is a plain value (a string, a bool, a number,
// a list of strings, a metadata mapping), a mapping or list of mappings of
// the key's own ([]KeyValue, [][]KeyValue), or the model's own objects for
// the keys that hold mappings of the format: *Limit (rate_limit), []*Limit
// (rate_limits) and []*Rule (descriptors), each shown in turn by its Show.
type KeyValue struct {
	Key   string
	Value any
}

// Show returns what a reader is shown of d: each key of a file's root that
// d sets (domain, descriptors, failure_mode), in the schema's order.
func (d *Domain) Show() []KeyValue {
	return showKeys(d, func(k KeySpec) built[*Domain] { return k.domain })
}

// Show returns what a reader is shown of r: each key of a descriptor that r
// sets, and unlimited, in the schema's order. A rule with several limits
// shows its first as rate_limit and all of them as rate_limits.
func (r *Rule) Show() []KeyValue { return showKeys(r, func(k KeySpec) built[*Rule] { return k.rule }) }

// Show returns what a reader is shown of l: each key of a rate_limit that
// l sets, in the schema's order. The algorithm is always shown, and a
// sliding window's sub_windows too: what counts, not only what was written.
func (l *Limit) Show() []KeyValue {
	return showKeys(l, func(k KeySpec) built[*Limit] { return k.limit })
}

func showKeys[B any](x B, of func(KeySpec) built[B]) []KeyValue {
	var out []KeyValue
	for _, k := range schema {
		if c := of(k); c.show != nil {
			if v := c.show(x); v != nil {
				out = append(out, KeyValue{k.Name, v})
			}
		}
	}
	return out
}

// WithoutXDS returns the keys that r (and its Limit) sets and that the
// RateLimitConfig proto has no field for, by their Path ("quota_mode",
// "rate_limit.burst"), in the schema's order: what a config served over
// xDS cannot carry. Several limits are rate_limits, which the proto lacks,
// so only the first limit's keys are looked at.
func (r *Rule) WithoutXDS() []string {
	out := withoutXDS(r, func(k KeySpec) built[*Rule] { return k.rule })
	if r.Limit != nil {
		out = append(out, withoutXDS(r.Limit, func(k KeySpec) built[*Limit] { return k.limit })...)
	}
	return out
}

// WithoutXDS returns the keys of a file's root that d sets and that the
// RateLimitConfig proto has no field for (failure_mode).
func (d *Domain) WithoutXDS() []string {
	return withoutXDS(d, func(k KeySpec) built[*Domain] { return k.domain })
}

func withoutXDS[B any](x B, of func(KeySpec) built[B]) []string {
	var out []string
	for _, k := range schema {
		if c := of(k); k.XDS == "" && c.show != nil && c.isSet(x) {
			out = append(out, k.Path())
		}
	}
	return out
}

// Given returns the keys d gives (set, or given but not decodable), in the
// schema's order.
func (d *Document) Given() []string {
	return givenKeys(d, func(k KeySpec) source[*Document] { return k.doc })
}

// Given returns the keys n gives, in the schema's order.
func (n *Node) Given() []string { return givenKeys(n, func(k KeySpec) source[*Node] { return k.node }) }

// Given returns the keys rl gives, in the schema's order.
func (rl *RateLimitNode) Given() []string {
	return givenKeys(rl, func(k KeySpec) source[*RateLimitNode] { return k.rl })
}

func givenKeys[N any](n N, of func(KeySpec) source[N]) []string {
	var out []string
	for _, k := range schema {
		if s := of(k); s.given != nil && s.given(n).State != FieldAbsent {
			out = append(out, k.Name)
		}
	}
	return out
}

// decodeKeys reads every key of m, the mapping at path of the given level,
// onto n, its source form.
func decodeKeys[N any](p *decoder, m yamlMap, path string, depth int, n N, of func(KeySpec) source[N]) {
	for _, k := range schema {
		if s := of(k); s.decode != nil {
			s.decode(p, m, k.Name, path, depth, n)
		}
	}
}
