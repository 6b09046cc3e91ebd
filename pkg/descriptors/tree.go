package descriptors

// This file holds the source-neutral tree that every config source decodes
// into and Build validates: the YAML decoder (decode.go) makes one Document
// per file, and an xDS source makes one per RateLimitConfig resource. The
// tree holds what the source said, where it said it, and nothing checked:
// every rule of the format lives in Build.

// Pos is a position in a source: a 1-based line and column. The zero Pos
// means the source has no positions (an xDS resource); errors at it carry
// only the source name and the path.
type Pos struct {
	Line, Column int
	// File, when set, names the source the position is in when it is not
	// the Document's own: a field a policy overlay set (its file), or a
	// process-wide default (the flag, with no line). Errors and warnings at
	// the position name it instead of the Document's File.
	File string
}

// FieldState says whether a source gave a field.
type FieldState uint8

const (
	// FieldAbsent is a field the source did not give. Build reports the
	// fields that must be given ("missing unit").
	FieldAbsent FieldState = iota
	// FieldSet is a field the source gave and decoded into Value.
	FieldSet
	// FieldInvalid is a field the source gave but could not decode (a list
	// where a string belongs), or a misspelled key it took for this one.
	// The YAML decoder reports it and Build checks nothing more about it,
	// so that one mistake is one error; Build called directly refuses it.
	FieldInvalid
)

// Field is one scalar of the tree (a key, a unit, a count): its value,
// whether the source gave it, and where. The zero Field is absent.
type Field[T any] struct {
	// Value is the decoded value, meaningful when State is FieldSet.
	Value T
	// State says whether the source gave the field.
	State FieldState
	// KeyPos is where the field's key is written and Pos where its value
	// is; both zero for a source without positions.
	KeyPos, Pos Pos
}

// Set returns a Field holding v, given by the source, with no position: the
// form a source without positions (xDS) uses for every field it has.
func Set[T any](v T) Field[T] {
	return Field[T]{Value: v, State: FieldSet}
}

// Document is one domain as a source gives it: one YAML file, or one xDS
// RateLimitConfig resource. Build turns a set of Documents into a Config.
type Document struct {
	// File names the source in errors, warnings, Config.Files and
	// Rule.File: a file path, or "xds:" and the resource name.
	File string
	// Pos is where the document's root is, for errors about a missing
	// field (the zero Pos for a source without positions).
	Pos Pos
	// Domain is the domain name; it must be given and non-empty.
	Domain Field[string]
	// FailureMode is failure_mode (a Sluice addition): "error", "allow" or
	// "deny", case-insensitively, or absent.
	FailureMode Field[string]
	// Cache is cache (a Sluice addition): the default of the domain's
	// rate limits that set none.
	Cache Field[bool]
	// Descriptors are the top-level descriptors, in source order. A nil
	// entry is one the source could not decode (the YAML decoder's, with
	// its error); it keeps the index of every entry after it in paths.
	Descriptors []*Node
	// Changes are what a Policy set on the domain (Domain.Changes).
	Changes []Change
}

// Node is one descriptor: the source's form of a Rule (RateLimitDescriptor
// in the xDS proto).
type Node struct {
	// Pos is where the descriptor is (its mapping), for errors about it as
	// a whole and about missing fields.
	Pos Pos
	// Key must be given and non-empty. Value "" (or absent) makes a
	// key-only descriptor, which matches any value.
	Key, Value Field[string]
	// RateLimit is rate_limit, nil when absent or null (a rule without a
	// limit, or one the source could not decode).
	RateLimit *RateLimitNode
	// RateLimits is rate_limits (a Sluice addition): several limits on the
	// node, each its own counter, instead of rate_limit; nil entries are
	// items the source could not decode.
	RateLimits Field[[]*RateLimitNode]
	// Descriptors are the nested descriptors, with nil entries as in
	// Document.Descriptors.
	Descriptors []*Node
	// ShadowMode, QuotaMode, DetailedMetric, ValueToMetric and
	// ShareThreshold are the node's flags (false when absent).
	ShadowMode, QuotaMode, DetailedMetric, ValueToMetric, ShareThreshold Field[bool]
	// Metadata is the metadata block as decoded YAML (maps, lists, strings,
	// numbers, bools), nil when absent; the xDS proto has none.
	Metadata map[string]any
	// Classes is classes (a Sluice addition): the node's rate_limit is a
	// pool that requests of several classes share, each up to its
	// ceiling. nil when absent; the xDS proto has none.
	Classes *ClassesNode
	// Changes are what a Policy set on the descriptor (Rule.Changes).
	Changes []Change
	// TenantsFrom is tenants_from (a Sluice addition): the name of the table
	// that gives each entry value its own plan or limits.
	TenantsFrom Field[string]
	// Plans is plans (a Sluice addition): the named limits a tenant table's
	// rows may name, in source order; nil entries are plans the source could
	// not decode.
	Plans Field[[]*PlanNode]
}

// PlanNode is one plan of a Node's plans: a name and its limits, a
// rate_limit or rate_limits as on a Node.
type PlanNode struct {
	// Pos is where the plan's name is written.
	Pos Pos
	// Name is the plan's name, the key it is written under.
	Name string
	// RateLimit is the plan's rate_limit, nil when absent.
	RateLimit *RateLimitNode
	// RateLimits is the plan's rate_limits.
	RateLimits Field[[]*RateLimitNode]
}

// ClassesNode is the classes block of a Node: the entry that names a
// request's class, and each class's ceiling.
type ClassesNode struct {
	// Pos is where the classes block is (its key), for errors about it as
	// a whole and about missing fields.
	Pos Pos
	// Key is classes.key, the key of the entry that names the class: given,
	// non-empty, and no ancestor's key.
	Key Field[string]
	// Ceilings is classes.ceilings, one item per class; nil entries are
	// items the source could not decode.
	Ceilings Field[[]*CeilingNode]
}

// CeilingNode is one class of a ClassesNode.
type CeilingNode struct {
	// Pos is where the item is, for errors about missing fields.
	Pos Pos
	// Value is the class entry's value that selects the class: given,
	// non-empty, matched exactly, and unique among the ceilings.
	Value Field[string]
	// Ceiling is the class's ceiling as written: a percentage of the
	// pool's limit ("80%", "12.5%"), above 0% and at most 100%, with at
	// most one decimal.
	Ceiling Field[string]
}

// RateLimitNode is the rate_limit of a Node (RateLimitPolicy in the xDS
// proto).
type RateLimitNode struct {
	// Pos is where the rate_limit is (its mapping), for errors about
	// missing fields.
	Pos Pos
	// Name is rate_limit.name; absent and "" both mean no name.
	Name Field[string]
	// Replaces is rate_limit.replaces; its entries are nil for items the
	// source could not decode, as in Document.Descriptors.
	Replaces Field[[]*ReplaceNode]
	// Unit is the unit as spelled ("minute", "MINUTE"); Build parses it.
	Unit Field[string]
	// RequestsPerUnit is requests_per_unit. A source without field
	// presence (proto3) sets it when it is not 0 or the limit is not
	// unlimited, since 0 is a valid limit that denies every hit.
	RequestsPerUnit Field[uint32]
	// Unlimited is rate_limit.unlimited.
	Unlimited Field[bool]
	// UnitMultiplier is unit_multiplier (a Sluice addition): 1 or more when
	// set, 1 when absent.
	UnitMultiplier Field[uint32]
	// Algorithm is algorithm (a Sluice addition) as spelled; Build parses
	// it.
	Algorithm Field[string]
	// Burst is burst (a Sluice addition): a token_bucket's capacity, 1 or
	// more.
	Burst Field[uint32]
	// SubWindows is sub_windows (a Sluice addition): a sliding_window's
	// counters per window, 1 to limiter.MaxSubWindows.
	SubWindows Field[uint32]
	// Overdraw is overdraw (a Sluice addition).
	Overdraw Field[bool]
	// Calendar is calendar (a Sluice addition): a fixed_window's reset on
	// the calendar; nil when the YAML gives null.
	Calendar Field[*CalendarNode]
	// Penalty is penalty (a Sluice addition): a block for repeat
	// offenders; nil when the YAML gives null.
	Penalty Field[*PenaltyNode]
	// Cache is cache (a Sluice addition).
	Cache Field[bool]
}

// ReplaceNode is one entry of rate_limit.replaces.
type ReplaceNode struct {
	// Pos is where the entry is, for an error about a missing name.
	Pos Pos
	// Name is the name of the limit replaced: given, non-empty, and not
	// the name of the limit that holds it.
	Name Field[string]
}
