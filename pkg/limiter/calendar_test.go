package limiter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

func berlin(t *testing.T, u limiter.CalendarUnit) limiter.Calendar {
	t.Helper()
	c, err := limiter.LoadCalendar(u, "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func at(t *testing.T, s string) time.Time {
	t.Helper()
	loc, _ := time.LoadLocation("Europe/Berlin")
	v, err := time.ParseInLocation("2006-01-02 15:04:05", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestCalendarPeriods: the starts of days, ISO weeks and months in Berlin,
// across both DST changes of 2026 (29 March, a 23-hour day; 25 October, a
// 25-hour day).
func TestCalendarPeriods(t *testing.T) {
	for _, tc := range []struct {
		unit       limiter.CalendarUnit
		now        string
		start, end string
		length     time.Duration
	}{
		{limiter.CalendarDay, "2026-03-29 12:00:00", "2026-03-29 00:00:00", "2026-03-30 00:00:00", 23 * time.Hour},
		{limiter.CalendarDay, "2026-10-25 23:59:59", "2026-10-25 00:00:00", "2026-10-26 00:00:00", 25 * time.Hour},
		{limiter.CalendarDay, "2026-06-01 00:00:00", "2026-06-01 00:00:00", "2026-06-02 00:00:00", 24 * time.Hour},
		{limiter.CalendarWeek, "2026-03-29 23:00:00", "2026-03-23 00:00:00", "2026-03-30 00:00:00", 7*24*time.Hour - time.Hour},
		{limiter.CalendarWeek, "2026-12-02 15:00:00", "2026-11-30 00:00:00", "2026-12-07 00:00:00", 7 * 24 * time.Hour},
		{limiter.CalendarMonth, "2026-02-28 23:59:59", "2026-02-01 00:00:00", "2026-03-01 00:00:00", 28 * 24 * time.Hour},
		{limiter.CalendarMonth, "2026-03-31 10:00:00", "2026-03-01 00:00:00", "2026-04-01 00:00:00", 31*24*time.Hour - time.Hour},
		{limiter.CalendarMonth, "2026-12-31 23:59:59", "2026-12-01 00:00:00", "2027-01-01 00:00:00", 31 * 24 * time.Hour},
	} {
		c := berlin(t, tc.unit)
		s := c.Start(at(t, tc.now).UnixMilli())
		e := c.Next(s)
		if s != at(t, tc.start).UnixMilli() || e != at(t, tc.end).UnixMilli() || time.Duration(e-s)*time.Millisecond != tc.length {
			t.Errorf("%v at %s: [%v, %v), want [%s, %s) of %v", tc.unit, tc.now,
				time.UnixMilli(s).In(c.Zone), time.UnixMilli(e).In(c.Zone), tc.start, tc.end, tc.length)
		}
		b := c.Bounds(at(t, tc.now).UnixMilli())
		if b[1] != s || b[2] != e || c.Next(b[0]) != s || c.Next(e) != b[3] {
			t.Errorf("%v at %s: bounds %v", tc.unit, tc.now, b)
		}
	}
}

// calendarStore is a MemoryStore on a test clock, and a monthly quota of 3
// (or daily, by unit) in Berlin.
func calendarStore(t *testing.T, u limiter.CalendarUnit, now *time.Time) (*limiter.MemoryStore, limiter.Limit) {
	s := limiter.NewMemoryStore(limiter.MemoryOptions{Now: func() time.Time { return *now }})
	l := limiter.Limit{Requests: 3, Window: 30 * 24 * time.Hour, Algorithm: limiter.FixedWindow, Calendar: berlin(t, u)}
	if u == limiter.CalendarDay {
		l.Window = 24 * time.Hour
	}
	return s, l
}

func allow(t *testing.T, s limiter.Store, l limiter.Limit) limiter.Result {
	t.Helper()
	r, err := limiter.Allow(context.Background(), s, "tenant", l)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCalendarMonthResets: a monthly quota used up on 31 January is denied
// until midnight in Berlin (23:00 UTC), with Retry-After and the reset
// counting to it, and admitted again from then.
func TestCalendarMonthResets(t *testing.T) {
	now := at(t, "2026-01-31 23:00:00")
	s, l := calendarStore(t, limiter.CalendarMonth, &now)
	for i := range 3 {
		if r := allow(t, s, l); !r.Allowed || r.Remaining != uint64(2-i) || r.ResetAfter != time.Hour {
			t.Fatalf("hit %d: %+v, want allowed, %d remaining, reset in 1h", i, r, 2-i)
		}
	}
	now = at(t, "2026-01-31 23:59:59")
	if r := allow(t, s, l); r.Allowed || r.RetryAfter != time.Second || r.ResetAfter != time.Second {
		t.Fatalf("over the quota: %+v, want denied, retry and reset in 1s", r)
	}
	now = at(t, "2026-02-01 00:00:00")
	if r := allow(t, s, l); !r.Allowed || r.Remaining != 2 || r.ResetAfter != 28*24*time.Hour {
		t.Fatalf("on 1 February: %+v, want allowed, 2 remaining, reset in 28 days", r)
	}
}

// TestCalendarDayAcrossDST: a daily quota on the 23-hour day of the spring
// DST change resets at the next midnight, 23 hours after the last, not 24.
func TestCalendarDayAcrossDST(t *testing.T) {
	now := at(t, "2026-03-29 00:00:00")
	s, l := calendarStore(t, limiter.CalendarDay, &now)
	for range 3 {
		if r := allow(t, s, l); !r.Allowed || r.ResetAfter != 23*time.Hour {
			t.Fatalf("%+v, want allowed, reset in 23h", r)
		}
	}
	now = at(t, "2026-03-29 23:30:00")
	if r := allow(t, s, l); r.Allowed || r.RetryAfter != 30*time.Minute {
		t.Fatalf("%+v, want denied until midnight, in 30m", r)
	}
	now = now.Add(30 * time.Minute) // 2026-03-30 00:00 in Berlin
	if r := allow(t, s, l); !r.Allowed || r.Remaining != 2 || r.ResetAfter != 24*time.Hour {
		t.Fatalf("after midnight: %+v, want allowed, 2 remaining, reset in 24h", r)
	}
}

// TestCalendarIdentity: a calendar quota and an epoch-aligned fixed window
// of the same key and window count apart; a calendar on another algorithm
// and an unknown zone are refused with the field named.
func TestCalendarIdentity(t *testing.T) {
	now := at(t, "2026-05-10 12:00:00")
	s, l := calendarStore(t, limiter.CalendarDay, &now)
	for range 3 {
		allow(t, s, l)
	}
	plain := l
	plain.Calendar = limiter.Calendar{}
	if r := allow(t, s, plain); !r.Allowed || r.Remaining != 2 {
		t.Errorf("epoch-aligned window after the calendar one's 3: %+v, want its own counter", r)
	}
	bad := l
	bad.Algorithm = limiter.SlidingWindow
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "calendar") {
		t.Errorf("calendar on sliding_window: %v, want an error naming calendar", err)
	}
	if _, err := limiter.LoadCalendar(limiter.CalendarDay, "Europe/Nowhere"); err == nil || !strings.Contains(err.Error(), "time_zone") {
		t.Errorf("unknown zone: %v, want an error naming time_zone", err)
	}
}
