package limiter_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestClockStepBackKeepsCounters: a clock that steps back across a window
// boundary (NTP, a Redis failover to a host behind) must not empty counters
// and let a burst through.
func TestClockStepBackKeepsCounters(t *testing.T) {
	hit := []limiter.Hit{{Key: "k", Limit: limiter.Limit{Requests: 3, Window: time.Second}, Hits: 1}}
	c := []limiter.State{{}}
	now := int64(10_000) // the start of window 10
	for range 3 {
		_, next, ok := evaluate(t, now, hit, c)
		if !ok {
			t.Fatal("under the limit, denied")
		}
		c = next
	}
	// 200 ms back, into window 9.
	r, next, ok := evaluate(t, now-200, hit, c)
	if ok || r[0].Allowed {
		t.Errorf("after the clock stepped back: admitted %+v, want denied", r[0])
	}
	if !reflect.DeepEqual(next[0], c[0]) {
		t.Errorf("counter changed to %+v, want %+v kept", next[0], c[0])
	}
}

// TestSharedCounterDecidedWithItsGrowth: hits on one counter are decided with
// the growth the counter takes (the largest Hits among them), so a small
// enforced hit cannot let a larger shadow hit push the count over its limit.
func TestSharedCounterDecidedWithItsGrowth(t *testing.T) {
	l := limiter.Limit{Requests: 10, Window: time.Minute}
	c := []limiter.State{sw(30_000_000/60, 9, 0), sw(30_000_000/60, 9, 0)}
	hits := []limiter.Hit{{Key: "k", Limit: l, Hits: 1}, {Key: "k", Limit: l, Hits: 5, Shadow: true}}
	r, next, ok := evaluate(t, 30_000_000, hits, c)
	if ok || r[0].Allowed {
		t.Errorf("admitted %+v (counter would go to %d on a limit of 10)", r[0], next[0].N1)
	}
	if next[0].N1 != 9 {
		t.Errorf("counter %d after a denial, want 9", next[0].N1)
	}
}
