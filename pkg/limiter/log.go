package limiter

import (
	"math"
	"slices"
	"sort"
)

// MaxLogRequests is the largest Requests of a SlidingLog or Concurrency
// Limit. The log keeps one entry per counted hit (in Redis a sorted set of up
// to this many members, about 64 bytes each, so up to about 64 KB per
// counter), and each decision reads it; above this, choose sliding_window,
// which never admits more than the limit in any window either and keeps at
// most sub_windows + 1 counts.
const MaxLogRequests = 1000

// releaseOrder says which entries of a log a refund removes.
type releaseOrder uint8

const (
	// releaseNewest removes the latest entries: a refund takes back the
	// hits most likely its own (sliding_log).
	releaseNewest releaseOrder = iota
	// releaseOldest removes the earliest entries, so the slots left are the
	// ones that expire last (concurrency: a release is for some stream, and
	// a slot that is never released must not free itself early).
	releaseOldest
)

// slidingLog is the exact sliding log (sliding_log) and the concurrency
// gauge (concurrency): the time of every counted hit still inside the
// window, one entry per hit. A request of n hits is admitted iff count + n
// <= limit, count being the entries in (now - window, now]; then n entries
// at now are added. For the sliding log that is exact: never more than the
// limit in any window, and nothing refused that fits. For concurrency each
// entry is a request in flight: a refund (the stream's end) releases one,
// and one that is never released leaves the count one window after its
// acquire. Retry-After is exact with no further traffic: the time until
// enough of the oldest entries leave the window.
//
// State: Slots holds the entries' Unix ms times, ascending; a time later
// than now (the clock stepped back) stays counted until it has left the
// window. The Lua twin holds them as a sorted set scored by time.
type slidingLog struct {
	release releaseOrder
}

// validate: the logs take no parameter, no overdraw and at most
// MaxLogRequests (their Traits say so).
func (slidingLog) validate(Limit) error { return nil }

func (slidingLog) capacity(l Limit) uint64 { return l.Requests }

// denialsHold is true for the sliding log; a concurrency denial ends with
// any release, which OverLimitCache cannot see coming from other instances.
func (a slidingLog) denialsHold() bool { return a.release == releaseNewest }

// roll drops the entries at or before now - window.
func (slidingLog) roll(s State, nowMs int64, l Limit) State {
	cut := nowMs - l.Window.Milliseconds()
	i := sort.Search(len(s.Slots), func(i int) bool { return s.Slots[i] > cut })
	if i == 0 {
		return s
	}
	if i == len(s.Slots) {
		return State{}
	}
	return State{Slots: s.Slots[i:]}
}

// decide admits n iff count + n <= limit; otherwise the retry is the time
// until the (count + n - limit)-th oldest entry leaves the window.
func (slidingLog) decide(s State, nowMs int64, l Limit, n uint64) (bool, int64) {
	count, lim := uint64(len(s.Slots)), l.CeilingOf(l.Requests)
	if count+n <= lim {
		return true, 0
	}
	k := count + n - lim // 1 <= k <= count, as n <= lim (the counter may hold more than lim: other classes)
	return false, s.Slots[k-1] + l.Window.Milliseconds() - nowMs
}

// consume adds inc entries at now, the log holding at most MaxLogRequests
// (a shadow hit may ask for more), then removes dec by the release order.
func (a slidingLog) consume(s State, nowMs int64, _ Limit, inc, dec uint64) State {
	add := int(min(inc, uint64(max(MaxLogRequests-len(s.Slots), 0))))
	if add == 0 && (dec == 0 || len(s.Slots) == 0) {
		return s
	}
	at := sort.Search(len(s.Slots), func(i int) bool { return s.Slots[i] > nowMs })
	slots := make([]int64, 0, len(s.Slots)+add)
	slots = append(slots, s.Slots[:at]...)
	for range add {
		slots = append(slots, nowMs)
	}
	slots = append(slots, s.Slots[at:]...)
	drop := int(min(dec, uint64(len(slots))))
	if a.release == releaseNewest {
		slots = slots[:len(slots)-drop]
	} else {
		slots = slots[drop:]
	}
	if len(slots) == 0 {
		return State{}
	}
	return State{Slots: slices.Clip(slots)}
}

// report: remaining is limit - count; the reset is the time until the
// newest entry leaves the window.
func (slidingLog) report(s State, nowMs int64, l Limit, allowed bool) (uint64, int64) {
	n, lim := len(s.Slots), l.CeilingOf(l.Requests)
	if n == 0 {
		if allowed {
			return lim, 0
		}
		return 0, 0
	}
	reset := s.Slots[n-1] + l.Window.Milliseconds() - nowMs
	if !allowed || uint64(n) >= lim {
		return 0, reset
	}
	return lim - uint64(n), reset
}

func (slidingLog) expires(s State, l Limit) int64 {
	if len(s.Slots) == 0 {
		return math.MinInt64
	}
	return s.Slots[len(s.Slots)-1] + l.Window.Milliseconds()
}
