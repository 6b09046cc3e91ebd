package limiter

import (
	"math"
)

// fixedWindow is envoyproxy/ratelimit's fixed window counter, so that a
// migration can start with unchanged behaviour: one count per window
// [i*w, (i+1)*w), aligned to the Unix epoch, and a request is admitted iff
// count + n <= limit. Unlike the peer's, a denied request consumes nothing
// (section 3's all or nothing), so a client that keeps retrying is admitted
// again at the next window; on any sequence of single hits inside one window
// both give the same codes. It lets up to twice the limit through across a
// window boundary, which is why it is not the default. Its Lua twin is
// pkg/redis/lua/fixed.lua.
//
// With a Calendar (calendar.go), the windows are the calendar's periods
// instead: a day, ISO week or month in its time zone.
//
// Its State: At is the window index i = floor(now_ms / w), or with a
// Calendar the period's start in Unix ms; N1 the count.
type fixedWindow struct{}

// validate: a fixed window takes no parameter (its Traits say so).
func (fixedWindow) validate(Limit) error { return nil }

func (fixedWindow) capacity(l Limit) uint64 { return l.Requests }

func (fixedWindow) denialsHold() bool { return true }

// roll empties the count when its window has passed; a state stored in a
// later window (the clock stepped back) is kept and seen from the start of
// its window.
func (fixedWindow) roll(s State, nowMs int64, l Limit) State {
	if l.Calendar.Unit != CalendarNone {
		return calendarRoll(l.Calendar, s, nowMs)
	}
	index := floorDiv(nowMs, l.Window.Milliseconds())
	if s.At == index || s.At > index && s.N1 != 0 {
		return s
	}
	return State{At: index}
}

// decide admits n iff count + n <= limit; otherwise the retry is the end of
// the window, when the count is zero (n <= limit).
func (fixedWindow) decide(s State, nowMs int64, l Limit, n uint64) (bool, int64) {
	if float64(float64(s.N1)+float64(n)) <= float64(l.CeilingOf(l.Requests)) {
		return true, 0
	}
	return false, fixedLeft(s, nowMs, l)
}

// consume adds inc, saturating at MaxCount, then takes dec, never below 0:
// a refund gives back hits of the current window, the only one that counts.
func (fixedWindow) consume(s State, _ int64, _ Limit, c change) State {
	n := min(satAdd(s.N1, c.inc), MaxCount)
	s.N1 = n - min(c.dec, n)
	return s
}

// report: remaining is limit - count, at least 0; the reset is the end of
// the window while the count holds hits.
func (fixedWindow) report(s State, nowMs int64, l Limit, allowed bool) (uint64, int64) {
	var reset int64
	if s.N1 > 0 {
		reset = fixedLeft(s, nowMs, l)
	}
	if !allowed {
		return 0, reset
	}
	r := float64(float64(l.CeilingOf(l.Requests)) - float64(s.N1))
	if r <= 0 {
		return 0, reset
	}
	return uint64(r), reset
}

func (fixedWindow) expires(s State, l Limit) int64 {
	if s.N1 == 0 {
		return math.MinInt64
	}
	if l.Calendar.Unit != CalendarNone {
		return l.Calendar.Next(s.At)
	}
	return (s.At + 1) * l.Window.Milliseconds()
}

// fixedLeft is the time until s's window (or calendar period) ends.
func fixedLeft(s State, nowMs int64, l Limit) int64 {
	if l.Calendar.Unit != CalendarNone {
		return calendarLeft(l.Calendar, s.At, nowMs)
	}
	w := l.Window.Milliseconds()
	return w - elapsed(nowMs, w, s.At)
}
