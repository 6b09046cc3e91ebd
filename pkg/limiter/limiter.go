package limiter

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Algorithm names the counting algorithm of a Limit. The zero value is
// SlidingWindow, the default of DESIGN.md section 3.
type Algorithm uint8

const (
	// SlidingWindow is the sliding window counter: the count of the current
	// fixed window plus the count of the previous one weighted by the share of
	// it that still overlaps the sliding window.
	SlidingWindow Algorithm = iota
)

// String returns the algorithm's config spelling ("sliding_window").
func (a Algorithm) String() string {
	switch a {
	case SlidingWindow:
		return "sliding_window"
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// ParseAlgorithm returns the Algorithm whose config spelling
// (rate_limit.algorithm) is s, and false when there is none. The empty
// string is not a spelling: callers map an unset field to the zero value.
func ParseAlgorithm(s string) (Algorithm, bool) {
	switch s {
	case "sliding_window":
		return SlidingWindow, true
	}
	return 0, false
}

// Limit is one rate limit: at most Requests hits in any Window.
//
// Requests of 0 is valid and denies every hit (envoyproxy/ratelimit's
// requests_per_unit: 0). Window must be a positive whole number of
// milliseconds; Validate reports otherwise. Windows are aligned to the Unix
// epoch, as Envoy's units are.
type Limit struct {
	Requests  uint64
	Window    time.Duration
	Algorithm Algorithm
}

// Validate returns an error naming the field when l cannot be evaluated: a
// Window that is not a positive whole number of milliseconds, or an unknown
// Algorithm. The zero Limit does not Validate.
func (l Limit) Validate() error {
	if l.Window <= 0 || l.Window%time.Millisecond != 0 {
		return fmt.Errorf("limiter: window %v is not a positive whole number of milliseconds", l.Window)
	}
	if l.Algorithm != SlidingWindow {
		return fmt.Errorf("limiter: unknown algorithm %v", l.Algorithm)
	}
	return nil
}

// Hit asks for Hits units of one Limit on the counter named by Key.
//
// The counter's identity is (Key, Limit.Window, Limit.Algorithm): two hits with
// the same Key but different windows count separately. Key is opaque to the
// store; any bytes are allowed, the empty string included. The zero Hit
// checks key "" without consuming, and its zero Limit does not Validate.
type Hit struct {
	// Key names the counter (without window or algorithm).
	Key string
	// Limit is checked against the counter.
	Limit Limit
	// Hits is the number of units to add (hits_addend). 0 only checks.
	Hits uint64
	// Refund makes the hit lower the counter by Hits instead (never below
	// zero), as Envoy's is_negative_hits does. A refund never denies.
	Refund bool
	// Shadow makes the hit count like any other but never deny the request
	// (shadow mode). Its Result still says whether it would have denied.
	Shadow bool
	// Quota puts the hit in the request's quota group (envoyproxy/ratelimit's
	// quota_mode): an enforced quota hit that is not Allowed denies the
	// request only when no enforced quota hit of the request is Allowed.
	Quota bool
}

// Result is the outcome of one Hit. The zero value is a hit that was not
// Allowed, with nothing Remaining.
type Result struct {
	// Allowed reports whether this hit's limit admits it. A request is
	// admitted only when every enforced (non-shadow) hit is Allowed; so an
	// Allowed hit may belong to a denied request, and then consumed nothing.
	Allowed bool
	// ExceedsLimit reports a hit larger than the limit itself (Hits >
	// Requests): no wait will ever admit it. Allowed is false and RetryAfter
	// is one Window.
	ExceedsLimit bool
	// Remaining is how many more hits the limit admits right now, after this
	// request's outcome: floor(Requests - estimate), and 0 when the hit is not
	// Allowed.
	Remaining uint64
	// ResetAfter is the time until Remaining is back to the full Requests with
	// no further traffic. Whole milliseconds.
	ResetAfter time.Duration
	// RetryAfter is the time, with no further traffic, until the same hit
	// would be Allowed. Zero when Allowed. Whole milliseconds.
	RetryAfter time.Duration
	// OverLimit reports that this hit makes the request over limit: an
	// enforced (non-shadow, non-refund) hit that is not Allowed; for a Quota
	// hit, only when no enforced Quota hit of the request is Allowed either.
	// The request is admitted, and consumes, exactly when no Result of it is
	// OverLimit.
	OverLimit bool
}

// Store decides a set of hits against their counters. Implementations must be
// safe for concurrent use.
type Store interface {
	// Apply evaluates every hit and, only if every enforced hit is admitted,
	// consumes them all (all or nothing). It returns one Result per hit, in
	// input order. Hits with the same counter identity share one increment:
	// the largest Hits among them. Apply returns an error wrapping
	// ErrStoreUnavailable when the backing store fails; then no Result is
	// valid and nothing is known to have been consumed. It returns an error
	// and consumes nothing when a hit's Limit does not Validate.
	Apply(ctx context.Context, hits []Hit) ([]Result, error)
}

// Allow asks s for one hit on the counter named key under l and returns its
// Result: the plain-library form of Store.Apply for a single limit. It is
// safe for concurrent use if s is, and returns Apply's error unchanged.
func Allow(ctx context.Context, s Store, key string, l Limit) (Result, error) {
	res, err := s.Apply(ctx, []Hit{{Key: key, Limit: l, Hits: 1}})
	if err != nil {
		return Result{}, err
	}
	if len(res) != 1 {
		return Result{}, fmt.Errorf("limiter: store returned %d results for 1 hit: %w", len(res), ErrStoreUnavailable)
	}
	return res[0], nil
}

// ErrStoreUnavailable is wrapped by the errors a Store returns when its
// backend fails or times out. The RPC layer maps it to the domain's failure
// mode.
var ErrStoreUnavailable = errors.New("limiter: store unavailable")
