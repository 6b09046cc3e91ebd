package limiter_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestClockStepBackKeepsCounters: a clock that steps back across a window
// boundary (NTP, a Redis failover to a host behind) must not empty counters
// and let a burst through.
func TestClockStepBackKeepsCounters(t *testing.T) {
	hit := []limiter.Hit{{Key: "k", Limit: limiter.Limit{Requests: 3, Window: time.Second}, Hits: 1}}
	c := []limiter.Counter{{}}
	now := int64(10_000) // the start of window 10
	for range 3 {
		_, next, ok := limiter.Evaluate(now, hit, c)
		if !ok {
			t.Fatal("under the limit, denied")
		}
		c = next
	}
	// 200 ms back, into window 9.
	r, next, ok := limiter.Evaluate(now-200, hit, c)
	if ok || r[0].Allowed {
		t.Errorf("after the clock stepped back: admitted %+v, want denied", r[0])
	}
	if next[0] != c[0] {
		t.Errorf("counter changed to %+v, want %+v kept", next[0], c[0])
	}
}
