package limiter_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// countingStore counts the calls that reach the wrapped Store.
type countingStore struct {
	limiter.Store
	calls atomic.Int64
}

func (s *countingStore) Apply(ctx context.Context, hits []limiter.Hit) ([]limiter.Result, error) {
	s.calls.Add(1)
	return s.Store.Apply(ctx, hits)
}

// TestOverLimitCacheIsExact replays random traffic through a cached and an
// uncached store on one clock: every admission decision must be the same.
// The "flags" runs mix in quota and shadow hits.
func TestOverLimitCacheIsExact(t *testing.T) {
	for seed := range uint64(5) {
		t.Run("seed"+string(rune('0'+seed)), func(t *testing.T) { overLimitCacheExact(t, seed, false) })
		t.Run("flags-seed"+string(rune('0'+seed)), func(t *testing.T) { overLimitCacheExact(t, seed, true) })
	}
}

func overLimitCacheExact(t *testing.T, seed uint64, flags bool) {
	clk := testclock.New(time.Unix(1_800_000_000, 0))
	plain := limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now})
	inner := &countingStore{Store: limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now})}
	cached := limiter.NewOverLimitCache(inner, limiter.OverLimitOptions{Now: clk.Now})
	rng := rand.New(rand.NewPCG(seed, 2))
	limits := []limiter.Limit{{Requests: 5, Window: time.Second}, {Requests: 20, Window: time.Minute}, {Requests: 0, Window: time.Second}}
	ctx := context.Background()
	const steps = 20000
	for i := range steps {
		var hits []limiter.Hit
		for range 1 + rng.IntN(2) {
			h := limiter.Hit{
				Key:   string(rune('a' + rng.IntN(3))),
				Limit: limits[rng.IntN(len(limits))],
				Hits:  uint64(rng.IntN(3)),
			}
			if flags {
				h.Quota = rng.IntN(2) == 0
				h.Shadow = rng.IntN(6) == 0
			}
			hits = append(hits, h)
		}
		want, err := plain.Apply(ctx, hits)
		if err != nil {
			t.Fatal(err)
		}
		got, err := cached.Apply(ctx, hits)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := admitted(got), admitted(want); a != b {
			t.Fatalf("step %d %+v: cached admitted=%v, store admitted=%v", i, hits, a, b)
		}
		for j := range hits {
			// A hit the cache reports denied is denied; one it reports
			// allowed in a denied request may since have been filled by
			// other traffic (its Remaining may be stale, as documented).
			if !got[j].Allowed && want[j].Allowed {
				t.Fatalf("step %d hit %d %+v: cached denies, store allows", i, j, hits[j])
			}
			if got[j].OverLimit && !want[j].OverLimit {
				t.Fatalf("step %d hit %d %+v: cached is over limit, store is not", i, j, hits[j])
			}
			if got[j].ExceedsLimit != want[j].ExceedsLimit {
				t.Fatalf("step %d hit %d: cached ExceedsLimit=%v, store %v", i, j, got[j].ExceedsLimit, want[j].ExceedsLimit)
			}
		}
		clk.Advance(time.Duration(rng.IntN(150)) * time.Millisecond)
	}
	if h := cached.Hits(); h == 0 || inner.calls.Load()+h != steps {
		t.Errorf("cache answered %d of %d, store %d", h, steps, inner.calls.Load())
	}
	t.Logf("cache answered %d of %d calls", cached.Hits(), steps)
}

// admitted reports whether a request was admitted: no Result is OverLimit.
func admitted(rs []limiter.Result) bool {
	for _, r := range rs {
		if r.OverLimit {
			return false
		}
	}
	return true
}

// TestOverLimitCacheAbusiveClient: a client that retries a denied request
// costs no store call until Retry-After.
func TestOverLimitCacheAbusiveClient(t *testing.T) {
	clk := testclock.New(time.Unix(1_800_000_000, 0))
	inner := &countingStore{Store: limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now})}
	c := limiter.NewOverLimitCache(inner, limiter.OverLimitOptions{Now: clk.Now})
	hit := []limiter.Hit{{Key: "k", Limit: limiter.Limit{Requests: 10, Window: time.Minute}, Hits: 1}}
	for range 10 {
		c.Apply(context.Background(), hit)
	}
	r, _ := c.Apply(context.Background(), hit) // denied, cached
	for range 1000 {
		c.Apply(context.Background(), hit)
	}
	if n := inner.calls.Load(); n != 11 {
		t.Errorf("store calls = %d, want 11", n)
	}
	clk.Advance(r[0].RetryAfter)
	if r, _ := c.Apply(context.Background(), hit); !r[0].Allowed {
		t.Errorf("after RetryAfter: %+v, want allowed", r[0])
	}
	// A refund of another counter keeps the cached denial of this one.
	for range 20 {
		c.Apply(context.Background(), hit)
	}
	before := inner.calls.Load()
	c.Apply(context.Background(), []limiter.Hit{{Key: "other", Limit: hit[0].Limit, Hits: 1, Refund: true}})
	c.Apply(context.Background(), hit)
	if n := inner.calls.Load() - before; n != 1 {
		t.Errorf("after a refund of another counter: %d store calls, want 1 (the refund only)", n)
	}
	// A refund of this counter drops it.
	for range 3 {
		c.Apply(context.Background(), hit)
	}
	c.Apply(context.Background(), []limiter.Hit{{Key: "k", Limit: hit[0].Limit, Hits: 5, Refund: true}})
	if r, _ := c.Apply(context.Background(), hit); !r[0].Allowed {
		t.Errorf("after a refund: %+v, want allowed", r[0])
	}
}

// TestOverLimitCacheQuotaDenial: a request that its quota group denies is
// answered from the cache until one quota hit fits again, and then by the
// store, which admits it.
func TestOverLimitCacheQuotaDenial(t *testing.T) {
	clk := testclock.New(time.Unix(1_800_000_000, 0))
	inner := &countingStore{Store: limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now})}
	c := limiter.NewOverLimitCache(inner, limiter.OverLimitOptions{Now: clk.Now})
	ctx := context.Background()
	ten, five := limiter.Limit{Requests: 10, Window: time.Minute}, limiter.Limit{Requests: 5, Window: time.Minute}
	if _, err := c.Apply(ctx, []limiter.Hit{{Key: "a", Limit: ten, Hits: 10}, {Key: "b", Limit: five, Hits: 5}}); err != nil {
		t.Fatal(err)
	}
	req := []limiter.Hit{{Key: "a", Limit: ten, Hits: 1, Quota: true}, {Key: "b", Limit: five, Hits: 1, Quota: true}}
	first, err := c.Apply(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// a fits again 66 s on, b 72 s on: the group admits after 66 s.
	want := []limiter.Result{
		{RetryAfter: 66 * time.Second, ResetAfter: 2 * time.Minute, OverLimit: true},
		{RetryAfter: 72 * time.Second, ResetAfter: 2 * time.Minute, OverLimit: true},
	}
	if !slices.Equal(first, want) {
		t.Fatalf("quota-denied request = %+v, want %+v", first, want)
	}
	for range 100 {
		if r, _ := c.Apply(ctx, req); admitted(r) {
			t.Fatalf("cached quota denial admitted: %+v", r)
		}
	}
	clk.Advance(66*time.Second - time.Millisecond)
	if r, _ := c.Apply(ctx, req); admitted(r) || !r[0].OverLimit || r[0].RetryAfter != time.Millisecond {
		t.Fatalf("1 ms before a fits: %+v, want denied with RetryAfter 1ms", r)
	}
	if n := inner.calls.Load(); n != 2 {
		t.Errorf("store calls = %d, want 2 (the fill and the first denial)", n)
	}
	clk.Advance(time.Millisecond)
	r, err := c.Apply(ctx, req)
	if err != nil || !admitted(r) || !r[0].Allowed || r[1].Allowed {
		t.Errorf("when a fits again: %+v, %v; want admitted with a Allowed, b not", r, err)
	}
	if n := inner.calls.Load(); n != 3 {
		t.Errorf("store calls = %d, want 3", n)
	}
}

// TestOverLimitCacheCountsDenied: a request with a CountDenied hit always
// reaches the store, even when it repeats a denial that holds, so that each
// of its counters takes its hits as envoyproxy/ratelimit counts them (its
// local cache skips only the key over the limit).
func TestOverLimitCacheCountsDenied(t *testing.T) {
	clk := testclock.New(time.Unix(1_800_000_000, 0))
	inner := &countingStore{Store: limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now})}
	cached := limiter.NewOverLimitCache(inner, limiter.OverLimitOptions{Now: clk.Now})
	ctx := context.Background()
	open := limiter.Limit{Requests: 20, Window: time.Minute, CountDenied: true}
	full := limiter.Limit{Requests: 0, Window: time.Hour, CountDenied: true}
	for i := range 5 {
		res, err := cached.Apply(ctx, []limiter.Hit{{Key: "key2", Limit: open, Hits: 1}, {Key: "key3", Limit: full, Hits: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if !res[0].Allowed || res[0].Remaining != uint64(19-i) || !res[1].OverLimit {
			t.Fatalf("request %d: %+v, want key2 allowed with %d remaining (its hits counted), key3 over the limit", i, res, 19-i)
		}
	}
	if n := inner.calls.Load(); n != 5 {
		t.Fatalf("%d of 5 requests reached the store, want all", n)
	}
}

// TestOverLimitCacheIgnoresSlotTokens: a request that a rate limit denies
// repeats as the same request whatever slot token its concurrency acquire
// drew (a denied request takes no slot), so the cache still answers it.
func TestOverLimitCacheIgnoresSlotTokens(t *testing.T) {
	clk := testclock.New(time.Unix(1_800_000_000, 0))
	inner := &countingStore{Store: limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now})}
	cached := limiter.NewOverLimitCache(inner, limiter.OverLimitOptions{Now: clk.Now})
	streams := limiter.Limit{Requests: 5, Window: time.Minute, Algorithm: limiter.Concurrency}
	full := limiter.Limit{Requests: 0, Window: time.Minute}
	for i := range 3 {
		res, err := cached.Apply(context.Background(), []limiter.Hit{
			{Key: "s", Limit: streams, Hits: 1, SlotToken: limiter.NewSlotToken()}, {Key: "f", Limit: full, Hits: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if !res[0].Allowed || !res[1].OverLimit {
			t.Fatalf("request %d: %+v, want the slot allowed and the request denied by the full limit", i, res)
		}
	}
	if n := inner.calls.Load(); n != 1 {
		t.Fatalf("%d of 3 requests reached the store, want 1 (the others answered from the cache)", n)
	}
}
