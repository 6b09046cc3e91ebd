package descriptors_test

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// TestWindow checks Limit.Window on limits built by hand, as a descriptor's
// override builds them: it never overflows, and a window past MaxWindow
// stays past it.
func TestWindow(t *testing.T) {
	const day = 24 * time.Hour
	for _, tc := range []struct {
		name string
		l    descriptors.Limit
		want time.Duration
	}{
		{"multiplier 0 counts as 1", descriptors.Limit{Unit: descriptors.Second}, time.Second},
		{"5 minutes", descriptors.Limit{Unit: descriptors.Minute, UnitMultiplier: 5}, 5 * time.Minute},
		{"the maximum", descriptors.Limit{Unit: descriptors.Year, UnitMultiplier: 10}, descriptors.MaxWindow},
		{"past the maximum", descriptors.Limit{Unit: descriptors.Year, UnitMultiplier: 11}, 11 * 365 * day},
		{"a year x 300 saturates", descriptors.Limit{Unit: descriptors.Year, UnitMultiplier: 300}, math.MaxInt64},
		{"a year x 9139726 saturates, not wraps", descriptors.Limit{Unit: descriptors.Year, UnitMultiplier: 9139726}, math.MaxInt64},
		{"a year x the largest multiplier", descriptors.Limit{Unit: descriptors.Year, UnitMultiplier: math.MaxUint32}, math.MaxInt64},
		{"a second x the largest multiplier", descriptors.Limit{Unit: descriptors.Second, UnitMultiplier: math.MaxUint32}, math.MaxUint32 * time.Second},
		{"unknown unit", descriptors.Limit{Unit: descriptors.UnitUnknown, UnitMultiplier: 7}, 0},
		{"a unit past the enum", descriptors.Limit{Unit: descriptors.Unit(99), UnitMultiplier: 7}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.l.Window(); got != tc.want {
				t.Errorf("%+v.Window() = %v, want %v", tc.l, got, tc.want)
			}
		})
	}
	if got, want := descriptors.MaxWindow, 3650*day; got != want {
		t.Errorf("MaxWindow = %v, want %v", got, want)
	}
}
