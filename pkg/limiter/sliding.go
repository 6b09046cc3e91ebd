package limiter

import (
	"fmt"
	"math"
)

// slidingWindow is the sliding window counter (the estimate of Algorithm's
// SlidingWindow), the default algorithm; its Lua twin is
// pkg/redis/lua/sliding.lua.
//
// Its State: At is the index i = floor(now_ms / w) of the current fixed
// window, N1 (cur) the hits in window i and N2 (prev) those in window i-1.
// At e ms into window i the estimate is prev*(1 - e/w) + cur.
//
// The arithmetic is done in float64 in the same order as the Lua script, so
// both agree bit for bit. Every intermediate result is converted to float64
// explicitly: the Go spec lets a compiler fuse x*y + z into one fused
// multiply-add, which rounds once instead of twice and so can differ from
// Lua's result in the last bit (Go does so on arm64, ppc64le and s390x); an
// explicit conversion rounds and forbids the fusion. The results are exact
// while limit*window_ms and count*window_ms stay below 2^53: any uint32 limit
// with a window of up to 35 minutes, for example, or up to 10^8 hits a day (a
// uint32 limit a day is not: 2^32 * 86_400_000 > 2^53). Beyond that the two
// twins still agree, as they round the same operations the same way, but
// RetryAfter and Remaining may be off by one hit or millisecond.
//
// With N > 1 sub-windows (Limit.SubWindows) it is the sub-window counter of
// sliding_sub.go instead; every method below hands such a Limit over to it.
type slidingWindow struct{}

func (slidingWindow) validate(l Limit) error {
	w := l.Window.Milliseconds()
	switch n := int64(l.SubWindows); {
	case n > MaxSubWindows:
		return fmt.Errorf("limiter: sub_windows: %d is more than %d", n, MaxSubWindows)
	case n > 1 && w%n != 0:
		return fmt.Errorf("limiter: sub_windows: %d does not divide the window (%d ms) into whole milliseconds", n, w)
	}
	return nil
}

func (slidingWindow) capacity(l Limit) uint64 { return l.Requests }

func (slidingWindow) denialsHold() bool { return true }

// roll returns s as seen from the window of nowMs: the current window's count
// moves to prev when one window has passed, and both are zero after more. A
// state stored in a later window than now's (the clock stepped back: NTP, or a
// Redis failover to a host whose clock is behind) is kept as it is and seen
// from the start of its own window, so a clock step never empties counters.
func (slidingWindow) roll(s State, nowMs int64, l Limit) State {
	if n := l.SubWindowCount(); n > 1 {
		return subRoll(s, nowMs, l.Window.Milliseconds()/n, n)
	}
	index := floorDiv(nowMs, l.Window.Milliseconds())
	switch {
	case s.At == index || s.At > index && (s.N1 != 0 || s.N2 != 0):
		return s
	case s.At == index-1:
		return State{At: index, N2: s.N1}
	default:
		return State{At: index}
	}
}

// decide: with p = prev, c = cur, L = limit, admit n iff
// p*(w-e) + (c+n)*w <= L*w, the estimate p*(1-e/w) + c + n <= L scaled by w
// so that it stays in integers. Otherwise the retry is the first e' in this
// window with p*(w-e') <= (L-c-n)*w, or else the first e” in the next one,
// where cur becomes prev, with c*(w-e”) + n*w <= L*w.
func (slidingWindow) decide(s State, nowMs int64, l Limit, n uint64) (bool, int64) {
	if subs := l.SubWindowCount(); subs > 1 {
		return subDecide(s, nowMs, l, subs, n)
	}
	w := l.Window.Milliseconds()
	e := elapsed(nowMs, w, s.At)
	L, W, E := float64(l.CeilingOf(l.Requests)), float64(w), float64(e)
	p, cur, nf := float64(s.N2), float64(s.N1), float64(n)
	weighted := float64(p * float64(W-E))
	if float64(weighted+float64(float64(cur+nf)*W)) <= float64(L*W) {
		return true, 0
	}
	if cur+nf <= L && p > 0 {
		k := math.Floor(float64(float64(float64(L-cur)-nf)*W) / p)
		need := W - k
		if need < W {
			return false, max(int64(need)-e, 1)
		}
	}
	need := 0.0
	if cur > 0 {
		k := math.Floor(float64(float64(L-nf)*W) / cur)
		need = max(W-k, 0)
	}
	return false, (w - e) + int64(need)
}

// consume adds inc to cur, saturating at MaxCount, then takes dec back
// where the hits still count, the newest first: from cur, then from prev,
// never below zero. (A refund sent late, after the window rolled, still
// finds its hits in prev.)
func (slidingWindow) consume(s State, _ int64, l Limit, c change) State {
	if n := l.SubWindowCount(); n > 1 {
		return subConsume(s, n, c.inc, c.dec)
	}
	cur := min(satAdd(s.N1, c.inc), MaxCount)
	back := min(c.dec, cur)
	s.N1 = cur - back
	s.N2 -= min(c.dec-back, s.N2)
	return s
}

// report: remaining is floor(L - estimate), at least 0; the reset is the
// time until the estimate is zero: the end of the next window while cur
// holds hits, the end of this one while only prev does.
func (slidingWindow) report(s State, nowMs int64, l Limit, allowed bool) (uint64, int64) {
	if n := l.SubWindowCount(); n > 1 {
		return subReport(s, nowMs, l, n, allowed)
	}
	w := l.Window.Milliseconds()
	e := elapsed(nowMs, w, s.At)
	var reset int64
	switch {
	case s.N1 > 0:
		reset = (w - e) + w
	case s.N2 > 0:
		reset = w - e
	}
	if !allowed {
		return 0, reset
	}
	L, W, E := float64(l.CeilingOf(l.Requests)), float64(w), float64(e)
	p, cur := float64(s.N2), float64(s.N1)
	r := math.Floor(float64(float64(float64(L*W)-float64(p*float64(W-E)))-float64(cur*W)) / W)
	if r <= 0 {
		return 0, reset
	}
	return uint64(r), reset
}

// expires is the start of the second window after At, when both counts have
// rolled out.
func (slidingWindow) expires(s State, l Limit) int64 {
	if n := l.SubWindowCount(); n > 1 {
		return subExpires(s, l.Window.Milliseconds()/n)
	}
	if s.N1 == 0 && s.N2 == 0 {
		return math.MinInt64
	}
	return (s.At + 2) * l.Window.Milliseconds()
}

// elapsed is the part of window index that has passed at nowMs, in ms: 0 when
// the window starts later than nowMs (see roll).
func elapsed(nowMs, w, index int64) int64 {
	return max(nowMs-index*w, 0)
}
