package ratelimit

import (
	"errors"
	"time"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// Request is one rate-limit request: Envoy's RateLimitRequest without the
// wire format. Decide reads it and does not keep it.
type Request struct {
	// Domain is RateLimitRequest.domain; it must not be empty.
	Domain string
	// Descriptors are RateLimitRequest.descriptors, in order.
	Descriptors []Descriptor
	// HitsAddend is RateLimitRequest.hits_addend: the hits of every
	// descriptor that sets none. 0 means 1.
	HitsAddend uint64
	// StatusBuffer is optional memory for Decision.Statuses: when its
	// capacity is at least len(Descriptors), Decide clears and uses it
	// instead of allocating, and the Decision's Statuses alias it. A front
	// end that pools its requests passes the buffer of its pool, and must not
	// reuse it while it still reads the Decision.
	StatusBuffer []Status
	// LimitBuffer is optional memory for the Limits of every Status, as
	// StatusBuffer is for Statuses: when its capacity is at least the
	// limits the request's descriptors count, Decide clears and uses it,
	// and the Statuses' Limits alias it.
	LimitBuffer []LimitStatus
}

// Descriptor is one request descriptor (RateLimitDescriptor).
type Descriptor struct {
	// Entries are the descriptor's entries, in order. A last entry keyed
	// SlotTokenKey carries a slot token and is not one of the descriptor's
	// own: Decide strips it.
	Entries []descriptors.Entry
	// Override is the descriptor's limit override (RateLimitDescriptor.limit),
	// nil when it has none.
	Override *Override
	// HitsAddend is RateLimitDescriptor.hits_addend when HasHitsAddend is
	// set: it then wins over the request's, and 0 only checks (evaluates,
	// consumes nothing).
	HitsAddend    uint64
	HasHitsAddend bool
	// IsNegativeHits is RateLimitDescriptor.is_negative_hits: the hits are
	// given back (a refund, never below zero) instead of taken.
	IsNegativeHits bool
}

// Override is a descriptor's own limit (RateLimitDescriptor.RateLimitOverride):
// RequestsPerUnit hits per UnitMultiplier Units. It replaces the configured
// limit of the descriptor.
type Override struct {
	RequestsPerUnit uint32
	Unit            descriptors.Unit
	// UnitMultiplier multiplies Unit; 0 means 1.
	UnitMultiplier uint32
}

// Code is the outcome of a request or a descriptor, as
// RateLimitResponse.Code: OK (the zero value) or OverLimit.
type Code uint8

const (
	// OK admits the request (or the descriptor is within its limit).
	OK Code = iota
	// OverLimit denies the request (or the descriptor is over its limit).
	OverLimit
)

// String returns "OK" or "OVER_LIMIT", as Envoy spells the codes.
func (c Code) String() string {
	if c == OverLimit {
		return "OVER_LIMIT"
	}
	return "OK"
}

// Decision is the answer to one Request.
type Decision struct {
	// Code is OverLimit when any enforced descriptor is over its limit
	// (overall_code).
	Code Code
	// Statuses holds exactly one Status per request descriptor, in order.
	Statuses []Status
	// Binding is the index into Statuses of the limit that response headers
	// report: on OverLimit the denying limit with the longest RetryAfter,
	// else the counted limit with the least remaining; shadow-mode limits
	// are never binding. -1 when no limit qualifies.
	Binding int
	// RetryAfter is, on OverLimit, the largest RetryAfter among the denying
	// limits (at least one second when the failure mode denied), else 0.
	RetryAfter time.Duration
	// ExceedsLimit reports that a denying limit can never admit its hits
	// (hits_addend larger than requests_per_unit): no wait helps.
	ExceedsLimit bool
	// FailureMode is the failure mode that answered, because the store
	// failed; FailureModeUnset when the store answered. Statuses then carry
	// their Limit but no Result, except under FailureModeLocal, whose
	// Results are the local store's (of each limit's share).
	FailureMode descriptors.FailureMode
	// Config is the config snapshot the decision used; never nil in a
	// Decision that Decide returned without error.
	Config *descriptors.Config
	// Domain is the request's domain in Config, nil when unknown (then every
	// Status is OK with no limit).
	Domain *descriptors.Domain
	// SlotToken is, for an admitted request that took slots of a
	// concurrency limit, the token they were taken under (FormatSlotToken):
	// the release sends it back (SlotTokenKey) to free them. "" when the
	// request took none (denied, answered by the failure mode, or without
	// such a limit).
	SlotToken string
}

// Status is the outcome of one request descriptor (DescriptorStatus).
//
// A descriptor may count several limits (a rule's rate_limits), each in its
// own counter with its own Result: Limits lists them all, and Limit, Name
// and Result are those of the binding one, the limit that the descriptor's
// DescriptorStatus and response headers report (the denying limit with the
// longest RetryAfter, else the one with the least remaining). A front end
// that shows one limit per descriptor reads Limit, Name and Result; one that
// lists every policy (RateLimit-Policy) ranges over Limits.
type Status struct {
	// Code is OverLimit when this descriptor denies the request: one of its
	// limits is OverLimit.
	Code Code
	// Rule is the rule the descriptor matched, nil when none.
	Rule *descriptors.Rule
	// Limit is the binding limit counted (current_limit), nil when the
	// descriptor was not counted: no rule, unlimited, a rule without a
	// limit, or limits that others replace.
	Limit *descriptors.Limit
	// Name is the binding limit's name in response headers: the configured
	// name, else the rule's name (descriptors.Rule.LimitName), or
	// "override_N_per_unit" for an override. "" when Limit is nil.
	Name string
	// Limits are every limit the descriptor counts, in config order, each
	// with its name and the store's Result for its counter; nil when Limit
	// is. One element for a rule's rate_limit or an override.
	Limits []LimitStatus
	// Binding is the index in Limits of the binding limit.
	Binding int
	// Override reports that Limit is the descriptor's own override.
	Override bool
	// Shadow reports a shadow-mode limit: counted, never denying.
	Shadow bool
	// Quota reports a quota-mode limit (see the package doc).
	Quota bool
	// Hits is the hits_addend applied to the counter.
	Hits uint64
	// Refund reports that the Hits were given back (is_negative_hits)
	// rather than taken: a refund, or for a concurrency limit the release
	// of that many slots. Observers count them apart from hits.
	Refund bool
	// Result is the store's outcome for the binding limit's counter; the
	// zero Result when Limit is nil or the failure mode answered. When
	// Result.ExceedsLimit, ResetAfter is raised to RetryAfter (one window):
	// see the package doc.
	Result limiter.Result

	ruleLimits []*descriptors.Limit // the limits the rule counts for this descriptor, set by resolve
}

// LimitStatus is one limit a descriptor counts, with its outcome.
type LimitStatus struct {
	// Limit is the limit; never nil.
	Limit *descriptors.Limit
	// Name is its name in response headers and metrics (see Status.Name).
	Name string
	// Result is the store's outcome for its counter; the zero Result when
	// the failure mode answered.
	Result limiter.Result
}

// Counted reports whether the descriptor's limit was evaluated by the store
// (or would have been, when the failure mode answered).
func (st *Status) Counted() bool { return st.Limit != nil }

// Metadata merges the config metadata of every matched rule, later
// descriptors winning on the same key, for response dynamic metadata. It
// returns nil when no matched rule has metadata. The maps it returns are
// fresh; their values are shared with the config and must not be modified.
func (d *Decision) Metadata() map[string]any {
	var m map[string]any
	for i := range d.Statuses {
		r := d.Statuses[i].Rule
		if r == nil || r.Metadata == nil {
			continue
		}
		if m == nil {
			m = make(map[string]any)
		}
		for k, v := range r.Metadata {
			m[k] = v
		}
	}
	return m
}

// Errors of Decide. Front ends map them to their protocol's codes.
var (
	// ErrNoConfig is returned while no config is loaded: without one Sluice
	// cannot tell which limits apply.
	ErrNoConfig = errors.New("ratelimit: no config loaded")
	// ErrInvalidRequest is wrapped by the error Decide returns for a request
	// that cannot be decided as sent (an empty domain, a limit override that
	// cannot be honoured); the error names the field. Nothing was counted.
	ErrInvalidRequest = errors.New("ratelimit: invalid request")
)
