package limiter_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// This file checks Limit.Ceiling, the share of a pool that one class may
// fill: on counters that several classes fill, every algorithm's Results
// are exact relative to the class's ceiling, a class is never admitted
// above its ceiling, and the pool never above its limit.

// ceilings are the permille ceilings the random classes take: a typical pool's
// classes, a tiny one that rounds to nothing on small limits, and none (0,
// the whole pool).
var ceilings = []uint16{0, 1000, 800, 700, 500, 333, 1}

// randomCeilingCase drives one counter of alg with hits of random classes
// and returns a class's hit on it at a random time after.
func randomCeilingCase(t testing.TB, r *rand.Rand, alg limiter.Algorithm) algCase {
	pool := randomLimit(r, alg)
	w := pool.Window.Milliseconds()
	now := t0 + r.Int64N(4*w)
	var st limiter.State
	for range r.IntN(40) {
		l := pool
		l.Ceiling = ceilings[r.IntN(len(ceilings))]
		h := limiter.Hit{Key: "k", Limit: l, Hits: uint64(r.IntN(4)), Refund: r.IntN(10) == 0}
		_, next, adm := evaluate(t, now, []limiter.Hit{h}, []limiter.State{st})
		if adm {
			st = next[0]
		}
		now += r.Int64N(w/4 + 2)
	}
	class := pool
	class.Ceiling = ceilings[r.IntN(len(ceilings))]
	n := uint64(r.IntN(4))
	if r.IntN(4) == 0 {
		n = uint64(r.Int64N(int64(class.Capacity()) + 2))
	}
	return algCase{now: now, limit: class, state: st, n: n}
}

func TestCeilingOf(t *testing.T) {
	for _, tc := range []struct {
		x       uint64
		ceiling uint16
		want    uint64
	}{
		{1000, 0, 1000},
		{1000, 1000, 1000},
		{1000, 800, 800},
		{1, 999, 0},
		{7, 500, 3},
		{limiter.MaxCount, 999, limiter.MaxCount/1000*999 + limiter.MaxCount%1000*999/1000},
		{limiter.MaxCount, 0, limiter.MaxCount},
	} {
		l := limiter.Limit{Ceiling: tc.ceiling}
		if got := l.CeilingOf(tc.x); got != tc.want {
			t.Errorf("Limit{Ceiling: %d}.CeilingOf(%d) = %d, want %d", tc.ceiling, tc.x, got, tc.want)
		}
	}
	// The split formula is floor(x*c/1000) wherever the product fits.
	r := rand.New(rand.NewPCG(1, 2))
	for range 10_000 {
		x, c := r.Uint64N(1<<40), uint16(r.IntN(1001))
		want := x * uint64(c) / 1000
		if c == 0 {
			want = x
		}
		if got := (limiter.Limit{Ceiling: c}).CeilingOf(x); got != want {
			t.Fatalf("CeilingOf(%d) at %d permille = %d, want %d", x, c, got, want)
		}
	}
}

func TestCeilingValidate(t *testing.T) {
	l := limiter.Limit{Requests: 10, Window: time.Second, Ceiling: 1001}
	if err := l.Validate(); err == nil {
		t.Errorf("Validate(%+v) = nil, want an error naming ceiling", l)
	}
	l.Ceiling = 1000
	if err := l.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v, want nil", l, err)
	}
	l.Requests = limiter.MaxCount + 1
	if err := l.Validate(); err == nil {
		t.Errorf("Validate(%+v) = nil, want an error: a ceiling on more than 2^52 requests", l)
	}
}

// TestCeilingResultsAreExact: on counters every class fills, a class's
// RetryAfter, Remaining and ResetAfter are exact relative to its ceiling,
// on every algorithm.
func TestCeilingResultsAreExact(t *testing.T) {
	forEachAlgorithm(t, func(t *testing.T, alg limiter.Algorithm) {
		r := rand.New(rand.NewPCG(29, uint64(alg)))
		denied, admitted := 0, 0
		for range 20_000 {
			c := randomCeilingCase(t, r, alg)
			res, st := evalCase(t, c.now, c.limit, c.n, c.state)
			switch {
			case res.ExceedsLimit:
				if c.n <= c.limit.Capacity() {
					t.Fatalf("%v: ExceedsLimit with n %d under the ceiling's capacity %d", c, c.n, c.limit.Capacity())
				}
			case !res.Allowed:
				denied++
				checkRetryAfter(t, c, res)
			default:
				admitted++
				checkRemaining(t, c, res, st)
			}
			reset, full := res.ResetAfter.Milliseconds(), c.limit.Capacity()
			if got, _ := evalCase(t, c.now+reset, c.limit, 0, st); got.Remaining != full {
				t.Fatalf("%v: ResetAfter = %v, but Remaining then = %d, want the ceiling's %d", c, res.ResetAfter, got.Remaining, full)
			}
		}
		if denied < 1000 || admitted < 1000 {
			t.Errorf("only %d denied and %d admitted states checked", denied, admitted)
		}
	})
}

func checkRetryAfter(t *testing.T, c algCase, res limiter.Result) {
	t.Helper()
	retry := res.RetryAfter.Milliseconds()
	if retry <= 0 {
		t.Fatalf("%v: RetryAfter = %v, want positive", c, res.RetryAfter)
	}
	if got, _ := evalCase(t, c.now+retry, c.limit, c.n, c.state); !got.Allowed {
		t.Fatalf("%v: RetryAfter = %v, but not Allowed then: %+v", c, res.RetryAfter, got)
	}
	if retry > 1 {
		if got, _ := evalCase(t, c.now+retry-1, c.limit, c.n, c.state); got.Allowed {
			t.Fatalf("%v: RetryAfter = %v, but Allowed 1 ms earlier", c, res.RetryAfter)
		}
	}
}

func checkRemaining(t *testing.T, c algCase, res limiter.Result, st limiter.State) {
	t.Helper()
	if res.Remaining > c.limit.Capacity() {
		t.Fatalf("%v: Remaining = %d, over the ceiling's capacity %d", c, res.Remaining, c.limit.Capacity())
	}
	for i := range res.Remaining + 1 {
		got, next := evalCase(t, c.now, c.limit, 1, st)
		if want := i < res.Remaining; got.Allowed != want {
			t.Fatalf("%v: Remaining = %d, but hit %d Allowed = %v", c, res.Remaining, i+1, got.Allowed)
		}
		st = next
	}
}

// held is what the counter in st holds against the whole pool at now: its
// capacity less what a check-only hit without a ceiling has remaining.
func held(t testing.TB, now int64, pool limiter.Limit, st limiter.State) uint64 {
	res, _ := evalCase(t, now, pool, 0, st)
	return pool.Capacity() - res.Remaining
}

// TestClassNeverAdmittedAboveItsCeiling: classes fill one counter at
// random; right after any admitted request of a class, the counter holds
// at most the class's ceiling, on every algorithm.
func TestClassNeverAdmittedAboveItsCeiling(t *testing.T) {
	forEachAlgorithm(t, func(t *testing.T, alg limiter.Algorithm) {
		r := rand.New(rand.NewPCG(30, uint64(alg)))
		checked := 0
		for range 300 {
			pool := randomLimit(r, alg)
			pool.Requests += 10 // room for the classes to differ
			w := pool.Window.Milliseconds()
			times, sizes := randomTraffic(r, w, 200)
			var st limiter.State
			for i, now := range times {
				class := pool
				class.Ceiling = ceilings[r.IntN(len(ceilings))]
				h := limiter.Hit{Key: "k", Limit: class, Hits: sizes[i], Refund: r.IntN(20) == 0}
				_, next, adm := evaluate(t, now, []limiter.Hit{h}, []limiter.State{st})
				if !adm {
					continue
				}
				st = next[0]
				if h.Refund {
					continue
				}
				checked++
				if got, ceiling := held(t, now, pool, st), class.CeilingOf(pool.Capacity()); got > ceiling {
					t.Fatalf("%+v: admitted %d hits with the pool holding %d, over the class's ceiling %d",
						class, h.Hits, got, ceiling)
				}
			}
		}
		if checked < 1000 {
			t.Errorf("only %d admitted requests checked", checked)
		}
	})
}

// TestPoolNeverAboveItsLimit: classes of every ceiling share a pool whose
// algorithm bounds every window (the sliding log, sub-windows, concurrency
// without releases): together they never pass the pool's limit in any
// window, and the top class is admitted whenever the pool has room for it.
func TestPoolNeverAboveItsLimit(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for _, base := range []limiter.Limit{
		{Algorithm: limiter.SlidingLog},
		{Algorithm: limiter.Concurrency},
		{Algorithm: limiter.SlidingWindow, SubWindows: 6},
		{Algorithm: limiter.SlidingWindow, SubWindows: 20},
	} {
		for range 200 {
			pool := base
			pool.Requests = uint64(1 + r.IntN(50))
			pool.Window = time.Duration(60*(1+r.Int64N(100))) * time.Millisecond
			w := pool.Window.Milliseconds()
			times, sizes := randomTraffic(r, w, 400)
			var st limiter.State
			var adm []int64
			for i, now := range times {
				class := pool
				class.Ceiling = ceilings[r.IntN(len(ceilings))]
				h := limiter.Hit{Key: "k", Limit: class, Hits: sizes[i]}
				room := pool.Capacity() - held(t, now, pool, st)
				_, next, ok := evaluate(t, now, []limiter.Hit{h}, []limiter.State{st})
				if class.CeilingOf(1000) == 1000 && sizes[i] <= room && !ok {
					t.Fatalf("%+v: the top class was shed %d hits with %d free in the pool", class, sizes[i], room)
				}
				if ok {
					st = next[0]
					for range sizes[i] {
						adm = append(adm, now)
					}
				}
			}
			if got := maxInAnyWindow(adm, w); got > int(pool.Requests) {
				t.Fatalf("%+v admitted %d hits in one window", pool, got)
			}
		}
	}
}

// TestCeilingSharesTheCounter: classes of one pool are one counter (the
// ceiling is not part of its identity): what the top class takes, a lower
// class no longer has, and a lower class stops at its ceiling while the top
// class still gets the reserve above it.
func TestCeilingSharesTheCounter(t *testing.T) {
	s := limiter.NewMemoryStore(limiter.MemoryOptions{Now: func() time.Time { return time.UnixMilli(t0 + 5) }})
	pool := limiter.Limit{Requests: 10, Window: time.Second, Algorithm: limiter.FixedWindow}
	def, crit := pool, pool
	def.Ceiling, crit.Ceiling = 800, 1000
	step := func(l limiter.Limit, n uint64, want limiter.Result) {
		t.Helper()
		got := mustApply(t, s, limiter.Hit{Key: "pool", Limit: l, Hits: n})[0]
		if got != want {
			t.Fatalf("Apply(ceiling %d, %d hits) = %+v, want %+v", l.Ceiling, n, got, want)
		}
	}
	step(crit, 3, limiter.Result{Allowed: true, Remaining: 7, ResetAfter: 995 * time.Millisecond})
	step(def, 5, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: 995 * time.Millisecond})
	step(def, 1, limiter.Result{OverLimit: true, RetryAfter: 995 * time.Millisecond, ResetAfter: 995 * time.Millisecond})
	step(def, 9, limiter.Result{ExceedsLimit: true, OverLimit: true, RetryAfter: time.Second, ResetAfter: 995 * time.Millisecond})
	step(crit, 2, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: 995 * time.Millisecond})
	step(crit, 1, limiter.Result{OverLimit: true, RetryAfter: 995 * time.Millisecond, ResetAfter: 995 * time.Millisecond})
}
