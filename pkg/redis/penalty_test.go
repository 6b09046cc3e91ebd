package redis

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestPenaltyEscalatesInRedis: through the script, a denial blocks the key
// for block whatever its window says, an offence within forget doubles the
// block up to max, and one after forget starts over.
func TestPenaltyEscalatesInRedis(t *testing.T) {
	var now atomic.Int64
	now.Store(1_700_000_000_000)
	s, _ := newTestStore(t, Options{Now: func() time.Time { return time.UnixMilli(now.Load()) }})
	l := limiter.Limit{Requests: 2, Window: time.Second, Algorithm: limiter.FixedWindow,
		Penalty: limiter.Penalty{Block: 10 * time.Second, Escalate: 2, Max: 30 * time.Second, Forget: time.Minute}}
	hit := func() limiter.Result {
		t.Helper()
		r, err := s.Apply(context.Background(), []limiter.Hit{{Key: "tenant", Limit: l, Hits: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return r[0]
	}
	offend := func() limiter.Result {
		t.Helper()
		for i := range 2 {
			if r := hit(); !r.Allowed {
				t.Fatalf("hit %d under the limit: %+v, want allowed", i+1, r)
			}
		}
		return hit()
	}
	if r := offend(); r.Allowed || r.RetryAfter != 10*time.Second || r.ResetAfter != 10*time.Second {
		t.Fatalf("first offence: %+v, want denied for 10s", r)
	}
	now.Add(4000)
	if r := hit(); r.Allowed || !r.OverLimit || r.RetryAfter != 6*time.Second {
		t.Fatalf("during the block: %+v, want denied for the 6s left", r)
	}
	now.Add(6000)
	if r := offend(); r.Allowed || r.RetryAfter != 20*time.Second {
		t.Fatalf("second offence: %+v, want denied for 20s", r)
	}
	now.Add(20_000)
	if r := offend(); r.Allowed || r.RetryAfter != 30*time.Second {
		t.Fatalf("third offence: %+v, want denied for max, 30s", r)
	}
	now.Add(30_000 + 60_000)
	if r := offend(); r.Allowed || r.RetryAfter != 10*time.Second {
		t.Fatalf("after forget: %+v, want a first offence's 10s", r)
	}
}

// TestPenaltyDifferential drives the Redis store and the memory store (the
// Go twin) with one fake clock and the same random requests on penalized
// limits (several algorithms, shadow hits, refunds, two limits per
// request) and requires identical Results.
func TestPenaltyDifferential(t *testing.T) {
	var now atomic.Int64
	now.Store(1_700_000_000_000)
	clock := func() time.Time { return time.UnixMilli(now.Load()) }
	s, _ := newTestStore(t, Options{Now: clock})
	m := limiter.NewMemoryStore(limiter.MemoryOptions{Now: clock})
	p := limiter.Penalty{Block: 3 * time.Second, Escalate: 3, Max: 20 * time.Second, Forget: 10 * time.Second}
	limits := []limiter.Limit{
		{Requests: 3, Window: time.Second, Algorithm: limiter.FixedWindow, Penalty: p},
		{Requests: 4, Window: 2 * time.Second, Algorithm: limiter.SlidingWindow, Penalty: p},
		{Requests: 2, Window: time.Second, Algorithm: limiter.TokenBucket, Penalty: p},
		{Requests: 5, Window: time.Second, Algorithm: limiter.SlidingLog, Penalty: p},
		{Requests: 3, Window: time.Second, Algorithm: limiter.FixedWindow},
	}
	rng := rand.New(rand.NewPCG(7, 39))
	ctx := context.Background()
	blocked := 0
	for step := range 1500 {
		now.Add(int64(rng.IntN(700)))
		key := []string{"a", "b"}[rng.IntN(2)]
		var hits []limiter.Hit
		for range 1 + rng.IntN(2) {
			h := limiter.Hit{Key: key, Limit: limits[rng.IntN(len(limits))], Hits: uint64(1 + rng.IntN(2))}
			switch rng.IntN(8) {
			case 0:
				h.Shadow = true
			case 1:
				h.Refund = true
			}
			hits = append(hits, h)
		}
		want, err := m.Apply(ctx, hits)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Apply(ctx, hits)
		if err != nil {
			t.Fatal(err)
		}
		for i := range hits {
			if got[i] != want[i] {
				t.Fatalf("step %d, hit %d of %+v: redis %+v, memory %+v", step, i, hits, got[i], want[i])
			}
			if !want[i].Allowed && want[i].RetryAfter > 2*time.Second { // longer than any window: a block
				blocked++
			}
		}
	}
	if blocked < 100 {
		t.Errorf("%d hits denied by a block, want the test to exercise blocks (100 or more)", blocked)
	}
	t.Logf("%d hits denied by a block", blocked)
}
