package limiter_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestMemoryStoreFloodKeepsHotKey: a flood of new keys does not evict a hot
// one. A 50/minute key hit every 20 ms was once admitted 277 and 624 times in
// ~16 s while 2M distinct keys flooded the in-memory store, since eviction
// took the counter closest to expiry, which a denied key (never rewritten)
// becomes at each window boundary. Here 2M distinct keys (64 per request, each under
// 1000 a minute) flood a store capped at 64Ki counters while the hot key is
// hit every 20 ms for 16 s of the test clock, across a minute boundary: it
// must be admitted exactly as often as on a store without the flood, which is
// at most 1.1x its limit. A -race build, ten times slower, floods 200k keys
// into a store capped at 4Ki counters instead: as many keys per place.
func TestMemoryStoreFloodKeepsHotKey(t *testing.T) {
	const (
		perReq   = 64
		hotEvery = 20 * time.Millisecond
		run      = 16 * time.Second
	)
	keys, maxCounters := 2_000_000, 1<<16
	if raceEnabled {
		keys, maxCounters = 200_000, 1<<12
	}
	clk := testclock.NewMilli(t0 - 13_000) // the minute boundary 13 s in
	flooded := limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now, MaxCounters: maxCounters})
	control := limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now})
	hotLimit := perMinute(50)
	hot := []limiter.Hit{{Key: "hot", Limit: hotLimit, Hits: 1}}
	floodLimit := perMinute(1000)
	hits := make([]limiter.Hit, perReq)

	requests := keys / perReq
	hotHits := int(run / hotEvery)
	var admitted, admittedControl int
	next := 0
	for h := range hotHits {
		for ; next < requests*(h+1)/hotHits; next++ {
			for i := range hits {
				hits[i] = limiter.Hit{Key: "flood" + strconv.Itoa(next*perReq+i), Limit: floodLimit, Hits: 1}
			}
			mustApply(t, flooded, hits...)
		}
		if mustApply(t, flooded, hot...)[0].Allowed {
			admitted++
		}
		if mustApply(t, control, hot...)[0].Allowed {
			admittedControl++
		}
		clk.Advance(hotEvery)
	}
	if n := flooded.Len(); n > maxCounters {
		t.Errorf("Len() = %d over the cap of %d", n, maxCounters)
	}
	t.Logf("hot key: %d admitted with the flood, %d without", admitted, admittedControl)
	if admitted != admittedControl || float64(admitted) > 1.1*float64(hotLimit.Requests) {
		t.Errorf("hot key under %d a minute admitted %d times with %d distinct keys flooding, %d without; want the same, at most 1.1x the limit",
			hotLimit.Requests, admitted, keys, admittedControl)
	}
}

// TestMemoryStoreEvictsTheEmptiest: at the cap, a new counter makes room by
// forgetting the counter whose loss admits least: below their limits, the
// one holding the smallest share of its limit, whatever its expiry; a
// counter at its limit only when no counter is below its own. A new counter
// lighter than every candidate is itself not stored.
func TestMemoryStoreEvictsTheEmptiest(t *testing.T) {
	clk := testclock.NewMilli(t0)
	s := limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now, MaxCounters: 3, Shards: 1})
	ten := perMinute(10)
	hour := limiter.Limit{Requests: 10, Window: time.Hour}
	mustApply(t, s, limiter.Hit{Key: "full", Limit: ten, Hits: 10})  // at its limit, expires first
	mustApply(t, s, limiter.Hit{Key: "half", Limit: hour, Hits: 5})  // 50%, expires last
	mustApply(t, s, limiter.Hit{Key: "tenth", Limit: hour, Hits: 1}) // 10%, expires last

	// A new counter at 20% forgets tenth (10%), not full (closest to
	// expiry) nor half.
	mustApply(t, s, limiter.Hit{Key: "fifth", Limit: ten, Hits: 2})
	want := map[string]uint64{"full": 0, "half": 5, "tenth": 10, "fifth": 8}
	check := func(when string) {
		t.Helper()
		for key, r := range want {
			l := ten
			if key == "half" || key == "tenth" {
				l = hour
			}
			if got := remaining(t, s, key, l); got != r {
				t.Errorf("%s: remaining(%q) = %d, want %d", when, key, got, r)
			}
		}
	}
	check("after fifth")

	// A new counter at 10% is lighter than all three: it is not stored.
	mustApply(t, s, limiter.Hit{Key: "light", Limit: ten, Hits: 1})
	want["light"] = 10
	check("after light")

	// Counters at their limit: full stays while any counter is below its
	// limit; a new counter at its limit (1 of 1) takes the place of the
	// lightest below theirs (fifth, 20%).
	one := limiter.Limit{Requests: 1, Window: time.Minute}
	mustApply(t, s, limiter.Hit{Key: "one", Limit: one, Hits: 1})
	delete(want, "light")
	want["fifth"] = 10
	check("after one")
	if got := remaining(t, s, "one", one); got != 0 {
		t.Errorf("remaining(one) = %d, want 0", got)
	}
	// Once every counter is at its limit, the one holding fewest hits goes:
	// one (1 hit) before full (10 hits).
	mustApply(t, s, limiter.Hit{Key: "half", Limit: hour, Hits: 5}) // half is full now
	mustApply(t, s, limiter.Hit{Key: "two", Limit: limiter.Limit{Requests: 2, Window: time.Minute}, Hits: 2})
	if got := remaining(t, s, "one", one); got != 1 {
		t.Errorf("remaining(one) = %d after a new full counter, want 1 (evicted)", got)
	}
	if got := remaining(t, s, "full", ten); got != 0 {
		t.Errorf("remaining(full) = %d, want 0 (kept)", got)
	}
}

// TestMemoryStoreNeverEvictsAFullCounterForAnEmptyOne fills a shard with
// counters at their limit and one below it, then inserts many new counters
// at their limit: only the one below its limit may go (the search goes past
// the sample for it); then, with all at their limit, new counters lighter
// than them are not stored.
func TestMemoryStoreNeverEvictsAFullCounterForAnEmptyOne(t *testing.T) {
	clk := testclock.NewMilli(t0)
	const n = 1000
	s := limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now, MaxCounters: n, Shards: 1})
	ten := perMinute(10)
	for i := range n - 1 {
		mustApply(t, s, limiter.Hit{Key: "full" + strconv.Itoa(i), Limit: ten, Hits: 10})
	}
	mustApply(t, s, limiter.Hit{Key: "low", Limit: ten, Hits: 1})
	// A new counter holding 10 of 10: low (1 of 10) must be the one to go,
	// found beyond the 16 sampled.
	mustApply(t, s, limiter.Hit{Key: "new", Limit: ten, Hits: 10})
	if got := remaining(t, s, "low", ten); got != 10 {
		t.Errorf("remaining(low) = %d, want 10 (evicted)", got)
	}
	for i := range n - 1 {
		if got := remaining(t, s, "full"+strconv.Itoa(i), ten); got != 0 {
			t.Fatalf("remaining(full%d) = %d, want 0: a counter at its limit was evicted while one below its limit was stored", i, got)
		}
	}
	// New counters below their limit never displace those at it.
	for i := range 100 {
		mustApply(t, s, limiter.Hit{Key: "light" + strconv.Itoa(i), Limit: ten, Hits: 9})
	}
	for i := range n - 1 {
		if got := remaining(t, s, "full"+strconv.Itoa(i), ten); got != 0 {
			t.Fatalf("remaining(full%d) = %d after new counters below their limit, want 0", i, got)
		}
	}
	if got := s.Len(); got != n {
		t.Errorf("Len() = %d, want %d", got, n)
	}
}

// TestMemoryStoreCounterSize holds DefaultMaxCounters' doc to the heap a
// counter costs (it once said 100 bytes, a counter took 190 to
// 360): 64Ki counters of one sub-window and 16-byte keys, counted apart from
// the keys, take about 210 bytes each, at most 250 (the map's growth steps
// vary it).
func TestMemoryStoreCounterSize(t *testing.T) {
	const n = 1 << 16
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%016d", i)
	}
	clk := testclock.NewMilli(t0)
	var before, after runtime.MemStats
	runtime.GC() // twice: what an earlier test left may need two cycles
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now, MaxCounters: n})
	for _, k := range keys {
		mustApply(t, s, limiter.Hit{Key: k, Limit: perMinute(1000), Hits: 1})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(s.Len())
	t.Logf("%d counters: %.0f bytes of heap each, keys apart", s.Len(), per)
	if per < 0 || per > 250 {
		t.Errorf("a counter costs %.0f bytes of heap, keys apart; DefaultMaxCounters' doc says about 210", per)
	}
	runtime.KeepAlive(keys)
	runtime.KeepAlive(s)
}

// TestEvictionReadsOfEveryAlgorithm holds every algorithm to what eviction
// relies on (see the algorithm interface's report): on random states, the
// remaining is at most the capacity and never shrinks as time passes with no
// traffic (a counter left alone never gets fuller), so what a counter held
// when written bounds what it holds later.
func TestEvictionReadsOfEveryAlgorithm(t *testing.T) {
	forEachAlgorithm(t, func(t *testing.T, alg limiter.Algorithm) {
		r := rand.New(rand.NewPCG(7, uint64(alg)))
		for range 300 {
			c := randomAlgCase(t, r, alg)
			w := c.limit.Window.Milliseconds()
			later := []int64{0, 1, w / 3, w/2 + 1, w, 2 * w, 3 * w}
			slices.Sort(later) // with a 1 ms window, w/3 is 0
			var last uint64
			for i, d := range later {
				rem, capacity := limiter.EvictionRemaining(c.state, c.now+d, c.limit)
				if rem > capacity {
					t.Fatalf("%v at +%d ms: remaining %d over the capacity %d", c, d, rem, capacity)
				}
				if i > 0 && rem < last {
					t.Fatalf("%v: remaining %d at +%d ms, less than %d earlier: a counter left alone got fuller", c, rem, d, last)
				}
				last = rem
			}
		}
	})
}
