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

// slidingLog is the exact sliding log (sliding_log) and the concurrency
// gauge (concurrency): the time of every counted hit still inside the
// window, one entry per hit. A request of n hits is admitted iff count + n
// <= limit, count being the entries in (now - window, now]; then n entries
// at now are added. For the sliding log that is exact: never more than the
// limit in any window, and nothing refused that fits; a refund removes the
// newest entries, the hits most likely its own. For concurrency each entry
// is a slot, a request in flight, named by its acquire's slot token
// (Hit.SlotToken): a release (a refund, sent when the stream ends) frees
// only slots of its own token, the oldest first, so a release sent for a
// request that took no slot (Envoy sends one for a denied request too)
// frees nothing; a slot that is never released leaves the count one window
// after its acquire. Retry-After is exact with no further traffic: the time
// until enough of the oldest entries leave the window.
//
// State: Slots holds the entries, ascending by time: for the sliding log
// each entry is its Unix ms time, for concurrency its time and its token
// (two elements; inFlight). A time later than now (the clock stepped back)
// stays counted until it has left the window. The Lua twin holds them as a
// sorted set scored by time.
type slidingLog struct {
	inFlight bool
}

// stride is the elements of Slots per entry.
func (a slidingLog) stride() int {
	if a.inFlight {
		return 2
	}
	return 1
}

// validate: the logs take no parameter, no overdraw and at most
// MaxLogRequests (their Traits say so).
func (slidingLog) validate(Limit) error { return nil }

func (slidingLog) capacity(l Limit) uint64 { return l.Requests }

// denialsHold is true for the sliding log; a concurrency denial ends with
// any release, which OverLimitCache cannot see coming from other instances.
func (a slidingLog) denialsHold() bool { return !a.inFlight }

// roll drops the entries at or before now - window.
func (a slidingLog) roll(s State, nowMs int64, l Limit) State {
	cut, k := nowMs-l.Window.Milliseconds(), a.stride()
	i := k * sort.Search(len(s.Slots)/k, func(i int) bool { return s.Slots[k*i] > cut })
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
func (a slidingLog) decide(s State, nowMs int64, l Limit, n uint64) (bool, int64) {
	k := a.stride()
	count, lim := uint64(len(s.Slots)/k), l.CeilingOf(l.Requests)
	if count+n <= lim {
		return true, 0
	}
	x := count + n - lim // 1 <= x <= count, as n <= lim (the counter may hold more than lim: other classes)
	return false, s.Slots[k*int(x-1)] + l.Window.Milliseconds() - nowMs
}

// consume adds c.inc entries at now (for concurrency named by c.acquire),
// the log holding at most MaxLogRequests (a shadow hit may ask for more),
// then removes c.dec: the newest of the sliding log; the oldest of
// concurrency's slots named by c.release, none when it is 0.
func (a slidingLog) consume(s State, nowMs int64, _ Limit, c change) State {
	k := a.stride()
	n := len(s.Slots) / k
	add := int(min(c.inc, uint64(max(MaxLogRequests-n, 0))))
	if add == 0 && (c.dec == 0 || n == 0 || a.inFlight && c.release == 0) {
		return s
	}
	at := k * sort.Search(n, func(i int) bool { return s.Slots[k*i] > nowMs })
	slots := make([]int64, 0, len(s.Slots)+k*add)
	slots = append(slots, s.Slots[:at]...)
	for range add {
		slots = append(slots, nowMs)
		if a.inFlight {
			slots = append(slots, int64(c.acquire))
		}
	}
	slots = append(slots, s.Slots[at:]...)
	if a.inFlight {
		slots = releaseSlots(slots, c.dec, int64(c.release))
	} else {
		slots = slots[:len(slots)-int(min(c.dec, uint64(len(slots))))]
	}
	if len(slots) == 0 {
		return State{}
	}
	return State{Slots: slices.Clip(slots)}
}

// releaseSlots removes from slots (time and token per slot) the oldest dec
// slots named by token, none when token is 0, in place.
func releaseSlots(slots []int64, dec uint64, token int64) []int64 {
	if token == 0 {
		return slots
	}
	out := slots[:0]
	for i := 0; i < len(slots); i += 2 {
		if dec > 0 && slots[i+1] == token {
			dec--
			continue
		}
		out = append(out, slots[i], slots[i+1])
	}
	return out
}

// report: remaining is limit - count; the reset is the time until the
// newest entry leaves the window.
func (a slidingLog) report(s State, nowMs int64, l Limit, allowed bool) (uint64, int64) {
	k := a.stride()
	n, lim := len(s.Slots)/k, l.CeilingOf(l.Requests)
	if n == 0 {
		if allowed {
			return lim, 0
		}
		return 0, 0
	}
	reset := s.Slots[len(s.Slots)-k] + l.Window.Milliseconds() - nowMs
	if !allowed || uint64(n) >= lim {
		return 0, reset
	}
	return lim - uint64(n), reset
}

func (a slidingLog) expires(s State, l Limit) int64 {
	if len(s.Slots) == 0 {
		return math.MinInt64
	}
	return s.Slots[len(s.Slots)-a.stride()] + l.Window.Milliseconds()
}
