package limiter

import "math"

// The sliding window with N > 1 sub-windows (Limit.SubWindows): the Window
// is cut into N sub-windows of s = window/N ms, aligned to the Unix epoch,
// each with its own count. The sliding window (now - window, now] overlaps
// the current sub-window j = floor(now/s) and the N before it, the oldest
// only in part; the estimate counts all N+1 whole. Since they hold every hit
// admitted in the sliding window, admitting n iff estimate + n <= limit never
// lets more than the limit through in any window (the classic counter's rule,
// weighting the oldest by its overlap, still did: bench/accuracy). The price
// is the hits of the oldest sub-window's part that has already left the
// window: at most 1/N of a window's worth, so a larger N admits closer to the
// exact sliding log. Retry-After is at most window + s: the current
// sub-window leaves the estimate N+1 boundaries on.
//
// State: At is j, Slots the counts of sub-windows j-N .. j, oldest first, or
// nil when all are zero; their total never passes MaxCount. The Lua twin
// keeps them in one string: j, the total, and a record per sub-window that
// holds hits. The counts are summed in float64, oldest first; with the total
// at most MaxCount every such sum is exact, so the Lua twin's running total
// is the same number.

// subRoll returns s rolled to the sub-window of nowMs (of s ms each, n per
// window). A state stored in a later sub-window (the clock stepped back) is
// kept as it is and seen from the start of its own sub-window.
func subRoll(st State, nowMs, sub, n int64) State {
	j := floorDiv(nowMs, sub)
	switch {
	case st.At == j || st.At > j && st.Slots != nil:
		return st
	case st.Slots == nil || st.At > j || j-st.At > n || len(st.Slots) != int(n+1):
		return State{At: j}
	}
	d := j - st.At
	slots := make([]int64, n+1)
	copy(slots, st.Slots[d:])
	return State{At: j, Slots: nilIfZero(slots)}
}

func nilIfZero(slots []int64) []int64 {
	for _, c := range slots {
		if c != 0 {
			return slots
		}
	}
	return nil
}

// subSum is the estimate: every count, summed oldest first in float64.
func subSum(slots []int64) float64 {
	sum := 0.0
	for _, c := range slots {
		sum = float64(sum + float64(c))
	}
	return sum
}

// subDecide admits n iff estimate + n <= limit; otherwise the retry is the
// time until enough of the oldest sub-windows have left the estimate.
func subDecide(st State, nowMs int64, l Limit, subs int64, n uint64) (bool, int64) {
	sub := l.Window.Milliseconds() / subs
	L, nf := float64(l.CeilingOf(l.Requests)), float64(n)
	rest := subSum(st.Slots)
	if float64(rest+nf) <= L {
		return true, 0
	}
	e := elapsed(nowMs, sub, st.At)
	for m := range st.Slots {
		rest = float64(rest - float64(st.Slots[m]))
		if float64(rest+nf) <= L {
			return false, int64(m+1)*sub - e
		}
	}
	return false, (subs+1)*sub - e
}

// subConsume adds inc to the current sub-window, the total of all of them
// saturating at MaxCount, then takes dec back where the hits still count,
// the newest first: from the current sub-window, then each older one in
// turn, never below zero (a refund sent late, after its sub-window ended,
// still finds its hits). Since the total never passes MaxCount (2^52),
// every sum of counts is exact in float64, whatever its order: the Lua twin
// keeps a running total instead of adding the counts up on every decision.
func subConsume(st State, subs int64, inc, dec uint64) State {
	if inc == 0 && (dec == 0 || st.Slots == nil) {
		return st
	}
	slots := make([]int64, subs+1)
	copy(slots, st.Slots)
	var rest uint64
	for _, c := range slots[:subs] {
		rest += uint64(c)
	}
	room := uint64(0)
	if rest < MaxCount {
		room = MaxCount - rest
	}
	slots[subs] = int64(min(satAdd(uint64(slots[subs]), inc), room))
	for i := subs; i >= 0 && dec > 0; i-- {
		back := min(dec, uint64(slots[i]))
		slots[i] -= int64(back)
		dec -= back
	}
	st.Slots = nilIfZero(slots)
	return st
}

// subReport: remaining is floor(limit - estimate), at least 0; the reset is
// the time until the newest sub-window holding hits leaves the estimate.
func subReport(st State, nowMs int64, l Limit, subs int64, allowed bool) (uint64, int64) {
	sub := l.Window.Milliseconds() / subs
	var reset int64
	for i := len(st.Slots) - 1; i >= 0; i-- {
		if st.Slots[i] != 0 {
			reset = int64(i+1)*sub - elapsed(nowMs, sub, st.At)
			break
		}
	}
	if !allowed {
		return 0, reset
	}
	r := float64(float64(l.CeilingOf(l.Requests)) - subSum(st.Slots))
	if r <= 0 {
		return 0, reset
	}
	return uint64(r), reset
}

// subExpires is when the newest sub-window holding hits leaves the estimate.
func subExpires(st State, sub int64) int64 {
	for i := len(st.Slots) - 1; i >= 0; i-- {
		if st.Slots[i] != 0 {
			return (st.At + int64(i) + 1) * sub
		}
	}
	return math.MinInt64
}
