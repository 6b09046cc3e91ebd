package limiter

import (
	"fmt"
	"sync"
	"time"

	// The scratch image has no zone database: embed it, so that every zone
	// a config names loads wherever Sluice runs.
	_ "time/tzdata"
)

// CalendarUnit is the period of a calendar quota: the zero value is none
// (windows aligned to the Unix epoch).
type CalendarUnit uint8

const (
	// CalendarNone is no calendar: the Limit's windows are epoch-aligned.
	CalendarNone CalendarUnit = iota
	// CalendarDay resets at midnight: a day of 23, 24 or 25 hours.
	CalendarDay
	// CalendarWeek resets at midnight on Monday (ISO 8601 weeks).
	CalendarWeek
	// CalendarMonth resets at midnight on the first of the month.
	CalendarMonth
)

var calendarUnitNames = [...]string{"none", "day", "week", "month"}

// String returns the unit's config spelling ("day"), "none" for
// CalendarNone.
func (u CalendarUnit) String() string {
	if int(u) < len(calendarUnitNames) {
		return calendarUnitNames[u]
	}
	return fmt.Sprintf("calendar_unit(%d)", uint8(u))
}

// Calendar makes a FixedWindow count per calendar period in a time zone
// instead of per epoch-aligned Window: the count resets at the start of
// each day, ISO week or month in Zone, whatever the period's length (a day
// across a DST change is 23 or 25 hours, a month 28 to 31 days). It is part
// of the counter's identity. The zero Calendar is none. Calendars made by
// LoadCalendar with the same unit and zone are == (they share the
// *time.Location), so Limit stays comparable.
type Calendar struct {
	// Unit is the period; CalendarNone for no calendar.
	Unit CalendarUnit
	// Zone is the time zone whose midnights start the periods; nil only
	// with CalendarNone.
	Zone *time.Location
}

// zones caches the locations LoadCalendar loaded, by name, so that every
// Calendar of one zone holds the same pointer.
var zones sync.Map // string -> *time.Location

// LoadCalendar returns the Calendar of unit in the IANA time zone named
// zone ("Europe/Berlin", "UTC"), or an error naming the zone when the
// embedded database has no such zone, or the unit when it is CalendarNone
// or unknown. It is safe for concurrent use.
func LoadCalendar(unit CalendarUnit, zone string) (Calendar, error) {
	if unit == CalendarNone || int(unit) >= len(calendarUnitNames) {
		return Calendar{}, fmt.Errorf("limiter: calendar: unit %v is not day, week or month", unit)
	}
	if zone == "" || zone == "Local" {
		// "" and "Local" would name the process's zone, which differs by host.
		return Calendar{}, fmt.Errorf("limiter: calendar: time_zone %q is not an IANA zone name (Europe/Berlin, UTC)", zone)
	}
	if loc, ok := zones.Load(zone); ok {
		return Calendar{Unit: unit, Zone: loc.(*time.Location)}, nil
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return Calendar{}, fmt.Errorf("limiter: calendar: time_zone %q: unknown time zone", zone)
	}
	actual, _ := zones.LoadOrStore(zone, loc)
	return Calendar{Unit: unit, Zone: actual.(*time.Location)}, nil
}

// Name returns the calendar's identity as keys spell it: "month@Europe/Berlin",
// "" for none.
func (c Calendar) Name() string {
	if c.Unit == CalendarNone || c.Zone == nil {
		return ""
	}
	return c.Unit.String() + "@" + c.Zone.String()
}

// Start returns the Unix ms at which the period holding nowMs starts. c
// must not be none.
func (c Calendar) Start(nowMs int64) int64 {
	t := time.UnixMilli(nowMs).In(c.Zone)
	y, m, d := t.Date()
	switch c.Unit {
	case CalendarWeek:
		d -= (int(t.Weekday()) + 6) % 7 // days since Monday
	case CalendarMonth:
		d = 1
	}
	s := time.Date(y, m, d, 0, 0, 0, 0, c.Zone).UnixMilli()
	if s > nowMs {
		// Midnight skipped by a DST change lands after it; the period
		// starts no later than any instant it holds.
		return c.Start(s - 1)
	}
	return s
}

// Next returns the Unix ms at which the period after the one starting at
// startMs starts. c must not be none.
func (c Calendar) Next(startMs int64) int64 {
	t := time.UnixMilli(startMs).In(c.Zone)
	y, m, d := t.Date()
	switch c.Unit {
	case CalendarDay:
		d++
	case CalendarWeek:
		d += 7 - (int(t.Weekday())+6)%7
	case CalendarMonth:
		m, d = m+1, 1
	}
	return c.Start(time.Date(y, m, d, 12, 0, 0, 0, c.Zone).UnixMilli())
}

// CalendarBounds is how many period starts Bounds returns.
const CalendarBounds = 4

// Bounds returns the starts of the period before the one holding nowMs, of
// that period and of the two after it: the choices a store whose clock
// differs from nowMs by less than a period picks from.
func (c Calendar) Bounds(nowMs int64) [CalendarBounds]int64 {
	s := c.Start(nowMs)
	n := c.Next(s)
	return [CalendarBounds]int64{c.Start(s - 1), s, n, c.Next(n)}
}

// calendarRoll, calendarLeft: the fixed window's steps on a calendar
// (fixed.go). The state's At is the period's start in Unix ms.

// calendarRoll starts the period holding nowMs unless s is of it, or of a
// later one and holds hits (the clock stepped back).
func calendarRoll(c Calendar, s State, nowMs int64) State {
	start := c.Start(nowMs)
	if s.At == start || s.At > start && s.N1 != 0 {
		return s
	}
	return State{At: start}
}

// calendarLeft is the time from nowMs (no earlier than the period's start)
// to the end of the period starting at at.
func calendarLeft(c Calendar, at, nowMs int64) int64 {
	return c.Next(at) - max(nowMs, at)
}
