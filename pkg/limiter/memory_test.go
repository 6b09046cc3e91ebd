package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/limiter/limitertest"
)

func TestMemoryStoreContract(t *testing.T) {
	limitertest.TestStore(t, func(t *testing.T, now func() time.Time) limiter.Store {
		return limiter.NewMemoryStore(limiter.MemoryOptions{Now: now})
	})
}

func TestMemoryStoreContractOneShard(t *testing.T) {
	limitertest.TestStore(t, func(t *testing.T, now func() time.Time) limiter.Store {
		return limiter.NewMemoryStore(limiter.MemoryOptions{Now: now, Shards: 1})
	})
}

func mustApply(t *testing.T, s limiter.Store, hits ...limiter.Hit) []limiter.Result {
	t.Helper()
	res, err := s.Apply(context.Background(), hits)
	if err != nil {
		t.Fatalf("Apply error: %v", err)
	}
	return res
}

// remaining is the Remaining of a check-only hit on key under l.
func remaining(t *testing.T, s limiter.Store, key string, l limiter.Limit) uint64 {
	t.Helper()
	return mustApply(t, s, limiter.Hit{Key: key, Limit: l})[0].Remaining
}

func TestMemoryStoreDropsCountersThatNoLongerMatter(t *testing.T) {
	clk := testclock.NewMilli(t0)
	s := limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now, Shards: 1})
	sec := limiter.Limit{Requests: 10, Window: time.Second}

	mustApply(t, s, limiter.Hit{Key: "check", Limit: sec})
	mustApply(t, s, limiter.Hit{Key: "zero", Limit: perMinute(0), Hits: 1})
	if got := s.Len(); got != 0 {
		t.Errorf("after a check-only hit and a denied hit, Len() = %d, want 0", got)
	}

	mustApply(t, s, limiter.Hit{Key: "refunded", Limit: sec, Hits: 3})
	mustApply(t, s, limiter.Hit{Key: "refunded", Limit: sec, Hits: 5, Refund: true})
	if got := s.Len(); got != 0 {
		t.Errorf("after a counter is refunded to zero, Len() = %d, want 0", got)
	}

	mustApply(t, s, limiter.Hit{Key: "a", Limit: sec, Hits: 1}, limiter.Hit{Key: "b", Limit: perMinute(10), Hits: 1})
	clk.SetMilli(t0 + 1999) // a's state still matters: prev weighs 1 ms
	mustApply(t, s, limiter.Hit{Key: "c", Limit: sec, Hits: 1})
	if got := s.Len(); got != 3 {
		t.Errorf("before a expires, Len() = %d, want 3", got)
	}
	clk.SetMilli(t0 + 2000)
	mustApply(t, s, limiter.Hit{Key: "d", Limit: sec, Hits: 1})
	if got := s.Len(); got != 3 { // b, c, d
		t.Errorf("after a expires and d is inserted, Len() = %d, want 3", got)
	}
}

// TestMemoryStoreEvictionTiesGoToTheEarliestExpiry: among counters that
// hold the same share of their limits, eviction takes the one closest to
// expiry (TestMemoryStoreEvictsTheEmptiest has the shares decide).
func TestMemoryStoreEvictionTiesGoToTheEarliestExpiry(t *testing.T) {
	clk := testclock.NewMilli(t0)
	s := limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now, MaxCounters: 3, Shards: 1})
	l := perMinute(10)
	hour := limiter.Limit{Requests: 10, Window: time.Hour}
	mustApply(t, s, limiter.Hit{Key: "old", Limit: l, Hits: 4})
	clk.SetMilli(t0 + minuteMs)
	mustApply(t, s, limiter.Hit{Key: "long", Limit: hour, Hits: 4})
	mustApply(t, s, limiter.Hit{Key: "new", Limit: l, Hits: 4})

	mustApply(t, s, limiter.Hit{Key: "d", Limit: l, Hits: 4})
	if got := s.Len(); got != 3 {
		t.Fatalf("at the cap of 3, Len() = %d, want 3", got)
	}
	// old (expiring at the end of this minute) went first.
	for _, tc := range []struct {
		key  string
		l    limiter.Limit
		want uint64
	}{{"old", l, 10}, {"long", hour, 6}, {"new", l, 6}, {"d", l, 6}} {
		if got := remaining(t, s, tc.key, tc.l); got != tc.want {
			t.Errorf("remaining(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
	// Then the minute counters before the hour one.
	mustApply(t, s, limiter.Hit{Key: "e", Limit: l, Hits: 1})
	if got := remaining(t, s, "long", hour); got != 6 {
		t.Errorf("remaining(long) = %d after another eviction, want 6", got)
	}
}

func TestMemoryStoreNeverEvictsTheRequestsOwnCounters(t *testing.T) {
	clk := testclock.NewMilli(t0)
	s := limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now, MaxCounters: 1})
	l := perMinute(10)
	mustApply(t, s, limiter.Hit{Key: "a", Limit: l, Hits: 1}, limiter.Hit{Key: "b", Limit: l, Hits: 1}, limiter.Hit{Key: "c", Limit: l, Hits: 1})
	if got := s.Len(); got != 3 {
		t.Fatalf("one request with 3 new counters at a cap of 1: Len() = %d, want 3", got)
	}
	for _, k := range []string{"a", "b", "c"} {
		if got := remaining(t, s, k, l); got != 9 {
			t.Errorf("remaining(%q) = %d, want 9", k, got)
		}
	}
	mustApply(t, s, limiter.Hit{Key: "d", Limit: l, Hits: 1})
	if got := s.Len(); got != 1 {
		t.Errorf("the next insert evicts back under the cap: Len() = %d, want 1", got)
	}
}

func TestMemoryStoreStaysUnderMaxCounters(t *testing.T) {
	for _, tc := range []struct{ maxCounters, shards int }{{1, 0}, {3, 0}, {3, 64}, {100, 7}, {1000, 0}, {5000, 4096}} {
		clk := testclock.NewMilli(t0)
		s := limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now, MaxCounters: tc.maxCounters, Shards: tc.shards})
		for i := range 3 * tc.maxCounters {
			mustApply(t, s, limiter.Hit{Key: strconv.Itoa(i), Limit: perMinute(10), Hits: 1})
			if i%(1+tc.maxCounters/20) != 0 {
				continue // Len locks every shard: check at 20 points
			}
			if got := s.Len(); got > tc.maxCounters {
				t.Fatalf("MaxCounters %d, Shards %d: after %d keys Len() = %d", tc.maxCounters, tc.shards, i+1, got)
			}
		}
		if got := s.Len(); got > tc.maxCounters {
			t.Fatalf("MaxCounters %d, Shards %d: Len() = %d at the end", tc.maxCounters, tc.shards, got)
		}
	}
}

func TestMemoryStoreClockNeverGoesBack(t *testing.T) {
	clk := testclock.NewMilli(t0 + 1000)
	s := limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now})
	sec := limiter.Limit{Requests: 1, Window: time.Second}
	mustApply(t, s, limiter.Hit{Key: "a", Limit: sec, Hits: 1})
	clk.SetMilli(t0 + 999) // the wall clock steps back into the previous window
	if res := mustApply(t, s, limiter.Hit{Key: "a", Limit: sec, Hits: 1}); res[0].Allowed {
		t.Errorf("after the clock stepped back, a full counter admitted: %+v", res[0])
	}
}

func TestMemoryStoreErrors(t *testing.T) {
	s := limiter.NewMemoryStore(limiter.MemoryOptions{Now: testclock.NewMilli(t0).Now})
	l := perMinute(1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Apply(ctx, []limiter.Hit{{Key: "a", Limit: l, Hits: 1}}); !errors.Is(err, context.Canceled) {
		t.Errorf("Apply with a canceled context: error %v, want context.Canceled", err)
	}
	_, err := s.Apply(context.Background(), []limiter.Hit{{Key: "a", Limit: l, Hits: 1}, {Key: "b", Hits: 1}})
	if err == nil || errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Errorf("Apply with a zero window: error %v, want an error that is not ErrStoreUnavailable", err)
	}
	if got := remaining(t, s, "a", l); got != 1 {
		t.Errorf("after failed Applies, remaining(a) = %d, want 1", got)
	}
}

// badStore returns no Results.
type badStore struct{}

func (badStore) Apply(context.Context, []limiter.Hit) ([]limiter.Result, error) { return nil, nil }

func TestAllow(t *testing.T) {
	s := limiter.NewMemoryStore(limiter.MemoryOptions{Now: testclock.NewMilli(t0).Now})
	l := perMinute(2)
	for i, want := range []bool{true, true, false} {
		res, err := limiter.Allow(context.Background(), s, "k", l)
		if err != nil || res.Allowed != want {
			t.Errorf("Allow #%d = %+v, %v, want Allowed %v", i+1, res, err, want)
		}
	}
	if _, err := limiter.Allow(context.Background(), s, "k", limiter.Limit{}); err == nil {
		t.Errorf("Allow with a zero Limit: no error")
	}
	if _, err := limiter.Allow(context.Background(), badStore{}, "k", l); !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Errorf("Allow on a store returning no Result: error %v, want ErrStoreUnavailable", err)
	}
}

func ExampleAllow() {
	store := limiter.NewMemoryStore(limiter.MemoryOptions{})
	perSecond := limiter.Limit{Requests: 2, Window: time.Second}
	for range 3 {
		res, err := limiter.Allow(context.Background(), store, "client-42", perSecond)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(res.Allowed)
	}
	// Output:
	// true
	// true
	// false
}

func BenchmarkMemoryStoreApply(b *testing.B) {
	ctx := context.Background()
	l := limiter.Limit{Requests: 1 << 40, Window: time.Minute}
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = fmt.Sprintf("domain|remote_address|10.%d.%d.%d", i>>16, (i>>8)&255, i&255)
	}
	b.Run("single key", func(b *testing.B) {
		s := limiter.NewMemoryStore(limiter.MemoryOptions{})
		hits := []limiter.Hit{{Key: keys[0], Limit: l, Hits: 1}}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Apply(ctx, hits); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("many keys", func(b *testing.B) {
		s := limiter.NewMemoryStore(limiter.MemoryOptions{})
		hits := []limiter.Hit{{Limit: l, Hits: 1}}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			hits[0].Key = keys[i%len(keys)]
			i++
			if _, err := s.Apply(ctx, hits); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("4 hits per request", func(b *testing.B) {
		s := limiter.NewMemoryStore(limiter.MemoryOptions{})
		hits := make([]limiter.Hit, 4)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			for j := range hits {
				hits[j] = limiter.Hit{Key: keys[(i+j*4099)%len(keys)], Limit: l, Hits: 1}
			}
			i++
			if _, err := s.Apply(ctx, hits); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(hits)*b.N)/b.Elapsed().Seconds(), "hits/s")
	})
	b.Run("parallel single key", func(b *testing.B) {
		s := limiter.NewMemoryStore(limiter.MemoryOptions{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			hits := []limiter.Hit{{Key: keys[0], Limit: l, Hits: 1}}
			for pb.Next() {
				if _, err := s.Apply(ctx, hits); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("parallel many keys", func(b *testing.B) {
		s := limiter.NewMemoryStore(limiter.MemoryOptions{})
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			hits := []limiter.Hit{{Limit: l, Hits: 1}}
			i := int(next.Add(7919))
			for pb.Next() {
				hits[0].Key = keys[i%len(keys)]
				i++
				if _, err := s.Apply(ctx, hits); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "hits/s")
	})
}

// TestMemoryStoreMixedClockReadings: the store measures elapsed time with
// Time.Sub, so times with monotonic readings (time.Now's) and without (a
// fake clock's) both work. A real wall-clock step cannot be staged in a test:
// Sub ignoring it for monotonic readings is the time package's contract.
func TestMemoryStoreMixedClockReadings(t *testing.T) {
	base := time.Now()
	var elapsed atomic.Int64
	var wallStep atomic.Int64
	now := func() time.Time {
		t := base.Add(time.Duration(elapsed.Load()))
		if step := wallStep.Load(); step != 0 {
			return t.Round(0).Add(time.Duration(step)) // no monotonic reading: as is
		}
		return t
	}
	s := limiter.NewMemoryStore(limiter.MemoryOptions{Now: now})
	l := limiter.Limit{Requests: 1, Window: time.Hour}
	mustApply(t, s, limiter.Hit{Key: "k", Limit: l, Hits: 1})
	res := mustApply(t, s, limiter.Hit{Key: "k", Limit: l, Hits: 1})
	if res[0].Allowed {
		t.Fatalf("second hit on 1/h = %+v, want denied", res[0])
	}
	// The retry time is measured on the elapsed time, whatever the wall says.
	elapsed.Store(int64(res[0].RetryAfter))
	if got := mustApply(t, s, limiter.Hit{Key: "k", Limit: l, Hits: 1}); !got[0].Allowed {
		t.Errorf("after RetryAfter of monotonic time: %+v, want Allowed", got[0])
	}
	// A clock without monotonic readings is taken as is (here: 2 h on).
	wallStep.Store(int64(2 * time.Hour))
	if got := mustApply(t, s, limiter.Hit{Key: "k", Limit: l, Hits: 1}); !got[0].Allowed {
		t.Errorf("2 hours on by the wall clock: %+v, want Allowed", got[0])
	}
}

func TestMemoryStoreIgnoresPassedDeadline(t *testing.T) {
	s := limiter.NewMemoryStore(limiter.MemoryOptions{})
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	l := limiter.Limit{Requests: 1, Window: time.Minute}
	if r, err := s.Apply(ctx, []limiter.Hit{{Key: "a", Limit: l, Hits: 1}}); err != nil || !r[0].Allowed {
		t.Errorf("Apply with a passed deadline = %v, %v; want an admitted hit", r, err)
	}
}
