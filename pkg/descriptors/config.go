package descriptors

import (
	"fmt"
	"slices"
)

// Config is a loaded, validated set of domains. It is immutable after Load
// or Parse returns and safe for concurrent use; a reload builds a new Config.
// A nil *Config has no domains: Domain and Match return nil.
type Config struct {
	// Files lists the files the config was loaded from, sorted.
	Files []string
	// Warnings lists problems that envoyproxy/ratelimit accepts and that do
	// not stop loading (a replaces naming no limit, a rule with neither a
	// limit nor children), sorted by file, line and column. Each is an
	// *Error.
	Warnings []error

	domains map[string]*Domain
	sources []*Document   // as given to Build, before any Policy
	sorted  []*Domain     // by Name
	version func() string // Version, computed once
}

// Domain is the descriptor tree of one domain (one config file).
type Domain struct {
	// Name is the domain key (the file's domain), never empty.
	Name string
	// File is the file the domain came from, as given to Load or Parse.
	File string
	// FailureMode is the domain's failure_mode (a Sluice addition);
	// FailureModeUnset when the file sets none.
	FailureMode FailureMode
	// Cache is the domain's cache (a Sluice addition), the limiter cache of
	// every rate limit of the domain that sets none (Limit.Cache); nil when
	// the file sets none: the service's default (the --cache setting)
	// decides.
	Cache *bool
	// Rules are the top-level descriptors, in config order.
	Rules []*Rule
	// Changes are what a Policy (an overlay entry, a process default)
	// set on the domain, in the order applied; nil when none.
	Changes []Change

	pos   Pos   // of the domain value, for the duplicate-domain error
	index index // of Rules, for Match
}

// Rule is one node of a descriptor tree: a key, an optional value, and the
// flags and limit set on it.
type Rule struct {
	// Key and Value are the node's key and value; Value is "" for a key-only
	// node, which matches any value.
	Key, Value string
	// Wildcard reports that Value contains '*', each standing for any run of
	// characters (including none).
	Wildcard bool
	// FullKey names the rule the way envoyproxy/ratelimit names it in stats:
	// "domain.key_value.key2" (a key-only level is just "key").
	FullKey string
	// Limit is the rule's rate_limit, nil when the node has none or is
	// Unlimited. A matched rule with a nil Limit is not counted. For a rule
	// with rate_limits it is the first of Limits.
	Limit *Limit
	// Limits are every limit of the rule, each its own counter: rate_limits
	// in config order, or the one rate_limit; nil when Limit is.
	Limits []*Limit
	// Unlimited is rate_limit.unlimited: matched, never limited, not counted.
	Unlimited bool
	// ShadowMode, QuotaMode, DetailedMetric, ValueToMetric and
	// ShareThreshold are the node's shadow_mode, quota_mode, detailed_metric,
	// value_to_metric and share_threshold.
	ShadowMode, QuotaMode, DetailedMetric, ValueToMetric, ShareThreshold bool
	// Metadata is the node's metadata block as decoded YAML (maps, lists,
	// strings, numbers, bools), nil when unset.
	Metadata map[string]any
	// Children are the nested descriptors, in config order.
	Children []*Rule
	// Lineage is the path from the domain root to this rule: Lineage[0] is a
	// top-level rule and Lineage[len-1] is this rule, so a request entry i
	// matched by this rule's walk matched Lineage[i]. A pool's class rule
	// ends with the pool's rule and itself, so a request without the class
	// entry has one entry fewer than its Lineage.
	Lineage []*Rule
	// File, Line and Column locate the node in its config file (1-based).
	File         string
	Line, Column int
	// Changes are what a Policy (an overlay entry, a process default) set
	// on the rule, in the order applied; nil when none.
	Changes []Change

	// Pool is the rule's classes (a Sluice addition) when its Limit is a
	// pool that several classes of request share, nil otherwise. A
	// request that ends at this rule, or whose next and last entry has the
	// class key, matches one of Pool.Classes' Rules instead of this one.
	Pool *Pool
	// Class is the class this rule counts, for a rule Match returns for a
	// pool's class (made by the builder, not in Children); nil otherwise.
	Class *Class
	// TenantsFrom is the tenant table (tenants_from, a Sluice addition) that
	// gives each value this rule matches its own plan or limits; "" when
	// none. A value the table lacks counts Limits (the default plan).
	TenantsFrom string
	// Plans are the rule's plans (plans, a Sluice addition), in config
	// order, each name unique; nil without tenants_from.
	Plans []*Plan

	segments []string // Value split at '*', when Wildcard
	index    index    // of Children, for Match
}

// Pool is the classes of a pool rule: one counter, the rule's limit, that
// every class's hits fill, each class being admitted only while the pool
// stays within its ceiling.
type Pool struct {
	// Key is classes.key: the key of the request entry that names a class.
	Key string
	// Classes are classes.ceilings, in config order.
	Classes []*Class
	// Lowest is the class with the lowest ceiling (the first in config
	// order among equal ones): the class of a request whose class entry is
	// missing or names no class.
	Lowest *Class
}

// Class is one class of a Pool.
type Class struct {
	// Value is the class entry's value that selects the class.
	Value string
	// Ceiling is the class's ceiling in permille of the pool's limit, 1 to
	// 1000 (limiter.Limit.Ceiling).
	Ceiling uint16
	// Rule is the rule a request of the class matches: a child of the pool
	// rule keyed by the class entry, whose Limit is the pool's at Ceiling
	// and whose counter is the pool's (counted without the class entry).
	// It is not among the pool rule's Children.
	Rule *Rule
	// Pool is the pool's rule.
	Pool *Rule
}

// PoolEntries returns how many leading entries of a request descriptor
// matched to r name its counter: for a pool's class, those of the pool's
// rule (the class entry is left out, so every class shares the pool's
// counter), else n, the descriptor's entries.
func (r *Rule) PoolEntries(n int) int {
	if r == nil || r.Class == nil {
		return n
	}
	return min(n, len(r.Class.Pool.Lineage))
}

// Error is one problem in a config file (or other source). Error() formats
// it as "file:line:col: path: message", which editors and CI annotations
// understand. Path is "" for a problem that belongs to no key (a YAML
// syntax error, a document that is not a mapping) and is then left out.
// Line and Column are 0 for a file that could not be read at all and for a
// source without positions (an xDS resource: "xds:name: path: message"),
// and are then left out too.
type Error struct {
	File         string // Document.File: a file path, or "xds:<resource name>"
	Line, Column int    // 1-based; 0 when the source has no position
	Path         string // e.g. "descriptors[1].rate_limit.unit"
	Msg          string
}

// Error formats e as "file:line:col: path: message".
func (e *Error) Error() string {
	pos := e.File
	if e.Line > 0 {
		pos = fmt.Sprintf("%s:%d:%d", e.File, e.Line, e.Column)
	}
	if e.Path == "" {
		return pos + ": " + e.Msg
	}
	return pos + ": " + e.Path + ": " + e.Msg
}

// Domain returns the domain called name, or nil if c has none.
func (c *Config) Domain(name string) *Domain {
	if c == nil {
		return nil
	}
	return c.domains[name]
}

// Domains returns every domain of c, sorted by name. The slice is a fresh
// copy; the domains it points to are shared and must not be modified.
func (c *Config) Domains() []*Domain {
	if c == nil {
		return nil
	}
	return slices.Clone(c.sorted)
}
