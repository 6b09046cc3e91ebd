package limiter

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Limit is one rate limit: at most Requests hits in any Window, counted by
// Algorithm.
//
// Requests of 0 is valid and denies every hit (envoyproxy/ratelimit's
// requests_per_unit: 0). Window must be a positive whole number of
// milliseconds; Validate reports otherwise. Windows are aligned to the Unix
// epoch, as Envoy's units are. The zero Limit does not Validate.
//
// The parameters of one algorithm (a token bucket's burst, a sliding
// window's sub-windows) are fields beside these, each documented with the
// algorithms that read it; the zero value of each means that algorithm's
// default, so a Limit built before the field existed keeps its meaning.
// Limit stays comparable: OverLimitCache compares Limits with ==.
type Limit struct {
	// Requests is the limit, in hits (requests_per_unit).
	Requests uint64
	// Window is the period the limit applies to (unit times
	// unit_multiplier), a positive whole number of milliseconds.
	Window time.Duration
	// Algorithm counts the hits. Zero: SlidingWindow.
	Algorithm Algorithm
	// Burst is a TokenBucket's capacity, in hits: the most it admits at once
	// after a pause (rate_limit.burst). Zero means Requests. Only TokenBucket
	// reads it; Validate refuses it on any other algorithm.
	Burst uint64
	// SubWindows is how many counters a SlidingWindow keeps per Window
	// (rate_limit.sub_windows): 1 is the classic two-counter estimate, 2 to
	// MaxSubWindows count every sub-window that overlaps the sliding window
	// whole, never admitting more than Requests in any Window. It must divide
	// the Window into whole milliseconds. Zero means 1, so that a Limit built
	// before the field existed keeps its meaning; the config applies
	// DefaultSubWindows instead when rate_limit.sub_windows is unset. Only
	// SlidingWindow reads it; Validate refuses it on any other algorithm. It
	// is part of the counter's identity (SubWindowCount).
	SubWindows uint8
	// Overdraw makes the counter take every hit it is sent, admitted or not
	// (rate_limit.overdraw: usage reported after the response, which cannot
	// be refused): a hit is Allowed while the counter is under the limit
	// (one more hit would fit), however many Hits it carries, and a request
	// that is denied still consumes its overdraw hits (never its others,
	// nor refunds). Not part of the counter's identity. Only the algorithms
	// whose Traits say Overdraw take it, and a pool's class (a Ceiling)
	// refuses it: a report that cannot be refused would take the pool past
	// the class's ceiling, into the reserve of the classes above it.
	Overdraw bool
	// CountDenied makes the counter take its hits whether or not the
	// request is admitted, as envoyproxy/ratelimit counts them (its
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT unset): a hit is Allowed when
	// its Hits fit under the limit, as without the field, and a request
	// that is denied still consumes its CountDenied hits (never its others,
	// nor refunds). Not part of the counter's identity. Only the algorithms
	// whose Traits say CountDenied take it; a pool's class refuses it (a
	// shed request consumes nothing), and so does an Overdraw Limit (choose
	// one).
	CountDenied bool
	// Cache lets a decorator (Cache) decide the hit in process from the
	// counter's last shared count plus this instance's hits since, the
	// store deciding only near the limit; a Store ignores it. Not part of
	// the counter's identity. An algorithm that counts requests in flight
	// (Traits.InFlight) and a pool's class (a Ceiling) refuse it: they are
	// decided exactly.
	Cache bool
	// Ceiling is the share of the limit, in permille, that this hit may fill
	// the counter to: a pool's class (rate_limit classes) is admitted only
	// while the counter, counting every class's hits, stays within
	// Ceiling/1000 of the Capacity (a token bucket's burst, a concurrency
	// limit's slots). Zero means 1000, the whole limit; Validate refuses
	// more than 1000. Every algorithm applies it when it decides and
	// reports (Remaining, ResetAfter and RetryAfter are relative to the
	// ceiling, and Capacity is the ceiling's), while counting, refill and
	// expiry stay the counter's. Not part of the counter's identity, so
	// the classes of one pool share its counter; see CeilingOf for the
	// rounding. With a Ceiling, Requests and Burst must be at most MaxCount.
	Ceiling uint16
	// Calendar makes a FixedWindow count per calendar day, ISO week or
	// month in a time zone (LoadCalendar) instead of per epoch-aligned
	// Window; Window stays the unit's length, the RetryAfter of a hit over
	// the limit itself. Part of the counter's identity. The zero value is
	// none; Validate refuses it on any other algorithm.
	Calendar Calendar
	// Penalty blocks a counter that denied a hit for a while, longer for
	// repeat offenders (see Penalty). Part of the counter's identity. The
	// zero value is none; Validate refuses it with a Ceiling (a pool's
	// class) and on an algorithm that counts requests in flight.
	Penalty Penalty
}

// MaxCeiling is the largest Limit.Ceiling, the whole limit, in permille.
const MaxCeiling = 1000

// CeilingOf returns the part of x (hits) that l's Ceiling admits:
// floor(x * Ceiling / 1000), and x when Ceiling is 0 or 1000. It is computed
// as floor(x/1000)*Ceiling + floor((x mod 1000)*Ceiling/1000), so that every
// intermediate stays below 2^53 for any x up to MaxCount and the Lua twin,
// in doubles, computes the same integer.
func (l Limit) CeilingOf(x uint64) uint64 {
	c := uint64(l.Ceiling)
	if c == 0 || c >= MaxCeiling {
		return x
	}
	return x/MaxCeiling*c + x%MaxCeiling*c/MaxCeiling
}

// DefaultSubWindows is the sub_windows of a sliding_window rate limit whose
// config leaves it unset (pkg/descriptors applies it; a Limit's zero
// SubWindows is 1). It divides every window a config can name (whole
// seconds: 20 ms sub-windows on a per-second limit). Chosen from the
// accuracy table of BENCHMARKS.md: the smallest N dividing a second that
// admits at least 99% of what the exact sliding log admits on the issue's
// trace (1000-odd sources at 100 per minute for 20 minutes), never admitting
// more than the limit in any window; in Redis a counter is one string of N
// slots (1 byte each below 256 hits a sub-window) and a 26-byte head.
const DefaultSubWindows = 50

// MaxSubWindows is the largest SubWindows.
const MaxSubWindows = 60

// SubWindowCount returns the number of sub-windows l's counter keeps: for an
// algorithm whose Traits take SubWindows (SlidingWindow), SubWindows, 1
// when it is zero; 0 for every other algorithm. Stores put it in the counter's identity.
func (l Limit) SubWindowCount() int64 {
	if !l.Algorithm.Traits().SubWindows {
		return 0
	}
	return max(int64(l.SubWindows), 1)
}

// Validate returns an error naming the field when l cannot be evaluated: an
// Algorithm that is not registered, a Window that is not a positive whole
// number of milliseconds, a parameter that l's algorithm does not take (its
// Traits), or one that its algorithm refuses.
func (l Limit) Validate() error {
	if !l.Algorithm.valid() {
		return fmt.Errorf("limiter: algorithm: unknown algorithm %v", l.Algorithm)
	}
	if l.Window <= 0 || l.Window%time.Millisecond != 0 {
		return fmt.Errorf("limiter: window: %v is not a positive whole number of milliseconds", l.Window)
	}
	if l.Ceiling > MaxCeiling {
		return fmt.Errorf("limiter: ceiling: %d permille is over %d, the whole limit", l.Ceiling, MaxCeiling)
	}
	if l.Ceiling != 0 && (l.Requests > MaxCount || l.Burst > MaxCount) {
		// Above 2^52 the Lua twin's doubles could not take the share exactly.
		return fmt.Errorf("limiter: ceiling: a ceiling on %d requests and a burst of %d: both must be at most 2^52", l.Requests, l.Burst)
	}
	if l.Calendar != (Calendar{}) && (l.Algorithm != FixedWindow || l.Calendar.Zone == nil ||
		l.Calendar.Unit == CalendarNone || int(l.Calendar.Unit) >= len(calendarUnitNames)) {
		return fmt.Errorf("limiter: calendar: %v on %v: only a fixed_window with a unit (day, week, month) and a zone has a calendar",
			l.Calendar.Unit, l.Algorithm)
	}
	t := algorithms[l.Algorithm].Traits
	if l.Penalty.On() {
		if err := l.Penalty.validate(); err != nil {
			return err
		}
		if l.Ceiling != 0 || t.InFlight || l.Cache {
			return fmt.Errorf("limiter: penalty: on %v, a pool's class or a cached limit: only a store-decided rate limit takes a penalty", l.Algorithm)
		}
	}
	switch {
	case l.Burst != 0 && !t.Burst:
		return fmt.Errorf("limiter: burst: %d on %v, which has no burst (only %s has)", l.Burst, l.Algorithm,
			algorithmList(func(t Traits) bool { return t.Burst }))
	case l.SubWindows != 0 && !t.SubWindows:
		return fmt.Errorf("limiter: sub_windows: %d on %v, which has no sub-windows (only %s has)", l.SubWindows, l.Algorithm,
			algorithmList(func(t Traits) bool { return t.SubWindows }))
	case l.Overdraw && !t.Overdraw:
		return fmt.Errorf("limiter: overdraw: %v keeps one entry per admitted hit and cannot overdraw", l.Algorithm)
	case l.CountDenied && !t.CountDenied:
		return fmt.Errorf("limiter: count_denied: %v keeps one entry per admitted hit and cannot count denied ones", l.Algorithm)
	case l.Overdraw && l.CountDenied:
		return errors.New("limiter: count_denied: with overdraw, which counts denied hits already (choose one)")
	case l.Ceiling != 0 && (l.Overdraw || l.CountDenied):
		return errors.New("limiter: ceiling: a pool's class cannot overdraw or count denied hits: " +
			"what it counts past its ceiling would take the reserve of the classes above it")
	case l.Cache && t.InFlight:
		return fmt.Errorf("limiter: cache: %v counts requests in flight, which only the store can count exactly", l.Algorithm)
	case l.Cache && l.Ceiling != 0:
		return errors.New("limiter: cache: a pool's class is decided on the pool's count at the decision, which only the store knows")
	case t.MaxRequests > 0 && l.Requests > t.MaxRequests:
		return fmt.Errorf("limiter: requests: %d is over %d, the most a %v counts (it keeps one entry per hit)",
			l.Requests, t.MaxRequests, l.Algorithm)
	}
	return algorithms[l.Algorithm].validate(l)
}

// algorithmList spells the algorithms whose Traits has as "a, b or c".
func algorithmList(has func(Traits) bool) string {
	all := AlgorithmsWith(has)
	s := ""
	for i, a := range all {
		switch {
		case i == 0:
		case i == len(all)-1:
			s += " or "
		default:
			s += ", "
		}
		s += a.String()
	}
	return s
}

// Capacity returns the most hits l can ever admit at once: Burst (default
// Requests) for a token bucket, Requests for the other algorithms, each
// under l's Ceiling (CeilingOf). A hit with more Hits than that is never
// Allowed (its Result says ExceedsLimit). It returns 0 for a Limit whose
// Algorithm is not registered.
func (l Limit) Capacity() uint64 {
	if !l.Algorithm.valid() {
		return 0
	}
	return l.CeilingOf(algorithms[l.Algorithm].capacity(l))
}

// Hit asks for Hits units of one Limit on the counter named by Key.
//
// The counter's identity is (Key, Limit.Window, Limit.Algorithm,
// Limit.SubWindowCount(), Limit.Calendar): two hits with the same Key but different windows
// count separately, and hits that differ only in Requests, Burst, Overdraw,
// CountDenied or Ceiling share one counter. Key is opaque to the
// store; any bytes are allowed, the empty string included. The zero Hit
// checks key "" without consuming, and its zero Limit does not Validate.
type Hit struct {
	// Key names the counter (without window or algorithm).
	Key string
	// Limit is checked against the counter.
	Limit Limit
	// Hits is the number of units to add (hits_addend). 0 only checks.
	Hits uint64
	// Refund makes the hit give Hits back instead (Envoy's
	// is_negative_hits): wherever they still count in the window, the
	// newest first, never below zero (see each algorithm), or for an
	// algorithm that counts requests in flight the release of that many of
	// its SlotToken's slots. A refund never denies.
	Refund bool
	// Shadow makes the hit count like any other but never deny the request
	// (shadow mode). Its Result still says whether it would have denied.
	Shadow bool
	// Quota puts the hit in the request's quota group (envoyproxy/ratelimit's
	// quota_mode): an enforced quota hit that is not Allowed denies the
	// request only when no enforced quota hit of the request is Allowed. A
	// quota hit that is also Shadow or Refund is outside the group.
	Quota bool
	// SlotToken names the slots of an algorithm that counts requests in
	// flight (Traits.InFlight: concurrency), from 1 to MaxSlotToken; other
	// algorithms ignore it. An acquire records the slots it takes under its
	// SlotToken (0: under none, so that only their expiry frees them); a
	// release (Refund) frees only slots recorded under its SlotToken, the
	// oldest first, at most Hits of them, and with 0 frees nothing. So a
	// release frees only what the acquire that returned the token took, and
	// freeing it again frees nothing. Tokens are drawn at random
	// (NewSlotToken), so that one cannot be guessed to free another
	// request's slots.
	SlotToken uint64
}

// Validate returns an error naming the field when h cannot be decided: its
// Limit does not Validate, or its SlotToken is over MaxSlotToken.
func (h *Hit) Validate() error {
	if h.SlotToken > MaxSlotToken {
		return fmt.Errorf("limiter: slot_token: %d is over %d, the largest token", h.SlotToken, uint64(MaxSlotToken))
	}
	return h.Limit.Validate()
}

// MaxSlotToken is the largest Hit.SlotToken: below 2^53, so that the Lua
// twin's doubles hold every token exactly.
const MaxSlotToken = MaxCount

// NewSlotToken returns a random slot token from 1 to MaxSlotToken, drawn
// from the runtime's unpredictable generator (math/rand/v2's top-level
// functions). It is safe for concurrent use.
func NewSlotToken() uint64 { return rand.Uint64N(MaxSlotToken) + 1 }

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
	// ResetAfter is the time until Remaining is back to the full Capacity
	// (Requests; a token bucket's Burst) with no further traffic. Whole
	// milliseconds.
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
	// Blocked reports a hit denied under its Limit's Penalty: its counter
	// was blocked, or this denial started a block (RetryAfter is then until
	// the block ends). A Shadow hit reports it too, without denying.
	Blocked bool
}

// Store decides a set of hits against their counters. Implementations must be
// safe for concurrent use.
type Store interface {
	// Apply evaluates every hit and, only if the request is admitted (every
	// enforced hit is Allowed, a quota group needing one Allowed hit: see
	// MarkOverLimit), consumes them all (all or nothing). It returns one
	// Result per hit, in input order, with OverLimit set as MarkOverLimit
	// sets it. Hits with the same counter identity share one increment:
	// the largest Hits among them. Apply returns an error wrapping
	// ErrStoreUnavailable when the backing store fails; then no Result is
	// valid and nothing is known to have been consumed. It returns an error
	// and consumes nothing when a hit does not Validate (Hit.Validate).
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

// MarkOverLimit sets the OverLimit of every Result from the Allowed of all of
// them, by the rule of Result.OverLimit (quota groups included), and reports
// whether the request is admitted: no Result is OverLimit. results[i] is
// hits[i]'s; it panics if the lengths differ. Every Store decides with this
// rule (Evaluate calls it), so that front ends can read OverLimit instead of
// recomputing it. It is safe for concurrent use on distinct slices.
func MarkOverLimit(hits []Hit, results []Result) (admitted bool) {
	results = results[:len(hits)]
	quotaSeen, quotaAllowed := false, false
	for i := range hits {
		if h := &hits[i]; h.Quota && !h.Shadow && !h.Refund {
			quotaSeen = true
			quotaAllowed = quotaAllowed || results[i].Allowed
		}
	}
	quotaDenied := quotaSeen && !quotaAllowed
	admitted = true
	for i := range hits {
		h := &hits[i]
		over := !h.Refund && !h.Shadow && !results[i].Allowed && (!h.Quota || quotaDenied)
		results[i].OverLimit = over
		admitted = admitted && !over
	}
	return admitted
}

// ErrStoreUnavailable is wrapped by the errors a Store returns when its
// backend fails or times out. The RPC layer maps it to the domain's failure
// mode.
var ErrStoreUnavailable = errors.New("limiter: store unavailable")
