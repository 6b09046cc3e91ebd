package descriptors

import (
	"github.com/sluicehq/sluice/pkg/limiter"
	"gopkg.in/yaml.v3"
)

// CalendarNode is rate_limit.calendar (a Sluice addition): a fixed_window
// quota that resets at the start of each calendar day, ISO week or month
// (the rate_limit's unit) in a time zone.
type CalendarNode struct {
	// Pos is where the mapping is, for an error about a missing time_zone.
	Pos Pos
	// TimeZone is calendar.time_zone, an IANA zone name ("Europe/Berlin").
	TimeZone Field[string]
}

// calendarKeys are the keys of rate_limit.calendar.
var calendarKeys = []string{"time_zone"}

// calendar decodes rate_limit.calendar at path.
func (p *decoder) calendar(n *yaml.Node, path string, depth int) (*CalendarNode, bool) {
	m, ok := p.mapping(n, path, "a mapping {time_zone: ...}", calendarKeys, depth+1)
	if !ok {
		return nil, false
	}
	return &CalendarNode{Pos: p.posOf(m.node), TimeZone: get(p, m, "time_zone", path, p.str)}, true
}

// calendarUnits maps the units a calendar takes to its periods.
var calendarUnits = map[Unit]limiter.CalendarUnit{Day: limiter.CalendarDay, Week: limiter.CalendarWeek, Month: limiter.CalendarMonth}

// calendar fills l.Calendar from rl's calendar at path: only on a
// fixed_window of unit day, week or month without a multiplier, with a
// time_zone the embedded zone database has.
func (b *builder) calendar(rl *RateLimitNode, l *Limit, path string) {
	f := rl.Calendar
	if state(b, f, path+".calendar") != FieldSet || f.Value == nil {
		return
	}
	c := f.Value
	u, unitOK := calendarUnits[l.Unit]
	switch {
	case l.Algorithm != limiter.FixedWindow:
		b.errorAt(f.KeyPos, path+".calendar", "calendar with algorithm %s (only %s resets on the calendar)", l.Algorithm, limiter.FixedWindow)
	case l.Unit != UnitUnknown && !unitOK:
		b.errorAt(f.KeyPos, path+".calendar", "calendar with unit %s (want day, week or month)", l.Unit)
	case l.UnitMultiplier > 1:
		b.errorAt(f.KeyPos, path+".calendar", "calendar with unit_multiplier %d (a calendar period is one day, week or month)", l.UnitMultiplier)
	case !unitOK:
	default:
		switch tz := c.TimeZone; state(b, tz, path+".calendar.time_zone") {
		case FieldAbsent:
			b.errorAt(c.Pos, path+".calendar.time_zone", "missing time_zone (an IANA zone name: Europe/Berlin, UTC)")
		case FieldSet:
			cal, err := limiter.LoadCalendar(u, tz.Value)
			if err != nil {
				b.errorAt(tz.Pos, path+".calendar.time_zone", "unknown time zone %s (want an IANA zone name: Europe/Berlin, UTC)", quote(tz.Value))
				return
			}
			l.TimeZone, l.calendar = tz.Value, cal
		}
	}
}

// showCalendar is what /config shows of a limit's calendar.
func showCalendar(l *Limit) any {
	if l.TimeZone == "" {
		return nil
	}
	return []KeyValue{{"time_zone", l.TimeZone}, {"resets", l.calendar.Unit.String()}}
}

// Shares reports whether pkg/rlqs can divide l among Envoy holders: its
// algorithm's Traits say so and it has no calendar, whose periods a
// holder's share, granted per window, cannot follow, nor a penalty, whose
// block only the store keeps.
func (l *Limit) Shares() bool {
	return l.Algorithm.Traits().Shares && l.TimeZone == "" && !l.Penalty.On()
}
