package descriptors

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// Entry is one key/value pair of a request descriptor, as in Envoy's
// RateLimitDescriptor.Entry.
type Entry struct {
	Key, Value string
}

// Unit is the unit of a rate limit (rate_limit.unit). The zero value is
// UnitUnknown, which no loaded Rule carries.
type Unit uint8

// The units of envoyproxy/ratelimit, in the order of Envoy's
// RateLimitResponse.RateLimit.Unit enum (so Unit(n) is proto value n).
const (
	UnitUnknown Unit = iota
	Second
	Minute
	Hour
	Day
	Month // 30 days
	Year  // 365 days
	Week  // 7 days
)

var unitNames = [...]string{"unknown", "second", "minute", "hour", "day", "month", "year", "week"}

// String returns the config spelling of u ("second", ..., "year").
func (u Unit) String() string {
	if int(u) < len(unitNames) {
		return unitNames[u]
	}
	return fmt.Sprintf("unit(%d)", uint8(u))
}

// Duration returns the length of one u: a month is 30 days and a year 365
// days, as in envoyproxy/ratelimit. It returns 0 for UnitUnknown.
func (u Unit) Duration() time.Duration {
	const day = 24 * time.Hour
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return day
	case Week:
		return 7 * day
	case Month:
		return 30 * day
	case Year:
		return 365 * day
	}
	return 0
}

// ParseUnit returns the Unit spelled s, case-insensitively ("minute",
// "MINUTE"), and false for anything else.
func ParseUnit(s string) (Unit, bool) {
	s = strings.ToLower(s)
	for u := Second; int(u) < len(unitNames); u++ {
		if unitNames[u] == s {
			return u, true
		}
	}
	return UnitUnknown, false
}

// Limit is the rate_limit block of a rule: RequestsPerUnit hits per
// UnitMultiplier units.
type Limit struct {
	// RequestsPerUnit is rate_limit.requests_per_unit. 0 is valid and denies
	// every hit.
	RequestsPerUnit uint32
	// Unit is rate_limit.unit.
	Unit Unit
	// UnitMultiplier is rate_limit.unit_multiplier, a Sluice addition for
	// windows like 30 s or 5 minutes. Loaded rules always have it >= 1.
	UnitMultiplier uint32
	// Name is rate_limit.name, "" when unset.
	Name string
	// Replaces lists the names in rate_limit.replaces[].name, in config
	// order. Each is non-empty and differs from Name.
	Replaces []string
	// Algorithm is rate_limit.algorithm, a Sluice addition, carried as is to
	// the store: the zero value, limiter.SlidingWindow, when unset.
	Algorithm limiter.Algorithm
	// Burst is rate_limit.burst, a Sluice addition: a token_bucket's
	// capacity in hits; 0 (unset) means RequestsPerUnit. Always 0 for the
	// other algorithms.
	Burst uint32
	// SubWindows is rate_limit.sub_windows, a Sluice addition: a
	// sliding_window's counters per window, from 1 (the classic two-counter
	// estimate) to limiter.MaxSubWindows; limiter.DefaultSubWindows when
	// unset. Always 0 for the other algorithms. Part of the counter's
	// identity: changing it starts the counter anew.
	SubWindows uint8
	// Overdraw is rate_limit.overdraw, a Sluice addition: the counter takes
	// every hit it is sent, admitted or not, and admits while it is under
	// the limit (limiter.Limit.Overdraw). nil when unset: the service's
	// default (the --overdraw setting) decides. Never true for sliding_log
	// or concurrency.
	Overdraw *bool
	// Cache is rate_limit.cache, a Sluice addition: the limit is decided in
	// process from its counter's last shared count plus this instance's
	// hits since, synced with the store every period, and through the store
	// near the limit (limiter.Limit.Cache). nil when unset: the domain's
	// cache, else the service's default (the --cache setting), decides.
	// Never true for concurrency or a pool's class, which stay exact.
	Cache *bool
	// Ceiling is, on the limit of a pool's class, the class's ceiling in
	// permille of the pool (classes.ceilings[].ceiling, 1 to 1000); 0 on
	// every other limit. It is limiter.Limit.Ceiling: not part of the
	// counter's identity.
	Ceiling uint16
	// TimeZone is rate_limit.calendar.time_zone, a Sluice addition: a
	// fixed_window of unit day, week or month that resets at the start of
	// each calendar period in this IANA zone (limiter.Limit.Calendar); ""
	// when unset. Part of the counter's identity.
	TimeZone string
	// calendar is the loaded calendar of TimeZone and Unit.
	calendar limiter.Calendar
	// Penalty is rate_limit.penalty, a Sluice addition: a block for repeat
	// offenders (limiter.Limit.Penalty); the zero value when unset. Part of
	// the counter's identity. Never set on concurrency or a pool's class.
	Penalty limiter.Penalty
}

// Store returns the limiter.Limit that counts l: its rate, window and
// algorithm with its parameters.
func (l *Limit) Store() limiter.Limit {
	return limiter.Limit{Requests: uint64(l.RequestsPerUnit), Window: l.Window(), Algorithm: l.Algorithm,
		Burst: uint64(l.Burst), SubWindows: l.SubWindows, Ceiling: l.Ceiling, Calendar: l.calendar, Penalty: l.Penalty}
}

// CeilingRequests is the requests_per_unit that responses name for l: for
// the limit of a pool's class, the class's ceiling in requests,
// floor(requests_per_unit x ceiling); else requests_per_unit.
func (l *Limit) CeilingRequests() uint32 {
	return uint32(limiter.Limit{Ceiling: l.Ceiling}.CeilingOf(uint64(l.RequestsPerUnit)))
}

// FailureMode is what a domain answers when the store fails: its
// failure_mode, a Sluice addition. The zero value, FailureModeUnset, leaves
// the choice to the service's default.
type FailureMode uint8

const (
	// FailureModeUnset defers to the service's default failure mode.
	FailureModeUnset FailureMode = iota
	// FailureModeError answers gRPC UNAVAILABLE, so that Envoy's own
	// failure_mode_deny decides (fail open by default).
	FailureModeError
	// FailureModeAllow answers OK (fail open), counted in a metric.
	FailureModeAllow
	// FailureModeDeny answers OVER_LIMIT for every limited descriptor.
	FailureModeDeny
	// FailureModeLocal decides in process, each instance with the limits
	// divided by the live instances, until the store answers again.
	FailureModeLocal
)

var failureModeNames = [...]string{"", "error", "allow", "deny", "local"}

// String returns the config spelling of m ("error", "allow", "deny",
// "local"), and
// "" for FailureModeUnset.
func (m FailureMode) String() string {
	if int(m) < len(failureModeNames) {
		return failureModeNames[m]
	}
	return fmt.Sprintf("failure_mode(%d)", uint8(m))
}

// ParseFailureMode returns the FailureMode spelled s ("error", "allow",
// "deny" or "local", case-insensitively), and false for anything else, "" included.
func ParseFailureMode(s string) (FailureMode, bool) {
	s = strings.ToLower(s)
	for m := FailureModeError; int(m) < len(failureModeNames); m++ {
		if failureModeNames[m] == s {
			return m, true
		}
	}
	return FailureModeUnset, false
}

// Window returns the length of the limit's window: Unit times
// UnitMultiplier (at least 1). A loaded limit's window is at most MaxWindow.
// A Limit built by hand (a descriptor's override) may be longer: its Window
// is then more than MaxWindow, saturating at the largest Duration rather
// than overflowing, so that Window() > MaxWindow is the check to refuse it.
func (l *Limit) Window() time.Duration {
	d, m := l.Unit.Duration(), time.Duration(max(l.UnitMultiplier, 1))
	if d > 0 && m > math.MaxInt64/d {
		return math.MaxInt64
	}
	return d * m
}
