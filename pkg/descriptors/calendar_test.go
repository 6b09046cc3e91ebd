package descriptors

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestCalendarConfig: a monthly calendar quota builds to a fixed window on
// the Berlin calendar; a bad zone, a calendar on another algorithm or unit
// and a missing zone are refused at their field.
func TestCalendarConfig(t *testing.T) {
	cfg, err := Parse(Source{Name: "c.yaml", Data: []byte(`domain: c
descriptors:
  - key: tenant
    rate_limit: {unit: month, requests_per_unit: 1000000, algorithm: fixed_window, calendar: {time_zone: Europe/Berlin}}
`)})
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Domain("c").Rules[0].Limit.Store()
	want, _ := limiter.LoadCalendar(limiter.CalendarMonth, "Europe/Berlin")
	if l.Calendar != want || l.Algorithm != limiter.FixedWindow || l.Validate() != nil {
		t.Errorf("built %+v, want a fixed window on %v", l, want.Name())
	}
	for _, tc := range []struct{ rl, want string }{
		{`{unit: day, requests_per_unit: 1, algorithm: fixed_window, calendar: {time_zone: Mars/Olympus}}`,
			`c.yaml:3:107: descriptors[0].rate_limit.calendar.time_zone: unknown time zone "Mars/Olympus"`},
		{`{unit: day, requests_per_unit: 1, calendar: {time_zone: UTC}}`,
			`c.yaml:3:60: descriptors[0].rate_limit.calendar: calendar with algorithm sliding_window (only fixed_window resets on the calendar)`},
		{`{unit: hour, requests_per_unit: 1, algorithm: fixed_window, calendar: {time_zone: UTC}}`,
			`descriptors[0].rate_limit.calendar: calendar with unit hour (want day, week or month)`},
		{`{unit: day, requests_per_unit: 1, algorithm: fixed_window, calendar: {}}`,
			`descriptors[0].rate_limit.calendar.time_zone: missing time_zone`},
	} {
		_, err := Parse(Source{Name: "c.yaml", Data: []byte("domain: c\ndescriptors:\n  - {key: k, rate_limit: " + tc.rl + "}\n")})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.rl, err, tc.want)
		}
	}
}
