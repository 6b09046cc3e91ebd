package limiter_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// tallyStore counts the calls and hits that reach a Store, and fails
// them while fail is set.
type tallyStore struct {
	limiter.Store
	calls, hits atomic.Int64
	fail        atomic.Bool
}

func (s *tallyStore) Apply(ctx context.Context, hits []limiter.Hit) ([]limiter.Result, error) {
	s.calls.Add(1)
	s.hits.Add(int64(len(hits)))
	if s.fail.Load() {
		return nil, limiter.ErrStoreUnavailable
	}
	return s.Store.Apply(ctx, hits)
}

// fleet is n Caches on one memory store, as n instances on one Redis.
type fleet struct {
	clock  *testclock.Clock
	shared *tallyStore
	caches []*limiter.Cache
}

func newFleet(n int) *fleet {
	f := &fleet{clock: testclock.New(time.UnixMilli(1_700_000_040_000))}
	f.shared = &tallyStore{Store: limiter.NewMemoryStore(limiter.MemoryOptions{Now: f.clock.Now})}
	for range n {
		f.caches = append(f.caches, limiter.NewCache(f.shared, limiter.CacheOptions{Now: f.clock.Now,
			Instances: func() int { return n }}))
	}
	return f
}

// offer sends each instance perTick single hits every 10 ms for d, syncing
// every 100 ms, and returns how many were admitted.
func (f *fleet) offer(t *testing.T, hit limiter.Hit, perTick int, d time.Duration) (admitted int) {
	t.Helper()
	ctx := context.Background()
	for tick := range int(d / (10 * time.Millisecond)) {
		for _, c := range f.caches {
			for range perTick {
				res, err := c.Apply(ctx, []limiter.Hit{hit})
				if err != nil {
					t.Fatal(err)
				}
				if res[0].Allowed {
					admitted++
				}
			}
		}
		f.clock.Advance(10 * time.Millisecond)
		if tick%10 == 9 {
			for _, c := range f.caches {
				if err := c.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return admitted
}

func minuteLimit(requests uint64, cache bool) limiter.Hit {
	return limiter.Hit{Key: "k", Hits: 1, Limit: limiter.Limit{Requests: requests, Window: time.Minute,
		Algorithm: limiter.FixedWindow, Cache: cache}}
}

// TestCacheExactWhenOff: without Limit.Cache every hit reaches the store,
// and three instances admit exactly the limit.
func TestCacheExactWhenOff(t *testing.T) {
	f := newFleet(3)
	got := f.offer(t, minuteLimit(1000, false), 3, 2*time.Second)
	if got != 1000 {
		t.Errorf("admitted %d, want 1000", got)
	}
	if calls := f.shared.calls.Load(); calls != 3*3*200 {
		t.Errorf("store calls = %d, want %d (one per decision)", calls, 3*3*200)
	}
}

// TestCacheBoundedOverAdmission: three instances at 300 hits a second each
// on a limit of 1000 a minute admit at most the limit plus what the others
// add in one span the margin does not cover, and far fewer decisions reach
// the store than without the cache.
func TestCacheBoundedOverAdmission(t *testing.T) {
	f := newFleet(3)
	got := f.offer(t, minuteLimit(1000, true), 3, 10*time.Second)
	// The bound: the others' rate (600 a second) over one Period (100 ms).
	if got < 1000 || got > 1000+60 {
		t.Errorf("admitted %d, want 1000 to 1060", got)
	}
	st := f.caches[0].Stats()
	t.Logf("admitted %d, stats %+v, store calls %d", got, st, f.shared.calls.Load())
	if st.Decided == 0 || st.Near == 0 || st.Syncs == 0 || st.SyncedHits == 0 {
		t.Errorf("stats = %+v, want every count above 0", st)
	}
	// What the store counted is what was admitted: every pending hit was
	// added.
	res, err := f.shared.Store.Apply(context.Background(), []limiter.Hit{{Key: "k", Limit: minuteLimit(1000, false).Limit}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Remaining != 0 {
		t.Errorf("store remaining = %d, want 0", res[0].Remaining)
	}
}

// TestCacheWarmSavesCalls: far from the limit, a warm counter is decided
// in process: one instance at 100 hits a second costs about one sync per
// period, not a call per decision, and the store counts every admitted hit.
func TestCacheWarmSavesCalls(t *testing.T) {
	f := newFleet(1)
	got := f.offer(t, minuteLimit(100000, true), 1, 5*time.Second)
	if got != 500 {
		t.Fatalf("admitted %d, want 500", got)
	}
	t.Logf("store calls %d", f.shared.calls.Load())
	if calls := f.shared.calls.Load(); calls > 100 {
		t.Errorf("store calls = %d for 500 decisions, want at most 100", calls)
	}
	res, err := f.shared.Store.Apply(context.Background(), []limiter.Hit{{Key: "k", Limit: minuteLimit(100000, false).Limit}})
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(100000 - 500); res[0].Remaining != want {
		t.Errorf("store remaining = %d, want %d", res[0].Remaining, want)
	}
}

// TestCacheReloadAppliesAtOnce: a lower limit for a warm counter is
// compared with its shared count at the next decision, which the store
// then denies.
func TestCacheReloadAppliesAtOnce(t *testing.T) {
	f := newFleet(1)
	f.offer(t, minuteLimit(100000, true), 1, time.Second)
	res, err := f.caches[0].Apply(context.Background(), []limiter.Hit{minuteLimit(50, true)})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Allowed || !res[0].OverLimit {
		t.Errorf("after the limit fell under the count: %+v, want over limit", res[0])
	}
}

// TestCacheFailedSyncKeepsPending: hits a failed sync could not add are
// added by the next.
func TestCacheFailedSyncKeepsPending(t *testing.T) {
	f := newFleet(1)
	f.offer(t, minuteLimit(100000, true), 1, time.Second)
	c := f.caches[0]
	f.clock.Advance(10 * time.Millisecond)
	before := c.Stats().Decided
	if _, err := c.Apply(context.Background(), []limiter.Hit{minuteLimit(100000, true)}); err != nil {
		t.Fatal(err)
	}
	if c.Stats().Decided != before+1 {
		t.Fatal("a warm hit was not decided in process")
	}
	f.shared.fail.Store(true)
	if err := c.Flush(context.Background()); !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Fatalf("Flush with the store failing = %v, want ErrStoreUnavailable", err)
	}
	f.shared.fail.Store(false)
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err := f.shared.Store.Apply(context.Background(), []limiter.Hit{{Key: "k", Limit: minuteLimit(100000, false).Limit}})
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(100000 - 101); res[0].Remaining != want {
		t.Errorf("store remaining = %d, want %d", res[0].Remaining, want)
	}
}

// TestLocalShare: each instance's share of a limit is the limit divided by
// the instances, rounded up.
func TestLocalShare(t *testing.T) {
	clock := testclock.New(time.UnixMilli(1_700_000_040_000))
	for _, tc := range []struct {
		name      string
		instances int
		limit     uint64
		want      int
	}{
		{"alone", 1, 10, 10},
		{"three", 3, 30, 10},
		{"rounded up", 3, 10, 4},
		{"never below one", 5, 1, 1},
		{"none counted as one", 0, 10, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := limiter.NewLocal(limiter.LocalOptions{Now: clock.Now, Instances: func() int { return tc.instances }})
			got := 0
			for range 2 * tc.limit {
				r, err := limiter.Allow(context.Background(), l, "k", limiter.Limit{Requests: tc.limit, Window: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				if r.Allowed {
					got++
				}
			}
			if got != tc.want {
				t.Errorf("admitted %d of %d, want %d", got, 2*tc.limit, tc.want)
			}
		})
	}
}

// TestCacheConcurrentKeepsEveryHit: decisions from many goroutines while
// Run syncs, then Run's final flush: the store holds exactly the hits
// admitted.
func TestCacheConcurrentKeepsEveryHit(t *testing.T) {
	mem := limiter.NewMemoryStore(limiter.MemoryOptions{})
	c := limiter.NewCache(mem, limiter.CacheOptions{Period: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx, time.Second); close(done) }()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				h := minuteLimit(1_000_000, true)
				h.Key = string(rune('a' + (g+i)%4))
				res, err := c.Apply(context.Background(), []limiter.Hit{h})
				if err != nil {
					t.Error(err)
					return
				}
				if res[0].Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	cancel()
	<-done
	var counted uint64
	for k := range 4 {
		h := minuteLimit(1_000_000, false)
		h.Key, h.Hits = string(rune('a'+k)), 0
		res, err := mem.Apply(context.Background(), []limiter.Hit{h})
		if err != nil {
			t.Fatal(err)
		}
		counted += 1_000_000 - res[0].Remaining
	}
	if counted != uint64(admitted.Load()) {
		t.Errorf("the store counts %d hits, %d admitted", counted, admitted.Load())
	}
	if c.Stats().Decided == 0 {
		t.Error("nothing decided in process")
	}
}
