package limiter

import (
	"math"
	"time"
)

// Counter is the stored state of one sliding window counter: Cur hits in the
// fixed window number Index (floor(now_ms / window_ms)) and Prev hits in the
// window before it, both in hits. The zero value is an empty counter.
type Counter struct {
	Index     int64
	Cur, Prev uint64
}

// MaxCount caps a stored count. Counts saturate there so that the Lua twin,
// whose numbers are IEEE doubles, holds every count exactly and both
// implementations compute the same results.
const MaxCount = 1 << 52

// roll returns c as seen from window index: the current window's count moves
// to Prev when one window has passed, and both are zero after more. A counter
// stored in a later window than index (the clock stepped back: NTP, or a
// Redis failover to a host whose clock is behind) is kept as it is and seen
// from the start of its own window, so a clock step never empties counters.
func (c Counter) roll(index int64) Counter {
	switch {
	case c.Index == index || c.Index > index && (c.Cur != 0 || c.Prev != 0):
		return c
	case c.Index == index-1:
		return Counter{Index: index, Prev: c.Cur}
	default:
		return Counter{Index: index}
	}
}

// Evaluate is the sliding window counter decision for one request, the Go twin
// of the Redis Lua script (pkg/redis): the in-memory Store calls it, and a
// differential test requires the script to give the same answers.
//
// nowMs is the clock in Unix milliseconds. counters[i] is the stored state of
// hits[i]'s counter (hits with the same identity must be given the same
// state). Evaluate returns one Result per hit, the state to store for each
// hit's counter, and whether the request is admitted: every enforced hit is
// Allowed. Only an admitted request changes a counter: each counter grows by
// the largest Hits among its non-refund hits and shrinks by the largest
// among its refunds, never below zero, saturating at MaxCount. Every hit is
// decided with the growth its counter takes (that largest Hits), each
// against its own limit.
//
// The arithmetic is done in float64 in the same order as the Lua script, so
// both agree bit for bit; it is exact while limit*window_ms and
// count*window_ms stay below 2^53: any uint32 limit with a window of up to
// 35 minutes, for example, or up to 10^8 hits a day (a uint32 limit a day is
// not: 2^32 * 86_400_000 > 2^53). Beyond that the two twins still agree, as
// they round the same operations the same way, but RetryAfter and Remaining
// may be off by one hit or millisecond. Evaluate panics if len(counters) !=
// len(hits) or a Limit does not Validate; callers validate limits when they
// build them.
// Evaluate is pure (it neither keeps nor shares state) and so safe for
// concurrent use.
func Evaluate(nowMs int64, hits []Hit, counters []Counter) (results []Result, next []Counter, admitted bool) {
	if len(counters) != len(hits) {
		panic("limiter: Evaluate needs one counter per hit")
	}
	results = make([]Result, len(hits))
	next = make([]Counter, len(hits))
	var sc evalScratch
	admitted = evaluate(nowMs, hits, counters, results, next, &sc)
	return results, next, admitted
}

// evalScratch holds the per-call working memory of evaluate, so that a Store
// can reuse it across calls instead of allocating it on every request.
type evalScratch struct {
	leader   []int
	inc, dec []uint64
}

// grow returns s resliced to n elements, all zero, reallocating only when
// its capacity is too small.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// evaluate is Evaluate writing into results and next (both len(hits)) and
// using sc for its working memory. Limits must already Validate.
func evaluate(nowMs int64, hits []Hit, counters []Counter, results []Result, next []Counter, sc *evalScratch) (admitted bool) {
	sc.leader = groupLeaders(hits, grow(sc.leader, len(hits)))
	leader := sc.leader

	// Each counter grows by the largest Hits among its non-refund hits and
	// shrinks by the largest refund; every hit is decided with the growth
	// its counter will really take, so a hit with fewer Hits (or a shadow
	// hit with more) cannot let its limit be passed.
	sc.inc = grow(sc.inc, len(hits))
	sc.dec = grow(sc.dec, len(hits))
	inc, dec := sc.inc, sc.dec
	for i, h := range hits {
		l := leader[i]
		if h.Refund {
			dec[l] = max(dec[l], h.Hits)
		} else {
			inc[l] = max(inc[l], h.Hits)
		}
	}

	// Roll every counter into the current window and decide each hit.
	admitted = true
	quotaSeen, quotaAllowed := false, false
	for i, h := range hits {
		if err := h.Limit.Validate(); err != nil {
			panic(err)
		}
		w := h.Limit.Window.Milliseconds()
		idx := floorDiv(nowMs, w)
		c := counters[i].roll(idx)
		next[i] = c
		if h.Refund {
			results[i].Allowed = true
			continue
		}
		ok, exceeds, retry := slidingDecide(c, h.Limit.Requests, w, elapsed(nowMs, w, c.Index), inc[leader[i]])
		results[i] = Result{Allowed: ok, ExceedsLimit: exceeds, RetryAfter: time.Duration(retry) * time.Millisecond}
		switch {
		case h.Shadow:
		case h.Quota:
			quotaSeen = true
			quotaAllowed = quotaAllowed || ok
		case !ok:
			admitted = false
		}
	}
	quotaDenied := quotaSeen && !quotaAllowed
	if quotaDenied {
		admitted = false
	}
	for i, h := range hits {
		results[i].OverLimit = !h.Refund && !h.Shadow && !results[i].Allowed && (!h.Quota || quotaDenied)
	}

	// Consume: one increment (the largest) and one refund (the largest) per
	// counter, applied once to the group leader's state.
	if admitted {
		for i := range hits {
			if leader[i] != i {
				continue
			}
			c := next[i]
			c.Cur = min(satAdd(c.Cur, inc[i]), MaxCount)
			if dec[i] >= c.Cur {
				c.Cur = 0
			} else {
				c.Cur -= dec[i]
			}
			next[i] = c
		}
		for i := range hits {
			next[i] = next[leader[i]]
		}
	}

	// Report from the state after the outcome.
	for i, h := range hits {
		w := h.Limit.Window.Milliseconds()
		e := elapsed(nowMs, w, next[i].Index)
		if results[i].Allowed {
			results[i].Remaining = slidingRemaining(next[i], h.Limit.Requests, w, e)
		}
		results[i].ResetAfter = time.Duration(slidingResetAfter(next[i], w, e)) * time.Millisecond
	}
	return admitted
}

// slidingDecide reports whether n more hits fit under limit on counter c
// (already rolled), whether n can never fit, and if they do not fit now the
// milliseconds until they would with no further traffic. w is the window and
// e the elapsed part of the current window, both in ms.
//
// With p = Prev, c = Cur, L = limit: admit iff p*(w-e) + (c+n)*w <= L*w, the
// estimate p*(1-e/w) + c + n <= L scaled by w so that it stays in integers.
func slidingDecide(c Counter, limit uint64, w, e int64, n uint64) (ok, exceeds bool, retryMs int64) {
	if n > limit {
		return false, true, w
	}
	L, W, E := float64(limit), float64(w), float64(e)
	p, cur, nf := float64(c.Prev), float64(c.Cur), float64(n)
	weighted := float64(p * float64(W-E))
	if float64(weighted+float64(float64(cur+nf)*W)) <= float64(L*W) {
		return true, false, 0
	}
	// Still in this window: the first e' with p*(w-e') <= (L-c-n)*w.
	if cur+nf <= L && p > 0 {
		k := math.Floor(float64(float64(float64(L-cur)-nf)*W) / p)
		need := W - k
		if need < W {
			return false, false, max(int64(need)-e, 1)
		}
	}
	// In the next window Cur becomes Prev: the first e'' with
	// c*(w-e'') + n*w <= L*w.
	need := 0.0
	if cur > 0 {
		k := math.Floor(float64(float64(L-nf)*W) / cur)
		need = max(W-k, 0)
	}
	return false, false, (w - e) + int64(need)
}

// slidingRemaining is floor(L - estimate) on counter c, at least 0.
func slidingRemaining(c Counter, limit uint64, w, e int64) uint64 {
	L, W, E := float64(limit), float64(w), float64(e)
	p, cur := float64(c.Prev), float64(c.Cur)
	r := math.Floor(float64(float64(float64(L*W)-float64(p*float64(W-E)))-float64(cur*W)) / W)
	if r <= 0 {
		return 0
	}
	return uint64(r)
}

// slidingResetAfter is the time in ms until the estimate of c is zero with no
// further traffic: the end of the next window while Cur holds hits, the end
// of this one while only Prev does.
func slidingResetAfter(c Counter, w, e int64) int64 {
	switch {
	case c.Cur > 0:
		return (w - e) + w
	case c.Prev > 0:
		return w - e
	}
	return 0
}

// groupLeaders maps each hit to the first hit with the same counter identity,
// writing into leader (len(hits)) and returning it.
func groupLeaders(hits []Hit, leader []int) []int {
	type id struct {
		key string
		w   time.Duration
		a   Algorithm
	}
	if len(hits) <= 16 {
		for i, h := range hits {
			leader[i] = i
			for j := range i {
				if hits[j].Key == h.Key && hits[j].Limit.Window == h.Limit.Window && hits[j].Limit.Algorithm == h.Limit.Algorithm {
					leader[i] = j
					break
				}
			}
		}
		return leader
	}
	first := make(map[id]int, len(hits))
	for i, h := range hits {
		k := id{h.Key, h.Limit.Window, h.Limit.Algorithm}
		if j, ok := first[k]; ok {
			leader[i] = j
		} else {
			first[k] = i
			leader[i] = i
		}
	}
	return leader
}

// elapsed is the part of window index that has passed at nowMs, in ms: 0 when
// the window starts later than nowMs (see roll).
func elapsed(nowMs, w, index int64) int64 {
	return max(nowMs-index*w, 0)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}
