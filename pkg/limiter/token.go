package limiter

import (
	"fmt"
	"math"
)

// tokenBucket is GCRA, the generic cell rate algorithm: a bucket of B tokens
// (Limit.Burst, default Requests) refilled at R = Requests per window of W
// ms, stored as one time, the theoretical arrival time TAT at which the
// bucket is full again. A request of n hits is admitted iff the bucket holds
// n tokens: max(TAT, now) + n*W/R - now <= B*W/R; then TAT grows by n*W/R. So
// it never admits more than B + R*t/W hits in any interval of t ms, and its
// Retry-After is the exact time until n tokens are back. Its Lua twin is
// pkg/redis/lua/token.lua.
//
// W/R is rarely a whole number of ms, so the arithmetic is exact in integers
// on a finer clock: with g = gcd(R, W), R' = R/g and W' = W/g, one token is
// W' ticks of 1/R' ms. The debt D = (TAT - now) in ticks, clamped to 0 (a
// full bucket), is what decide, consume and report work on: admit n iff
// D + n*W' <= B*W'. Validate requires B*W' <= MaxCount, so that every
// number stays below 2^53 and the Lua twin, in doubles, computes the same
// integers.
//
// State: TAT = At + N1/N2 ms: At whole ms, N1 < N2 the fraction in ticks,
// N2 the R' it was written with. A State written under another R' (a changed
// requests_per_unit) has its fraction rescaled, rounding up (by float64
// operations that the Lua twin repeats). The zero State is a full bucket.
type tokenBucket struct{}

// tokenParams returns R', W' and B*W' of l (see tokenBucket), B being the
// burst under l's Ceiling: a class of a pool may drive the debt only to its
// share of the bucket, while the refill, R', is the pool's. R' = 0 when l
// refills nothing (Requests 0).
func tokenParams(l Limit) (rp, wp, bw int64) {
	w := l.Window.Milliseconds()
	if l.Requests == 0 {
		return 0, 1, 0
	}
	g := gcd(l.Requests, uint64(w))
	rp, wp = int64(l.Requests/g), w/int64(g)
	return rp, wp, int64(l.CeilingOf(tokenBucket{}.capacity(l))) * wp
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func (tokenBucket) validate(l Limit) error {
	if l.Requests > MaxCount || l.Burst > MaxCount {
		return fmt.Errorf("limiter: requests: %d requests and a burst of %d: both must be at most 2^52", l.Requests, l.Burst)
	}
	if l.Requests == 0 {
		if l.Burst != 0 {
			return fmt.Errorf("limiter: burst: %d with requests 0: a bucket that never refills (set requests_per_unit, or no burst to deny every hit)", l.Burst)
		}
		return nil
	}
	w := l.Window.Milliseconds()
	g := gcd(l.Requests, uint64(w))
	wp := uint64(w) / g
	if b := (tokenBucket{}).capacity(l); b > MaxCount/wp || l.Requests/g > MaxCount {
		return fmt.Errorf("limiter: burst: %d tokens refilled at %d per %d ms cannot be counted exactly "+
			"(burst x window_ms / gcd(requests, window_ms) must be at most 2^52): lower burst or requests, or shorten the window", b, l.Requests, w)
	}
	return nil
}

func (tokenBucket) capacity(l Limit) uint64 {
	if l.Requests == 0 {
		return 0
	}
	if l.Burst != 0 {
		return l.Burst
	}
	return l.Requests
}

func (tokenBucket) denialsHold() bool { return true }

// roll is the identity: the TAT is a time, not a window.
func (tokenBucket) roll(s State, _ int64, _ Limit) State { return s }

// tokenDebt returns D, the debt of s at nowMs in ticks of 1/rp ms: 0 for a
// full bucket, at most MaxCount.
func tokenDebt(s State, nowMs, rp int64) int64 {
	d := s.At - nowMs
	if d < 0 || rp == 0 {
		return 0
	}
	f := int64(s.N1)
	if s.N2 != uint64(rp) && f != 0 {
		f = int64(math.Ceil(float64(float64(f)*float64(rp)) / float64(s.N2)))
	}
	if float64(float64(d)*float64(rp)) > MaxCount {
		return MaxCount
	}
	return min(d*rp+f, MaxCount)
}

// decide admits n iff D + n*W' <= B*W'; otherwise the retry is the time
// until the debt has fallen enough: ceil((D + n*W' - B*W') / R') ms.
func (tokenBucket) decide(s State, nowMs int64, l Limit, n uint64) (bool, int64) {
	rp, wp, bw := tokenParams(l)
	need := tokenDebt(s, nowMs, rp) + int64(n)*wp
	if need <= bw {
		return true, 0
	}
	if rp == 0 {
		// Never refills: as for any hit over the capacity, one window.
		return false, l.Window.Milliseconds()
	}
	return false, ceilDiv(need-bw, rp)
}

// consume adds inc tokens of debt, saturating at MaxCount ticks, then takes
// dec back, never below a full bucket, and stores TAT = now + D/R': a
// refund gives back tokens whenever it comes, as long as the bucket is not
// full again.
func (tokenBucket) consume(s State, nowMs int64, l Limit, c change) State {
	inc, dec := c.inc, c.dec
	rp, wp, _ := tokenParams(l)
	if rp == 0 {
		return s
	}
	d := tokenDebt(s, nowMs, rp)
	if inc > uint64(MaxCount-d)/uint64(wp) {
		d = MaxCount
	} else {
		d += int64(inc) * wp
	}
	if dec > uint64(d)/uint64(wp) || int64(dec)*wp >= d {
		d = 0
	} else {
		d -= int64(dec) * wp
	}
	if d == 0 {
		return State{}
	}
	return State{At: nowMs + d/rp, N1: uint64(d % rp), N2: uint64(rp)}
}

// report: remaining is the whole tokens in the bucket, floor((B*W' - D)/W');
// the reset is the time until it is full, ceil(D/R').
func (tokenBucket) report(s State, nowMs int64, l Limit, allowed bool) (uint64, int64) {
	rp, wp, bw := tokenParams(l)
	d := tokenDebt(s, nowMs, rp)
	var reset int64
	if d > 0 {
		reset = ceilDiv(d, rp)
	}
	if !allowed || d >= bw {
		return 0, reset
	}
	return uint64((bw - d) / wp), reset
}

// expires is the TAT rounded up to the ms: from then on the bucket is full.
func (tokenBucket) expires(s State, _ Limit) int64 {
	if s.At == 0 && s.N1 == 0 {
		return math.MinInt64
	}
	if s.N1 > 0 {
		return s.At + 1
	}
	return s.At
}

// ceilDiv is ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
