// Package limitertest holds the contract suite that every limiter.Store must
// pass: TestStore. It imports only the standard library, pkg/limiter and
// internal/testclock, so pkg/redis and the in-memory store's tests can both
// run it.
package limitertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestStore runs the limiter.Store contract against stores made by newStore.
//
// Every subtest builds its own store with newStore, passing a fake clock that
// the store must use as its only time source (Now().UnixMilli(); a Redis store
// passes it to its script as the explicit now argument), and moves that clock
// instead of sleeping. The clock starts at the start of an hour, between one
// and two hours after the real time, and only moves forward by at most a few
// hours, so a store that derives key expiry from either clock keeps its keys
// alive for the test.
//
// Subtests call t.Parallel and prefix every key with random bytes, so one
// Redis server can be shared by the subtests and by parallel runs of the
// suite without flushing. (The subtest of unusual keys also uses literal keys
// such as the empty string; it makes them unique with a random window.)
//
// The suite checks, with exact Result values compared against limiter.Evaluate
// run on a model of the counters and against hand-computed values: the
// sliding window decision and rollover, all or nothing across keys, shared
// increments on one counter, shadow hits, quota groups, refunds, check-only
// hits, hits over the limit, invalid limits, concurrent requests on one
// counter (exactly the limit is admitted) and across counters (atomic), and
// the independence of keys holding unusual bytes, and the classes of a pool
// (Limit.Ceiling): under overload, the top class keeps its reserve while
// the pool never passes its limit, on a rate pool and a concurrency pool,
// and on every algorithm exactly as Evaluate decides. newStore may call
// t.Fatal; it should register
// any cleanup with t.Cleanup.
func TestStore(t *testing.T, newStore func(t *testing.T, now func() time.Time) limiter.Store) {
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *env)
	}{
		{"NoHits", testNoHits},
		{"UpToTheLimit", testUpToTheLimit},
		{"RetryAfterIsExact", testRetryAfterIsExact},
		{"Rollover", testRollover},
		{"GapResets", testGapResets},
		{"AllOrNothing", testAllOrNothing},
		{"SameCounterShares", testSameCounterShares},
		{"Shadow", testShadow},
		{"QuotaGroup", testQuotaGroup},
		{"QuotaGroupDeniedByOthers", testQuotaGroupDeniedByOthers},
		{"Refund", testRefund},
		{"CheckOnly", testCheckOnly},
		{"ExceedsLimit", testExceedsLimit},
		{"InvalidLimit", testInvalidLimit},
		{"RandomSequence", testRandomSequence},
		{"ConcurrentOneCounter", testConcurrentOneCounter},
		{"ConcurrentAllOrNothing", testConcurrentAllOrNothing},
		{"UnusualKeys", testUnusualKeys},
		{"SubWindows", testSubWindows},
		{"TokenBucket", testTokenBucket},
		{"FixedWindow", testFixedWindow},
		{"CalendarAcrossDST", testCalendarAcrossDST},
		{"CalendarMonth", testCalendarMonth},
		{"SlidingLog", testSlidingLog},
		{"Concurrency", testConcurrency},
		{"AlgorithmsAreSeparateCounters", testAlgorithmsAreSeparateCounters},
		{"AllOrNothingAcrossAlgorithms", testAllOrNothingAcrossAlgorithms},
		{"RandomSequenceEveryAlgorithm", testRandomSequenceEveryAlgorithm},
		{"Overdraw", testOverdraw},
		{"CountDenied", testCountDenied},
		{"PoolClassesUnderOverload", testPoolClassesUnderOverload},
		{"PoolClassesConcurrency", testPoolClassesConcurrency},
		{"PoolClassesEveryAlgorithm", testPoolClassesEveryAlgorithm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newEnv(t, newStore))
		})
	}
}

// env is one subtest's store, clock, key prefix and model of the counters.
type env struct {
	t      *testing.T
	clk    *testclock.Clock
	store  limiter.Store
	prefix string

	mu       sync.Mutex
	counters map[counterID]limiter.State

	// followReal (set by the random sequences) makes apply keep the clock
	// at least lead ahead of real time (see keepUp).
	followReal bool
	lead       time.Duration
}

type counterID struct {
	key    string
	window time.Duration
	alg    limiter.Algorithm
	sub    int64
	cal    limiter.Calendar
}

func newEnv(t *testing.T, newStore func(t *testing.T, now func() time.Time) limiter.Store) *env {
	hour := time.Hour.Milliseconds()
	clk := testclock.NewMilli((time.Now().UnixMilli()/hour + 2) * hour)
	e := &env{
		t:        t,
		clk:      clk,
		prefix:   fmt.Sprintf("limitertest:%016x:", rand.Uint64()),
		counters: make(map[counterID]limiter.State),
	}
	e.store = newStore(t, clk.Now)
	return e
}

func (e *env) key(s string) string { return e.prefix + s }

// apply runs hits on the store, checks the Results against the model and
// updates the model; it returns the store's Results.
func (e *env) apply(hits ...limiter.Hit) []limiter.Result {
	e.t.Helper()
	if e.followReal {
		e.keepUp()
	}
	got, err := e.store.Apply(context.Background(), hits)
	if err != nil {
		e.t.Fatalf("Apply(%s) error: %v", describe(hits), err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	states := make([]limiter.State, len(hits))
	for i, h := range hits {
		states[i] = e.counters[idOf(h)]
	}
	want, next, admitted, err := limiter.Evaluate(e.clk.Now().UnixMilli(), hits, states)
	if err != nil {
		e.t.Fatalf("limiter.Evaluate(%s) error: %v", describe(hits), err)
	}
	if !reflect.DeepEqual(got, want) {
		e.t.Fatalf("Apply(%s) = %+v, want %+v (limiter.Evaluate)", describe(hits), got, want)
	}
	for i, h := range hits {
		if admitted || overdrawn(hits, idOf(h)) {
			e.counters[idOf(h)] = next[i]
		}
	}
	return got
}

// keepUp advances the clock so that, from one apply to the next, it moves
// at least as far as real time (to the millisecond): its lead over real time
// never falls below the largest it had. A store whose counters expire in real
// time (Redis's TTLs, computed from the clock) would otherwise lose a counter
// that the clock still counts whenever real milliseconds pass with the clock
// standing still, and differ from the model for that reason alone.
func (e *env) keepUp() {
	lead := e.clk.Now().Sub(time.Now())
	if e.lead != 0 && lead < e.lead {
		step := (e.lead - lead).Truncate(time.Millisecond)
		e.clk.Advance(step)
		lead += step
	}
	e.lead = max(e.lead, lead)
}

// expect runs hits, none of them a quota hit, and checks the Results against
// hand-computed values too. A hand-computed Result leaves OverLimit unset:
// expect fills it in as "an enforced hit that is not Allowed", and apply has
// already checked it against limiter.Evaluate.
func (e *env) expect(hits []limiter.Hit, want ...limiter.Result) {
	e.t.Helper()
	for i := range want {
		if i < len(hits) {
			want[i].OverLimit = !hits[i].Shadow && !hits[i].Refund && !want[i].Allowed
		}
	}
	e.expectExact(hits, want...)
}

// expectExact is expect with OverLimit stated in want, for quota groups.
func (e *env) expectExact(hits []limiter.Hit, want ...limiter.Result) {
	e.t.Helper()
	if got := e.apply(hits...); !reflect.DeepEqual(got, want) {
		e.t.Fatalf("Apply(%s) = %+v, want %+v", describe(hits), got, want)
	}
}

func idOf(h limiter.Hit) counterID {
	return counterID{h.Key, h.Limit.Window, h.Limit.Algorithm, h.Limit.SubWindowCount(), h.Limit.Calendar}
}

func describe(hits []limiter.Hit) string {
	var b strings.Builder
	for i, h := range hits {
		if i > 0 {
			b.WriteString(", ")
		}
		k := h.Key
		if len(k) > 40 {
			k = fmt.Sprintf("%s...(%d bytes)", k[:40], len(k))
		}
		fmt.Fprintf(&b, "{%q %d/%v %v burst=%d sub=%d ceiling=%d overdraw=%v count_denied=%v hits=%d refund=%v shadow=%v quota=%v token=%d}",
			k, h.Limit.Requests, h.Limit.Window, h.Limit.Algorithm, h.Limit.Burst, h.Limit.SubWindows, h.Limit.Ceiling,
			h.Limit.Overdraw, h.Limit.CountDenied, h.Hits, h.Refund, h.Shadow, h.Quota, h.SlotToken)
	}
	return "[" + b.String() + "]"
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

func limit(n uint64, w time.Duration) limiter.Limit { return limiter.Limit{Requests: n, Window: w} }

func hit(key string, l limiter.Limit, n uint64) limiter.Hit {
	return limiter.Hit{Key: key, Limit: l, Hits: n}
}

func testNoHits(t *testing.T, e *env) {
	got, err := e.store.Apply(context.Background(), nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("Apply(nil) = %v, %v, want no results and no error", got, err)
	}
}

func testUpToTheLimit(t *testing.T, e *env) {
	l := limit(3, time.Minute)
	h := []limiter.Hit{hit(e.key("a"), l, 1)}
	e.expect(h, limiter.Result{Allowed: true, Remaining: 2, ResetAfter: ms(120_000)})
	e.expect(h, limiter.Result{Allowed: true, Remaining: 1, ResetAfter: ms(120_000)})
	e.expect(h, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(120_000)})
	// Next window at 20 s: 3*(40/60) + 1 = 3.
	e.expect(h, limiter.Result{RetryAfter: ms(80_000), ResetAfter: ms(120_000)})
	// Denied hits consume nothing, so the answer stays the same.
	e.expect(h, limiter.Result{RetryAfter: ms(80_000), ResetAfter: ms(120_000)})
}

func testRetryAfterIsExact(t *testing.T, e *env) {
	l := limit(5, 10*time.Second)
	h := []limiter.Hit{hit(e.key("a"), l, 2)}
	e.clk.Advance(ms(3_000))
	e.apply(h...)
	e.apply(h...)
	res := e.apply(h...)
	if res[0].Allowed || res[0].RetryAfter <= time.Millisecond {
		t.Fatalf("third hit of 2 on 5/10s = %+v, want denied with RetryAfter > 1ms", res[0])
	}
	e.clk.Advance(res[0].RetryAfter - time.Millisecond)
	if res := e.apply(h...); res[0].Allowed {
		t.Fatalf("1 ms before RetryAfter: %+v, want denied", res[0])
	}
	e.clk.Advance(time.Millisecond)
	if res := e.apply(h...); !res[0].Allowed {
		t.Fatalf("at RetryAfter: %+v, want Allowed", res[0])
	}
}

func testRollover(t *testing.T, e *env) {
	l := limit(10, time.Minute)
	e.expect([]limiter.Hit{hit(e.key("a"), l, 10)}, limiter.Result{Allowed: true, ResetAfter: ms(120_000)})
	// Half way into the next window the 10 weigh 5.
	e.clk.Advance(ms(90_000))
	h := []limiter.Hit{hit(e.key("a"), l, 1)}
	for i := range 5 {
		e.expect(h, limiter.Result{Allowed: true, Remaining: uint64(4 - i), ResetAfter: ms(90_000)})
	}
	// Same window at 36 s: 10*(24/60) + 5 + 1 = 10.
	e.expect(h, limiter.Result{RetryAfter: ms(6_000), ResetAfter: ms(90_000)})
	e.clk.Advance(ms(6_000))
	e.expect(h, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(84_000)})
}

func testGapResets(t *testing.T, e *env) {
	l := limit(10, time.Minute)
	h := []limiter.Hit{hit(e.key("a"), l, 10)}
	e.expect(h, limiter.Result{Allowed: true, ResetAfter: ms(120_000)})
	e.clk.Advance(ms(60_000 + 59_999))
	e.expect(h, limiter.Result{RetryAfter: ms(1), ResetAfter: ms(1)})
	e.clk.Advance(ms(1))
	e.expect(h, limiter.Result{Allowed: true, ResetAfter: ms(120_000)})
	e.clk.Advance(5 * time.Minute)
	e.expect(h, limiter.Result{Allowed: true, ResetAfter: ms(120_000)})
}

func testAllOrNothing(t *testing.T, e *env) {
	a, b, c := e.key("a"), e.key("b"), e.key("c")
	ten, two := limit(10, time.Minute), limit(2, time.Minute)
	perSecond := limit(10, time.Second)
	e.apply(hit(b, two, 2))
	req := []limiter.Hit{hit(a, ten, 1), hit(b, two, 1), hit(c, perSecond, 1), hit(a, perSecond, 1)}
	for range 3 {
		e.expect(req,
			limiter.Result{Allowed: true, Remaining: 10},
			limiter.Result{RetryAfter: ms(90_000), ResetAfter: ms(120_000)},
			limiter.Result{Allowed: true, Remaining: 10},
			limiter.Result{Allowed: true, Remaining: 10},
		)
	}
	// Without b the same counters consume.
	e.expect([]limiter.Hit{req[0], req[2], req[3]},
		limiter.Result{Allowed: true, Remaining: 9, ResetAfter: ms(120_000)},
		limiter.Result{Allowed: true, Remaining: 9, ResetAfter: ms(2_000)},
		limiter.Result{Allowed: true, Remaining: 9, ResetAfter: ms(2_000)},
	)
}

func testSameCounterShares(t *testing.T, e *env) {
	k := e.key("k")
	l := limit(10, time.Minute)
	e.expect([]limiter.Hit{hit(k, l, 2), hit(k, l, 5), hit(k, limit(10, time.Second), 3)},
		limiter.Result{Allowed: true, Remaining: 5, ResetAfter: ms(120_000)},
		limiter.Result{Allowed: true, Remaining: 5, ResetAfter: ms(120_000)},
		limiter.Result{Allowed: true, Remaining: 7, ResetAfter: ms(2_000)},
	)
	// Each hit is checked against its own limit: the larger one denies.
	e.expect([]limiter.Hit{hit(k, l, 1), hit(k, limit(8, time.Minute), 4)},
		limiter.Result{Allowed: true, Remaining: 5, ResetAfter: ms(120_000)},
		limiter.Result{RetryAfter: ms(60_000 + 12_000), ResetAfter: ms(120_000)},
	)
	e.expect([]limiter.Hit{hit(k, l, 5), hit(k, l, 5)},
		limiter.Result{Allowed: true, ResetAfter: ms(120_000)},
		limiter.Result{Allowed: true, ResetAfter: ms(120_000)},
	)
}

func testShadow(t *testing.T, e *env) {
	a, s := e.key("a"), e.key("s")
	ten, one := limit(10, time.Minute), limit(1, time.Minute)
	shadow := limiter.Hit{Key: s, Limit: one, Hits: 1, Shadow: true}
	e.expect([]limiter.Hit{hit(a, ten, 1), shadow},
		limiter.Result{Allowed: true, Remaining: 9, ResetAfter: ms(120_000)},
		limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(120_000)},
	)
	// Over its limit, the shadow hit reports it but the request is admitted
	// and the shadow counter still counts (2, then 3).
	for range 2 {
		e.apply(hit(a, ten, 1), shadow)
	}
	e.expect([]limiter.Hit{hit(s, limit(3, time.Minute), 0)},
		limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(120_000)})
	e.expect([]limiter.Hit{hit(s, limit(4, time.Minute), 0)},
		limiter.Result{Allowed: true, Remaining: 1, ResetAfter: ms(120_000)})
	// A request that an enforced limit denies does not count its shadow hits.
	e.apply(hit(a, ten, 7))
	for range 2 {
		e.apply(hit(a, ten, 1), shadow)
	}
	e.expect([]limiter.Hit{hit(s, limit(4, time.Minute), 0)},
		limiter.Result{Allowed: true, Remaining: 1, ResetAfter: ms(120_000)})
	// Only shadow hits: never denied.
	e.apply(limiter.Hit{Key: s, Limit: one, Hits: 100, Shadow: true})
}

func quota(key string, l limiter.Limit, n uint64) limiter.Hit {
	return limiter.Hit{Key: key, Limit: l, Hits: n, Quota: true}
}

// testQuotaGroup: quota hits deny the request only when every one of them is
// over; then nothing is consumed, and otherwise every counter is, the over
// quota counters included.
func testQuotaGroup(t *testing.T, e *env) {
	a, b, c, s := e.key("a"), e.key("b"), e.key("c"), e.key("s")
	one, five, ten := limit(1, time.Minute), limit(5, time.Minute), limit(10, time.Minute)
	e.apply(hit(a, one, 1))
	// a is over, b is not: the request is admitted and both count.
	e.expectExact([]limiter.Hit{quota(a, one, 1), quota(b, five, 1)},
		limiter.Result{RetryAfter: ms(120_000), ResetAfter: ms(120_000)},
		limiter.Result{Allowed: true, Remaining: 4, ResetAfter: ms(120_000)},
	)
	e.expect([]limiter.Hit{hit(a, limit(3, time.Minute), 0)},
		limiter.Result{Allowed: true, Remaining: 1, ResetAfter: ms(120_000)})
	// Both over: denied, and neither the enforced hit on c nor the shadow
	// hit on s consumes.
	e.apply(hit(b, five, 4))
	req := []limiter.Hit{quota(a, one, 1), quota(b, five, 1), hit(c, ten, 1), {Key: s, Limit: ten, Hits: 1, Shadow: true}}
	for range 2 {
		e.expectExact(req,
			limiter.Result{RetryAfter: ms(120_000), ResetAfter: ms(120_000), OverLimit: true},
			limiter.Result{RetryAfter: ms(72_000), ResetAfter: ms(120_000), OverLimit: true},
			limiter.Result{Allowed: true, Remaining: 10},
			limiter.Result{Allowed: true, Remaining: 10},
		)
	}
	// A quota group of one is a plain limit.
	e.expectExact([]limiter.Hit{quota(b, five, 1)},
		limiter.Result{RetryAfter: ms(72_000), ResetAfter: ms(120_000), OverLimit: true})
	// A quota hit that is also a shadow hit is outside the group: it never
	// denies and is counted.
	e.expectExact([]limiter.Hit{hit(c, ten, 1), {Key: a, Limit: one, Hits: 1, Quota: true, Shadow: true}},
		limiter.Result{Allowed: true, Remaining: 9, ResetAfter: ms(120_000)},
		limiter.Result{RetryAfter: ms(120_000), ResetAfter: ms(120_000)},
	)
	e.expect([]limiter.Hit{hit(a, limit(4, time.Minute), 0)},
		limiter.Result{Allowed: true, Remaining: 1, ResetAfter: ms(120_000)})
	// Once one quota hit fits again, the group admits.
	e.clk.Advance(ms(72_000))
	e.expectExact([]limiter.Hit{quota(a, one, 1), quota(b, five, 1)},
		limiter.Result{RetryAfter: ms(48_000), ResetAfter: ms(108_000)},
		limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(108_000)},
	)
}

// testQuotaGroupDeniedByOthers: a quota group that admits does not admit a
// request that an enforced non-quota hit denies, and its hits are not over
// limit then.
func testQuotaGroupDeniedByOthers(t *testing.T, e *env) {
	a, b, c := e.key("a"), e.key("b"), e.key("c")
	one, five, ten := limit(1, time.Minute), limit(5, time.Minute), limit(10, time.Minute)
	e.apply(hit(a, one, 1), hit(b, five, 5))
	req := []limiter.Hit{quota(c, ten, 1), quota(a, one, 1), hit(b, five, 1)}
	e.expectExact(req,
		limiter.Result{Allowed: true, Remaining: 10},
		limiter.Result{RetryAfter: ms(120_000), ResetAfter: ms(120_000)},
		limiter.Result{RetryAfter: ms(72_000), ResetAfter: ms(120_000), OverLimit: true},
	)
	e.expect([]limiter.Hit{hit(c, ten, 0), hit(a, limit(2, time.Minute), 0)},
		limiter.Result{Allowed: true, Remaining: 10},
		limiter.Result{Allowed: true, Remaining: 1, ResetAfter: ms(120_000)},
	)
	// A refund in the quota group is outside it and never denies.
	e.expectExact([]limiter.Hit{{Key: a, Limit: one, Hits: 1, Quota: true, Refund: true}, quota(c, ten, 1)},
		limiter.Result{Allowed: true, Remaining: 1},
		limiter.Result{Allowed: true, Remaining: 9, ResetAfter: ms(120_000)},
	)
}

func testRefund(t *testing.T, e *env) {
	k := e.key("k")
	l := limit(10, time.Minute)
	e.apply(hit(k, l, 5))
	refund := func(n uint64) limiter.Hit { return limiter.Hit{Key: k, Limit: l, Hits: n, Refund: true} }
	e.expect([]limiter.Hit{refund(2)}, limiter.Result{Allowed: true, Remaining: 7, ResetAfter: ms(120_000)})
	e.expect([]limiter.Hit{refund(100)}, limiter.Result{Allowed: true, Remaining: 10})
	for range 10 {
		e.apply(hit(k, l, 1))
	}
	e.expect([]limiter.Hit{hit(k, l, 1)}, limiter.Result{RetryAfter: ms(66_000), ResetAfter: ms(120_000)})
	// A refund takes from the current window first, then from the
	// previous one: one sent after the window rolled finds its hits there
	// (10 in prev, weighing half at 90 s).
	e.clk.Advance(ms(90_000))
	e.expect([]limiter.Hit{hit(k, l, 3), refund(3)},
		limiter.Result{Allowed: true, Remaining: 5, ResetAfter: ms(30_000)},
		limiter.Result{Allowed: true, Remaining: 5, ResetAfter: ms(30_000)},
	)
	e.expect([]limiter.Hit{refund(4)}, limiter.Result{Allowed: true, Remaining: 7, ResetAfter: ms(30_000)})
	e.expect([]limiter.Hit{refund(100)}, limiter.Result{Allowed: true, Remaining: 10})
}

func testCheckOnly(t *testing.T, e *env) {
	k := e.key("k")
	l := limit(4, time.Minute)
	check := []limiter.Hit{hit(k, l, 0)}
	e.expect(check, limiter.Result{Allowed: true, Remaining: 4})
	e.apply(hit(k, l, 4))
	for range 3 {
		e.expect(check, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(120_000)})
	}
}

func testExceedsLimit(t *testing.T, e *env) {
	a, k := e.key("a"), e.key("k")
	ten := limit(10, time.Minute)
	e.expect([]limiter.Hit{hit(a, ten, 1), hit(k, ten, 11)},
		limiter.Result{Allowed: true, Remaining: 10},
		limiter.Result{ExceedsLimit: true, RetryAfter: ms(60_000)},
	)
	e.expect([]limiter.Hit{hit(k, limit(0, time.Minute), 1)},
		limiter.Result{ExceedsLimit: true, RetryAfter: ms(60_000)})
	e.expect([]limiter.Hit{hit(a, ten, 10)}, limiter.Result{Allowed: true, ResetAfter: ms(120_000)})
}

func testInvalidLimit(t *testing.T, e *env) {
	k := e.key("k")
	l := limit(1, time.Minute)
	for _, bad := range []limiter.Limit{
		{Requests: 1},
		{Requests: 1, Window: -time.Second},
		{Requests: 1, Window: 1500 * time.Microsecond},
		{Requests: 1, Window: time.Minute, Algorithm: 200},
	} {
		hits := []limiter.Hit{hit(k, l, 1), hit(e.key("bad"), bad, 1)}
		if res, err := e.store.Apply(context.Background(), hits); err == nil {
			t.Errorf("Apply(%s) = %+v, want an error", describe(hits), res)
		}
	}
	e.expect([]limiter.Hit{hit(k, l, 1)}, limiter.Result{Allowed: true, ResetAfter: ms(120_000)})
}

// testRandomSequence drives a few counters with random requests and clock
// moves; apply compares every Result with limiter.Evaluate.
func testRandomSequence(t *testing.T, e *env) {
	e.followReal = true
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	keys := []string{e.key("a"), e.key("b"), e.key("c")}
	limits := []limiter.Limit{limit(5, time.Second), limit(20, time.Minute), limit(3, 7*time.Second), limit(0, time.Minute)}
	for range 400 {
		n := 1 + r.IntN(4)
		hits := make([]limiter.Hit, n)
		for i := range hits {
			l := limits[r.IntN(len(limits))]
			h := limiter.Hit{Key: keys[r.IntN(len(keys))], Limit: l, Hits: uint64(r.IntN(4))}
			switch r.IntN(8) {
			case 0:
				h.Refund = true
			case 1:
				h.Shadow = true
			}
			h.Quota = r.IntN(3) == 0
			hits[i] = h
		}
		e.apply(hits...)
		switch r.IntN(6) {
		case 0:
			e.clk.Advance(ms(1 + r.Int64N(1_000)))
		case 1:
			e.clk.Advance(ms(r.Int64N(30_000)))
		case 2:
			e.clk.Advance(ms(r.Int64N(3)))
		}
	}
}

func testConcurrentOneCounter(t *testing.T, e *env) {
	const goroutines, limitN = 400, 100
	h := hit(e.key("k"), limit(limitN, time.Minute), 1)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			res, err := e.store.Apply(context.Background(), []limiter.Hit{h})
			if err != nil {
				t.Errorf("Apply error: %v", err)
				return
			}
			if res[0].Allowed {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != limitN {
		t.Errorf("%d concurrent hits on %d/min admitted %d, want %d", goroutines, limitN, got, limitN)
	}
}

func testConcurrentAllOrNothing(t *testing.T, e *env) {
	const goroutines = 300
	a, b := hit(e.key("a"), limit(50, time.Minute), 1), hit(e.key("b"), limit(100, time.Minute), 1)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range goroutines {
		hits := []limiter.Hit{a, b}
		if i%2 == 1 {
			hits = []limiter.Hit{b, a} // the other order must not deadlock
		}
		wg.Go(func() {
			res, err := e.store.Apply(context.Background(), hits)
			if err != nil {
				t.Errorf("Apply error: %v", err)
				return
			}
			if res[0].Allowed && res[1].Allowed {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 50 {
		t.Errorf("admitted %d requests on 50/min and 100/min, want 50", got)
	}
	// b consumed exactly with a: 50 left of 100.
	check := b
	check.Hits = 0
	res, err := e.store.Apply(context.Background(), []limiter.Hit{check})
	if err != nil || res[0].Remaining != 50 {
		t.Errorf("after the race, check-only hit on b = %+v, %v, want Remaining 50", res, err)
	}
}

func testUnusualKeys(t *testing.T, e *env) {
	odd := []string{
		"", "{", "}", "{}", "}{", "|", "||", ":", "a", "b", "a|b", "a:b", "a{b}", "_", "=",
		"\x00", "a\x00b", "\xff\xfe", "\xc3", "é", "e\u0301", " ", "a ", "%", "*", "\n",
		strings.Repeat("x", 4096), strings.Repeat("x", 4095), strings.Repeat("x", 4095) + "y",
		strings.Repeat("{", 4096),
	}
	// The literal keys are not prefixed (the empty key must be tested as
	// such), so a random window makes their counters unique to this run.
	w := time.Hour + ms(rand.Int64N(1<<30))
	one := limit(1, w)
	var keys []string
	for _, k := range odd {
		keys = append(keys, k, e.key(k))
	}
	for _, k := range keys {
		if res := e.apply(hit(k, one, 1)); !res[0].Allowed {
			t.Fatalf("first hit on key %q = %+v, want Allowed: it shares a counter with another key", k, res[0])
		}
	}
	for _, k := range keys {
		if res := e.apply(hit(k, one, 1)); res[0].Allowed {
			t.Fatalf("second hit on key %q with limit 1 = %+v, want denied", k, res[0])
		}
	}
	// One request over all of them: one is full, so none consumes.
	all := make([]limiter.Hit, 0, len(keys))
	for _, k := range keys {
		all = append(all, hit(k, limit(2, w), 1))
	}
	e.apply(all...)
	e.apply(append(all, hit(e.key("full"), limit(0, w), 1))...)
}

func algLimit(alg limiter.Algorithm, n uint64, w time.Duration) limiter.Limit {
	return limiter.Limit{Requests: n, Window: w, Algorithm: alg}
}

// testSubWindows: 6 sub-windows of 10 s on 6/min; every sub-window that
// overlaps the sliding window counts whole.
func testSubWindows(t *testing.T, e *env) {
	l := limiter.Limit{Requests: 6, Window: time.Minute, SubWindows: 6}
	k := e.key("a")
	e.clk.Advance(ms(5_000)) // 5 s into sub-window 0
	e.expect([]limiter.Hit{hit(k, l, 4)}, limiter.Result{Allowed: true, Remaining: 2, ResetAfter: ms(65_000)})
	e.clk.Advance(ms(10_000)) // sub-window 1
	e.expect([]limiter.Hit{hit(k, l, 2)}, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(65_000)})
	// Full: the 4 of sub-window 0 leave the estimate when sub-window 7
	// starts, at 70 s (at 60 s the window (0 s, 60 s] still holds them).
	e.expect([]limiter.Hit{hit(k, l, 3)}, limiter.Result{RetryAfter: ms(55_000), ResetAfter: ms(65_000)})
	e.clk.Advance(ms(54_999))
	e.expect([]limiter.Hit{hit(k, l, 1)}, limiter.Result{RetryAfter: ms(1), ResetAfter: ms(10_001)})
	e.clk.Advance(ms(1))
	e.expect([]limiter.Hit{hit(k, l, 4)}, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(70_000)})
	// A refund takes back from the current sub-window (4), then from the
	// older ones still in the window, the newest first (1 of sub-window 1's
	// 2).
	e.expect([]limiter.Hit{{Key: k, Limit: l, Hits: 5, Refund: true}},
		limiter.Result{Allowed: true, Remaining: 5, ResetAfter: ms(10_000)})
	e.expect([]limiter.Hit{{Key: k, Limit: l, Hits: 5, Refund: true}}, limiter.Result{Allowed: true, Remaining: 6})
}

// testTokenBucket: a bucket of 5 refilled at 3/s: a burst, then the rate.
func testTokenBucket(t *testing.T, e *env) {
	l := limiter.Limit{Requests: 3, Window: time.Second, Algorithm: limiter.TokenBucket, Burst: 5}
	k := e.key("a")
	e.expect([]limiter.Hit{hit(k, l, 5)}, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(1667)})
	e.expect([]limiter.Hit{hit(k, l, 1)}, limiter.Result{RetryAfter: ms(334), ResetAfter: ms(1667)})
	e.clk.Advance(ms(334))
	e.expect([]limiter.Hit{hit(k, l, 1)}, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(1666)})
	e.expect([]limiter.Hit{hit(k, l, 6)}, limiter.Result{ExceedsLimit: true, RetryAfter: time.Second, ResetAfter: ms(1666)})
	e.clk.Advance(ms(1666))
	e.expect([]limiter.Hit{hit(k, l, 0)}, limiter.Result{Allowed: true, Remaining: 5})
	// A refund gives tokens back, never more than the burst.
	e.apply(hit(k, l, 4))
	e.expect([]limiter.Hit{{Key: k, Limit: l, Hits: 9, Refund: true}}, limiter.Result{Allowed: true, Remaining: 5})
}

// testFixedWindow: the peer's windows, but a denial consumes nothing.
func testFixedWindow(t *testing.T, e *env) {
	l := algLimit(limiter.FixedWindow, 3, time.Minute)
	k := e.key("a")
	e.clk.Advance(ms(50_000))
	e.expect([]limiter.Hit{hit(k, l, 2)}, limiter.Result{Allowed: true, Remaining: 1, ResetAfter: ms(10_000)})
	e.expect([]limiter.Hit{hit(k, l, 2)}, limiter.Result{RetryAfter: ms(10_000), ResetAfter: ms(10_000)})
	e.expect([]limiter.Hit{hit(k, l, 1)}, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(10_000)})
	e.clk.Advance(ms(10_000))
	e.expect([]limiter.Hit{hit(k, l, 3)}, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(60_000)})
}

// calendarLimit is a fixed window of requests per calendar unit in Berlin.
func calendarLimit(t *testing.T, u limiter.CalendarUnit, requests uint64, window time.Duration) (limiter.Limit, *time.Location) {
	c, err := limiter.LoadCalendar(u, "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	return limiter.Limit{Requests: requests, Window: window, Algorithm: limiter.FixedWindow, Calendar: c}, c.Zone
}

// testCalendarAcrossDST: a daily quota in Berlin resets at each midnight,
// the day of the spring DST change lasting 23 hours and the next 24.
func testCalendarAcrossDST(t *testing.T, e *env) {
	l, berlin := calendarLimit(t, limiter.CalendarDay, 2, 24*time.Hour)
	k := e.key("a")
	e.clk.Set(time.Date(2026, 3, 28, 23, 30, 0, 0, berlin))
	e.expect([]limiter.Hit{hit(k, l, 2)}, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: 30 * time.Minute})
	e.expect([]limiter.Hit{hit(k, l, 1)}, limiter.Result{RetryAfter: 30 * time.Minute, ResetAfter: 30 * time.Minute})
	e.clk.Advance(30 * time.Minute) // 29 March, 00:00: a day of 23 hours
	e.expect([]limiter.Hit{hit(k, l, 2)}, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: 23 * time.Hour})
	e.clk.Advance(23*time.Hour - time.Second)
	e.expect([]limiter.Hit{hit(k, l, 1)}, limiter.Result{RetryAfter: time.Second, ResetAfter: time.Second})
	e.clk.Advance(time.Second) // 30 March, 00:00
	e.expect([]limiter.Hit{hit(k, l, 1)}, limiter.Result{Allowed: true, Remaining: 1, ResetAfter: 24 * time.Hour})
}

// testCalendarMonth: a monthly quota in Berlin spent on 31 January is
// denied until midnight, then has February's 28 days; an epoch-aligned
// fixed window of the same key and window counts apart.
func testCalendarMonth(t *testing.T, e *env) {
	l, berlin := calendarLimit(t, limiter.CalendarMonth, 1, 30*24*time.Hour)
	k := e.key("a")
	e.clk.Set(time.Date(2026, 1, 31, 23, 59, 59, 0, berlin))
	e.expect([]limiter.Hit{hit(k, l, 1)}, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: time.Second})
	e.expect([]limiter.Hit{hit(k, l, 1)}, limiter.Result{RetryAfter: time.Second, ResetAfter: time.Second})
	plain := l
	plain.Calendar = limiter.Calendar{}
	if r := e.apply(hit(k, plain, 1)); !r[0].Allowed {
		t.Fatalf("epoch-aligned window on the calendar quota's key: %+v, want a counter of its own", r[0])
	}
	e.clk.Advance(time.Second)
	e.expect([]limiter.Hit{hit(k, l, 1)}, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: 28 * 24 * time.Hour})
}

// testSlidingLog: exact; a hit leaves the window exactly one window later.
func testSlidingLog(t *testing.T, e *env) {
	l := algLimit(limiter.SlidingLog, 3, 10*time.Second)
	k := e.key("a")
	e.expect([]limiter.Hit{hit(k, l, 2)}, limiter.Result{Allowed: true, Remaining: 1, ResetAfter: ms(10_000)})
	e.clk.Advance(ms(4_000))
	e.expect([]limiter.Hit{hit(k, l, 1)}, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(10_000)})
	e.expect([]limiter.Hit{hit(k, l, 2)}, limiter.Result{RetryAfter: ms(6_000), ResetAfter: ms(10_000)})
	e.expect([]limiter.Hit{hit(k, l, 3)}, limiter.Result{RetryAfter: ms(10_000), ResetAfter: ms(10_000)})
	e.clk.Advance(ms(6_000))
	e.expect([]limiter.Hit{hit(k, l, 2)}, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(10_000)})
	// A refund removes the newest hits.
	e.expect([]limiter.Hit{{Key: k, Limit: l, Hits: 2, Refund: true}}, limiter.Result{Allowed: true, Remaining: 2, ResetAfter: ms(4_000)})
}

// testConcurrency: acquire 2 of 2, the third is denied, a release admits the
// next; a release frees only slots of its own token (none without one,
// nothing the second time); a leaked slot frees itself one window after its
// acquire.
func testConcurrency(t *testing.T, e *env) {
	l := algLimit(limiter.Concurrency, 2, time.Minute)
	k := e.key("a")
	acquire := func(token uint64) []limiter.Hit {
		return []limiter.Hit{{Key: k, Limit: l, Hits: 1, SlotToken: token}}
	}
	release := func(token, n uint64) []limiter.Hit {
		return []limiter.Hit{{Key: k, Limit: l, Hits: n, Refund: true, SlotToken: token}}
	}
	e.expect(acquire(11), limiter.Result{Allowed: true, Remaining: 1, ResetAfter: ms(60_000)})
	e.clk.Advance(ms(10))
	e.expect(acquire(12), limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(60_000)})
	e.expect(acquire(13), limiter.Result{RetryAfter: ms(59_990), ResetAfter: ms(60_000)})
	// The denied request's release (Envoy sends one), with its token or
	// none, frees nothing; nor does an unknown token.
	for _, token := range []uint64{13, 0, 99} {
		e.expect(release(token, 1), limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(60_000)})
	}
	e.expect(release(11, 1), limiter.Result{Allowed: true, Remaining: 1, ResetAfter: ms(60_000)})
	e.expect(release(11, 1), limiter.Result{Allowed: true, Remaining: 1, ResetAfter: ms(60_000)})
	e.expect(acquire(14), limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(60_000)})
	// A release of more than its token holds frees only those.
	e.expect(release(12, 9), limiter.Result{Allowed: true, Remaining: 1, ResetAfter: ms(60_000)})
	e.expect(release(14, 1), limiter.Result{Allowed: true, Remaining: 2})
	// Two slots leak; they are free one window after their acquire.
	e.apply(limiter.Hit{Key: k, Limit: l, Hits: 2, SlotToken: 15})
	e.clk.Advance(ms(59_999))
	e.expect(acquire(16), limiter.Result{RetryAfter: ms(1), ResetAfter: ms(1)})
	e.clk.Advance(ms(1))
	e.expect(acquire(16), limiter.Result{Allowed: true, Remaining: 1, ResetAfter: ms(60_000)})
}

// testAlgorithmsAreSeparateCounters: the same key under each algorithm (and
// each number of sub-windows) is its own counter.
func testAlgorithmsAreSeparateCounters(t *testing.T, e *env) {
	k := e.key("a")
	var ls []limiter.Limit
	for _, a := range limiter.Algorithms() {
		ls = append(ls, algLimit(a, 1, time.Minute))
	}
	ls = append(ls, limiter.Limit{Requests: 1, Window: time.Minute, SubWindows: 6},
		limiter.Limit{Requests: 1, Window: time.Minute, SubWindows: 12})
	for _, l := range ls {
		if res := e.apply(hit(k, l, 1)); !res[0].Allowed {
			t.Fatalf("first hit under %v (sub-windows %d) = %+v: it shares a counter", l.Algorithm, l.SubWindows, res[0])
		}
	}
	for _, l := range ls {
		if res := e.apply(hit(k, l, 1)); res[0].Allowed {
			t.Fatalf("second hit under %v (sub-windows %d) = %+v, want denied", l.Algorithm, l.SubWindows, res[0])
		}
	}
}

// testAllOrNothingAcrossAlgorithms: one request over every algorithm; one
// full counter denies it and none consumes.
func testAllOrNothingAcrossAlgorithms(t *testing.T, e *env) {
	var req []limiter.Hit
	for _, a := range limiter.Algorithms() {
		req = append(req, hit(e.key("k"+a.String()), algLimit(a, 2, time.Minute), 1))
	}
	req = append(req, hit(e.key("sub"), limiter.Limit{Requests: 2, Window: time.Minute, SubWindows: 12}, 1))
	full := hit(e.key("full"), algLimit(limiter.TokenBucket, 1, time.Minute), 1)
	e.apply(full)
	for range 3 {
		res := e.apply(append(req, full)...)
		for i, r := range res[:len(req)] {
			if !r.Allowed || r.Remaining != 2 {
				t.Fatalf("hit %d of a denied request: %+v, want Allowed with Remaining 2 (nothing consumed)", i, r)
			}
		}
	}
	for i, r := range e.apply(req...) {
		if !r.Allowed || r.Remaining != 1 {
			t.Fatalf("hit %d of an admitted request: %+v, want Allowed with Remaining 1", i, r)
		}
	}
}

// testRandomSequenceEveryAlgorithm: random requests mixing every
// algorithm; apply compares every Result with limiter.Evaluate.
func testRandomSequenceEveryAlgorithm(t *testing.T, e *env) {
	e.followReal = true
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	keys := []string{e.key("a"), e.key("b")}
	limits := []limiter.Limit{
		limit(5, time.Second),
		{Requests: 7, Window: 6 * time.Second, SubWindows: 6},
		{Requests: 4, Window: time.Second, Algorithm: limiter.TokenBucket, Burst: 6},
		{Requests: 3, Window: 7 * time.Second, Algorithm: limiter.TokenBucket},
		algLimit(limiter.FixedWindow, 4, time.Second),
		algLimit(limiter.SlidingLog, 5, 3*time.Second),
		algLimit(limiter.Concurrency, 3, 2*time.Second),
		{Requests: 6, Window: time.Second, Overdraw: true},
		{Requests: 4, Window: time.Second, Algorithm: limiter.TokenBucket, Burst: 6, Overdraw: true},
		{Requests: 6, Window: 3 * time.Second, SubWindows: 3, CountDenied: true},
		{Requests: 4, Window: time.Second, Algorithm: limiter.FixedWindow, CountDenied: true},
	}
	for range 400 {
		hits := make([]limiter.Hit, 1+r.IntN(4))
		for i := range hits {
			hits[i] = limiter.Hit{Key: keys[r.IntN(len(keys))], Limit: limits[r.IntN(len(limits))], Hits: uint64(r.IntN(4)),
				Refund: r.IntN(6) == 0, Shadow: r.IntN(8) == 0, Quota: r.IntN(4) == 0, SlotToken: uint64(r.IntN(3))}
		}
		e.apply(hits...)
		switch r.IntN(5) {
		case 0:
			e.clk.Advance(ms(1 + r.Int64N(1_000)))
		case 1:
			e.clk.Advance(ms(r.Int64N(5_000)))
		case 2:
			e.clk.Advance(ms(r.Int64N(3)))
		}
	}
}

// overdrawn reports whether a denied request still grows counter id: one of
// its overdraw or CountDenied hits on it asks for hits.
func overdrawn(hits []limiter.Hit, id counterID) bool {
	for _, h := range hits {
		if idOf(h) == id && (h.Limit.Overdraw || h.Limit.CountDenied) && !h.Refund && h.Hits > 0 {
			return true
		}
	}
	return false
}

// testOverdraw is the token budget of overdraw limits: check (hits 0), report the
// tokens used; a report is counted even when it takes the counter over, so
// the next check is denied; another tenant is unaffected; a request denied
// by another limit still counts its overdraw hits (and only those).
func testOverdraw(t *testing.T, e *env) {
	l := limiter.Limit{Requests: 10_000, Window: time.Hour, SubWindows: 50, Overdraw: true}
	a, b := e.key("tenant-a"), e.key("tenant-b")
	check, report := hit(a, l, 0), hit(a, l, 8000)
	e.expect([]limiter.Hit{check}, limiter.Result{Allowed: true, Remaining: 10_000})
	e.expect([]limiter.Hit{report}, limiter.Result{Allowed: true, Remaining: 2000, ResetAfter: ms(3_672_000)})
	e.expect([]limiter.Hit{check}, limiter.Result{Allowed: true, Remaining: 2000, ResetAfter: ms(3_672_000)})
	// Over the limit with this report: counted all the same.
	e.expect([]limiter.Hit{report}, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(3_672_000)})
	res := e.apply(check)
	if res[0].Allowed || res[0].RetryAfter <= 0 {
		t.Fatalf("check after 16000 of 10000 = %+v, want denied", res[0])
	}
	// A denied report is counted too (a report cannot be refused).
	e.apply(report)
	e.expect([]limiter.Hit{hit(b, l, 0)}, limiter.Result{Allowed: true, Remaining: 10_000})
	// Denied by another limit: the overdraw hit counts, the other does not.
	other := hit(e.key("other"), limit(5, time.Hour), 1)
	e.apply(hit(e.key("full"), limit(0, time.Hour), 1), hit(b, l, 3000), other)
	e.expect([]limiter.Hit{hit(b, l, 0), hit(e.key("other"), limit(5, time.Hour), 0)},
		limiter.Result{Allowed: true, Remaining: 7000, ResetAfter: ms(3_672_000)},
		limiter.Result{Allowed: true, Remaining: 5})
}

// testCountDenied is envoyproxy/ratelimit's counting (CountDenied): a hit is
// over the limit when the count after it would pass the limit, and counts
// either way, on every counter of the request, even one that admitted it.
func testCountDenied(t *testing.T, e *env) {
	l := limiter.Limit{Requests: 20, Window: time.Minute, SubWindows: 50, CountDenied: true}
	a := e.key("a")
	e.expect([]limiter.Hit{hit(a, l, 15)}, limiter.Result{Allowed: true, Remaining: 5, ResetAfter: ms(61_200)})
	e.expect([]limiter.Hit{hit(a, l, 15)}, limiter.Result{RetryAfter: ms(61_200), ResetAfter: ms(61_200)})
	e.expect([]limiter.Hit{hit(a, l, 0)}, limiter.Result{Allowed: false, RetryAfter: ms(61_200), ResetAfter: ms(61_200)})
	// More hits than the limit: never admitted, counted all the same.
	b := e.key("b")
	e.expect([]limiter.Hit{hit(b, l, 1_000_000)}, limiter.Result{ExceedsLimit: true, RetryAfter: time.Minute, ResetAfter: ms(61_200)})
	e.expect([]limiter.Hit{hit(b, l, 0)}, limiter.Result{RetryAfter: ms(61_200), ResetAfter: ms(61_200)})
	// Denied by another limit: the CountDenied hits count on every counter
	// of the request, the others do not.
	c, other := e.key("c"), hit(e.key("other"), limit(5, time.Hour), 1)
	e.apply(hit(e.key("full"), limit(0, time.Hour), 1), hit(c, l, 3), other)
	e.expect([]limiter.Hit{hit(c, l, 0), hit(e.key("other"), limit(5, time.Hour), 0)},
		limiter.Result{Allowed: true, Remaining: 17, ResetAfter: ms(61_200)},
		limiter.Result{Allowed: true, Remaining: 5})
}
