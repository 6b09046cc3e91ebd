package limiter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// This file checks every algorithm against the Result contract (Result's
// and Store's docs) on states reached by random traffic: RetryAfter,
// Remaining and ResetAfter are exact, and the algorithm's own bound holds in
// every window.

// algCase is a limit of one algorithm and a state reached on it.
type algCase struct {
	now   int64
	limit limiter.Limit
	state limiter.State
	n     uint64 // the hits to decide
}

func (c algCase) String() string {
	return fmt.Sprintf("{now %d limit %+v state %+v n %d}", c.now, c.limit, c.state, c.n)
}

// randomLimit returns a random valid Limit of alg with a small Requests.
func randomLimit(r *rand.Rand, alg limiter.Algorithm) limiter.Limit {
	windows := []time.Duration{time.Millisecond, 7 * time.Millisecond, 60 * time.Millisecond, time.Second, time.Minute, time.Hour}
	l := limiter.Limit{Requests: uint64(r.IntN(30)), Window: windows[r.IntN(len(windows))], Algorithm: alg}
	switch alg {
	case limiter.SlidingWindow:
		for _, n := range []uint8{2, 3, 4, 5, 6, 10, 12, 20, 60} {
			if l.Window.Milliseconds()%int64(n) == 0 && r.IntN(3) == 0 {
				l.SubWindows = n
			}
		}
	case limiter.TokenBucket:
		if l.Requests > 0 && r.IntN(2) == 0 {
			l.Burst = uint64(1 + r.IntN(40))
		}
	}
	return l
}

// randomAlgCase drives one counter of alg with random traffic and returns it
// at a random time after.
func randomAlgCase(t testing.TB, r *rand.Rand, alg limiter.Algorithm) algCase {
	l := randomLimit(r, alg)
	w := l.Window.Milliseconds()
	now := t0 + r.Int64N(4*w)
	var st limiter.State
	for range r.IntN(40) {
		h := limiter.Hit{Key: "k", Limit: l, Hits: uint64(r.IntN(4)), Refund: r.IntN(10) == 0}
		_, next, adm := evaluate(t, now, []limiter.Hit{h}, []limiter.State{st})
		if adm {
			st = next[0]
		}
		now += r.Int64N(w/4 + 2)
	}
	n := uint64(r.IntN(4))
	if r.IntN(4) == 0 {
		n = uint64(r.Int64N(int64(l.Capacity()) + 2))
	}
	return algCase{now: now, limit: l, state: st, n: n}
}

func evalCase(t testing.TB, now int64, l limiter.Limit, n uint64, st limiter.State) (limiter.Result, limiter.State) {
	t.Helper()
	return evalOne(t, now, limiter.Hit{Key: "k", Limit: l, Hits: n}, st)
}

func forEachAlgorithm(t *testing.T, f func(t *testing.T, alg limiter.Algorithm)) {
	for _, alg := range limiter.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) { f(t, alg) })
	}
}

// TestAlgorithmsRetryAfterIsExact: with no other traffic, the same hits are
// admitted after exactly RetryAfter and not 1 ms earlier.
func TestAlgorithmsRetryAfterIsExact(t *testing.T) {
	forEachAlgorithm(t, func(t *testing.T, alg limiter.Algorithm) {
		r := rand.New(rand.NewPCG(7, uint64(alg)))
		checked := 0
		for range 20_000 {
			c := randomAlgCase(t, r, alg)
			res, _ := evalCase(t, c.now, c.limit, c.n, c.state)
			if res.Allowed || res.ExceedsLimit {
				continue
			}
			checked++
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
			if n := c.limit.SubWindowCount(); n > 1 {
				if w := c.limit.Window.Milliseconds(); retry > w+w/n {
					t.Fatalf("%v: RetryAfter = %v, more than window + window/N", c, res.RetryAfter)
				}
			}
		}
		if checked < 1000 {
			t.Errorf("only %d denied states checked", checked)
		}
	})
}

// TestAlgorithmsRemainingIsExact: after an admitted hit, Remaining more
// single hits are admitted right away and the next one is not.
func TestAlgorithmsRemainingIsExact(t *testing.T) {
	forEachAlgorithm(t, func(t *testing.T, alg limiter.Algorithm) {
		r := rand.New(rand.NewPCG(8, uint64(alg)))
		checked := 0
		for range 5_000 {
			c := randomAlgCase(t, r, alg)
			res, st := evalCase(t, c.now, c.limit, c.n, c.state)
			if !res.Allowed {
				continue
			}
			checked++
			for i := range res.Remaining + 1 {
				got, next := evalCase(t, c.now, c.limit, 1, st)
				if want := i < res.Remaining; got.Allowed != want {
					t.Fatalf("%v: Remaining = %d, but hit %d Allowed = %v", c, res.Remaining, i+1, got.Allowed)
				}
				st = next
			}
		}
		if checked < 1000 {
			t.Errorf("only %d admitted states checked", checked)
		}
	})
}

// TestAlgorithmsResetAfterIsExact: after ResetAfter with no other traffic
// the full capacity remains, and 1 ms earlier it does not.
func TestAlgorithmsResetAfterIsExact(t *testing.T) {
	forEachAlgorithm(t, func(t *testing.T, alg limiter.Algorithm) {
		r := rand.New(rand.NewPCG(9, uint64(alg)))
		for range 5_000 {
			c := randomAlgCase(t, r, alg)
			res, st := evalCase(t, c.now, c.limit, c.n, c.state)
			reset := res.ResetAfter.Milliseconds()
			full := c.limit.Capacity()
			if got, _ := evalCase(t, c.now+reset, c.limit, 0, st); got.Remaining != full {
				t.Fatalf("%v: ResetAfter = %v, but Remaining then = %d, want %d", c, res.ResetAfter, got.Remaining, full)
			}
			if reset > 0 && full > 0 {
				if got, _ := evalCase(t, c.now+reset-1, c.limit, 0, st); got.Remaining == full {
					t.Fatalf("%v: ResetAfter = %v, but full Remaining 1 ms earlier", c, res.ResetAfter)
				}
			}
		}
	})
}

// admissions replays hits of n at the given times on one counter of l and
// returns the times (one per hit) of the admitted ones.
func admissions(t testing.TB, l limiter.Limit, times []int64, sizes []uint64) []int64 {
	var st limiter.State
	var got []int64
	for i, now := range times {
		h := limiter.Hit{Key: "k", Limit: l, Hits: sizes[i]}
		_, next, adm := evaluate(t, now, []limiter.Hit{h}, []limiter.State{st})
		if adm {
			st = next[0]
			for range sizes[i] {
				got = append(got, now)
			}
		}
	}
	return got
}

// randomTraffic returns ascending times and hit sizes: bursts and pauses
// around a window of w ms.
func randomTraffic(r *rand.Rand, w int64, count int) ([]int64, []uint64) {
	times, sizes := make([]int64, count), make([]uint64, count)
	now := t0 + r.Int64N(w)
	for i := range times {
		switch r.IntN(10) {
		case 0:
			now += r.Int64N(2 * w)
		case 1, 2, 3:
			now += r.Int64N(w/10 + 1)
		case 4:
		default:
			now += r.Int64N(3)
		}
		times[i] = now
		sizes[i] = uint64(1 + r.IntN(3))
	}
	return times, sizes
}

// maxInAnyWindow is the most admitted hits in any window (t - w, t].
func maxInAnyWindow(adm []int64, w int64) int {
	best, lo := 0, 0
	for hi := range adm {
		for adm[lo] <= adm[hi]-w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// TestNeverOverTheLimitInAnyWindow: the sliding log, and the sliding window
// with N > 1 sub-windows, never admit more than the limit in any window.
func TestNeverOverTheLimitInAnyWindow(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 11))
	for _, base := range []limiter.Limit{
		{Algorithm: limiter.SlidingLog},
		{Algorithm: limiter.SlidingWindow, SubWindows: 2},
		{Algorithm: limiter.SlidingWindow, SubWindows: 6},
		{Algorithm: limiter.SlidingWindow, SubWindows: 20},
		{Algorithm: limiter.SlidingWindow, SubWindows: 60},
	} {
		for range 300 {
			l := base
			l.Requests = uint64(1 + r.IntN(50))
			l.Window = time.Duration(60*(1+r.Int64N(100))) * time.Millisecond
			w := l.Window.Milliseconds()
			times, sizes := randomTraffic(r, w, 500)
			if got := maxInAnyWindow(admissions(t, l, times, sizes), w); got > int(l.Requests) {
				t.Fatalf("%+v admitted %d hits in one window", l, got)
			}
		}
	}
}

// TestTokenBucketBound: a token bucket never admits more than burst +
// rate x t hits in any interval of t ms, and admits exactly that much from
// a full bucket under a steady overload.
func TestTokenBucketBound(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 13))
	for range 300 {
		l := limiter.Limit{Algorithm: limiter.TokenBucket, Requests: uint64(1 + r.IntN(50)),
			Window: time.Duration(1+r.Int64N(5000)) * time.Millisecond}
		if r.IntN(2) == 0 {
			l.Burst = uint64(1 + r.IntN(60))
		}
		w := l.Window.Milliseconds()
		times, sizes := randomTraffic(r, w, 400)
		adm := admissions(t, l, times, sizes)
		B, R := float64(l.Capacity()), float64(l.Requests)
		for i := range adm {
			for j := i; j < len(adm); j++ {
				// Hits at times in [adm[i], adm[j]]: an interval of
				// adm[j]-adm[i] ms.
				if bound := B + R*float64(adm[j]-adm[i])/float64(w); float64(j-i+1) > bound+1e-9 {
					t.Fatalf("%+v admitted %d hits in %d ms, over burst + rate x t = %.3f", l, j-i+1, adm[j]-adm[i], bound)
				}
			}
		}
	}
	// Steady overload from a full bucket: burst at once, then the rate.
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Requests: 3, Window: time.Second, Burst: 5}
	var times []int64
	var sizes []uint64
	for ms := int64(0); ms < 10_000; ms += 10 {
		times, sizes = append(times, t0+ms), append(sizes, 1)
	}
	// 5 at once, then one every 333.3 ms: 29 more by t0+9990 (the 30th
	// token of the refill is due at t0+10000).
	if got := len(admissions(t, l, times, sizes)); got != 5+29 {
		t.Errorf("burst 5 at 3/s for 10 s admitted %d, want 34", got)
	}
}

// TestTokenBucket checks hand-computed Results of a 3/s bucket of 5.
func TestTokenBucket(t *testing.T) {
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Requests: 3, Window: time.Second, Burst: 5}
	var st limiter.State
	step := func(now int64, n uint64, want limiter.Result) {
		t.Helper()
		res, next := evalCase(t, now, l, n, st)
		want.OverLimit = !want.Allowed
		if !reflect.DeepEqual(res, want) {
			t.Fatalf("at +%d ms, %d hits: %+v, want %+v", now-t0, n, res, want)
		}
		if res.Allowed {
			st = next
		}
	}
	// A full bucket: 5 at once. Each token is 333.33 ms of refill.
	step(t0, 5, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(1667)})
	step(t0, 1, limiter.Result{RetryAfter: ms(334), ResetAfter: ms(1667)})
	// 334 ms refilled one token and 0.002 of the next; 6 tokens of 333.33
	// ms are spent, so the bucket is full at t0+2000.
	step(t0+334, 1, limiter.Result{Allowed: true, Remaining: 0, ResetAfter: ms(1666)})
	step(t0+334, 2, limiter.Result{RetryAfter: ms(666), ResetAfter: ms(1666)})
	// 6 > burst: never.
	step(t0+334, 6, limiter.Result{ExceedsLimit: true, RetryAfter: time.Second, ResetAfter: ms(1666)})
	step(t0+2001, 0, limiter.Result{Allowed: true, Remaining: 5})
}

// TestFixedWindowGivesThePeersCodes: inside one window, on single hits, the
// fixed window answers as envoyproxy/ratelimit does (count every hit, over
// limit once the count passes the limit), remaining included.
func TestFixedWindowGivesThePeersCodes(t *testing.T) {
	r := rand.New(rand.NewPCG(14, 15))
	for range 200 {
		l := limiter.Limit{Algorithm: limiter.FixedWindow, Requests: uint64(r.IntN(20)), Window: time.Minute}
		var st limiter.State
		peer := uint64(0)
		now := t0 + r.Int64N(1000)
		for i := range 40 {
			res, next := evalCase(t, now, l, 1, st)
			peer++
			peerOver := peer > l.Requests
			if res.Allowed == peerOver {
				t.Fatalf("%+v hit %d: Allowed %v, the peer's count %d says over %v", l, i+1, res.Allowed, peer, peerOver)
			}
			if !peerOver && res.Remaining != l.Requests-peer {
				t.Fatalf("%+v hit %d: Remaining %d, the peer's %d", l, i+1, res.Remaining, l.Requests-peer)
			}
			if res.Allowed {
				st = next
			}
			now += r.Int64N(1000)
		}
	}
}

// TestConcurrency: acquire 2 of 2, the third is denied; its release (Envoy
// sends one for a denied request too) and a release without a token free
// nothing; the first acquire's release frees its slot, once; the next
// acquire is admitted; a slot never released frees itself one window after
// its acquire.
func TestConcurrency(t *testing.T) {
	l := limiter.Limit{Algorithm: limiter.Concurrency, Requests: 2, Window: time.Minute}
	var st limiter.State
	apply := func(now int64, h limiter.Hit) limiter.Result {
		t.Helper()
		h.Key, h.Limit = "k", l
		res, next := evalOne(t, now, h, st)
		if res.Allowed {
			st = next
		}
		return res
	}
	for i, want := range []bool{true, true, false} {
		if got := apply(t0+int64(i), limiter.Hit{Hits: 1, SlotToken: uint64(i + 1)}); got.Allowed != want {
			t.Fatalf("acquire %d: %+v, want Allowed %v", i+1, got, want)
		}
	}
	for _, token := range []uint64{3, 0} {
		apply(t0+5, limiter.Hit{Hits: 1, Refund: true, SlotToken: token})
		if got := apply(t0+6, limiter.Hit{Hits: 1, SlotToken: 4}); got.Allowed {
			t.Fatalf("acquire after the release of token %d, which holds no slot: %+v, want denied", token, got)
		}
	}
	apply(t0+10, limiter.Hit{Hits: 1, Refund: true, SlotToken: 1})
	apply(t0+11, limiter.Hit{Hits: 1, Refund: true, SlotToken: 1}) // again: frees nothing
	if got := apply(t0+20, limiter.Hit{Hits: 1, SlotToken: 5}); !got.Allowed {
		t.Fatalf("acquire after a release: %+v, want Allowed", got)
	}
	if got := apply(t0+21, limiter.Hit{Hits: 1, SlotToken: 6}); got.Allowed {
		t.Fatalf("acquire after one release and its repeat: %+v, want denied (the repeat frees nothing)", got)
	}
	// A release never frees more than its token holds.
	apply(t0+30, limiter.Hit{Hits: 5, Refund: true, SlotToken: 2})
	apply(t0+30, limiter.Hit{Hits: 5, Refund: true, SlotToken: 5})
	if got := apply(t0+40, limiter.Hit{Hits: 0}); got.Remaining != 2 {
		t.Fatalf("after releasing more than held: Remaining %d, want 2", got.Remaining)
	}
	// Two leaked slots at t0+50: free at t0+50+window, not before.
	apply(t0+50, limiter.Hit{Hits: 2, SlotToken: 7})
	if got := apply(t0+50+minuteMs-1, limiter.Hit{Hits: 1, SlotToken: 8}); got.Allowed || got.RetryAfter != ms(1) {
		t.Fatalf("1 ms before the leaked slots expire: %+v, want denied, RetryAfter 1ms", got)
	}
	if got := apply(t0+50+minuteMs, limiter.Hit{Hits: 1, SlotToken: 8}); !got.Allowed {
		t.Fatalf("when the leaked slots expire: %+v, want Allowed", got)
	}
}

// benchLimits are the limits BenchmarkAlgorithms compares: 100 per minute
// under each algorithm.
var benchLimits = []struct {
	name string
	l    limiter.Limit
}{
	{"sliding_window_N=1", limiter.Limit{Requests: 100, Window: time.Minute}},
	{"sliding_window_N=50", limiter.Limit{Requests: 100, Window: time.Minute, SubWindows: limiter.DefaultSubWindows}},
	{"token_bucket", limiter.Limit{Requests: 100, Window: time.Minute, Algorithm: limiter.TokenBucket}},
	{"fixed_window", limiter.Limit{Requests: 100, Window: time.Minute, Algorithm: limiter.FixedWindow}},
	{"sliding_log", limiter.Limit{Requests: 100, Window: time.Minute, Algorithm: limiter.SlidingLog}},
	{"concurrency", limiter.Limit{Requests: 100, Window: time.Minute, Algorithm: limiter.Concurrency}},
}

// BenchmarkAlgorithms measures Evaluate and MemoryStore.Apply per algorithm
// on one counter at 1.5 times its limit's rate (a request every 400 ms of
// simulated time on 100 per minute), half of them admitted.
func BenchmarkAlgorithms(b *testing.B) {
	for _, bl := range benchLimits {
		b.Run("Evaluate/"+bl.name, func(b *testing.B) {
			hits := []limiter.Hit{{Key: "domain|k", Limit: bl.l, Hits: 1}}
			states := []limiter.State{{}}
			now := t0
			b.ReportAllocs()
			for b.Loop() {
				_, next, adm, err := limiter.Evaluate(now, hits, states)
				if err != nil {
					b.Fatal(err)
				}
				if adm {
					states[0] = next[0]
				}
				now += 400
			}
		})
		b.Run("MemoryStore.Apply/"+bl.name, func(b *testing.B) {
			var now atomic.Int64
			now.Store(t0)
			s := limiter.NewMemoryStore(limiter.MemoryOptions{Now: func() time.Time { return time.UnixMilli(now.Load()) }})
			hits := []limiter.Hit{{Key: "domain|k", Limit: bl.l, Hits: 1}}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Apply(ctx, hits); err != nil {
					b.Fatal(err)
				}
				now.Add(400)
			}
		})
	}
}

// TestLateRefund: limit 3,000 a minute, 3,000 hits, then a refund of all of
// them 1.5 s later (a stream's cost corrected when it ends, after its
// sub-window or window rolled), then one hit: admitted on every algorithm
// whose refunds mean giving hits back. The refund finds its hits wherever
// they still count (the sliding window's older sub-windows or previous
// window, the token bucket's debt), the newest first, never below zero.
func TestLateRefund(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    limiter.Limit
		at   int64 // the 3,000 hits' time
	}{
		{"sliding_window, 50 sub-windows", limiter.Limit{Requests: 3000, Window: time.Minute, SubWindows: limiter.DefaultSubWindows}, t0 + 500},
		{"sliding_window, 1 sub-window, across the minute", limiter.Limit{Requests: 3000, Window: time.Minute}, t0 - 500},
		{"fixed_window", limiter.Limit{Requests: 3000, Window: time.Minute, Algorithm: limiter.FixedWindow}, t0 + 500},
		{"token_bucket", limiter.Limit{Requests: 3000, Window: time.Minute, Algorithm: limiter.TokenBucket}, t0 + 500},
		{"sliding_log", limiter.Limit{Requests: 1000, Window: time.Minute, Algorithm: limiter.SlidingLog}, t0 + 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := min(tc.l.Requests, 3000)
			h := limiter.Hit{Key: "k", Limit: tc.l, Hits: n}
			res, st := evalOne(t, tc.at, h, limiter.State{})
			if !res.Allowed {
				t.Fatalf("%d hits: %+v, want Allowed", n, res)
			}
			h.Refund = true
			_, st = evalOne(t, tc.at+1500, h, st)
			h.Refund, h.Hits = false, 1
			if res, _ := evalOne(t, tc.at+1500, h, st); !res.Allowed || res.Remaining != n-1 {
				t.Fatalf("one hit after the refund of all %d, 1.5 s late: %+v, want Allowed with %d remaining", n, res, n-1)
			}
		})
	}
	// The refund never takes more than the window holds, nor hits that left it.
	l := limiter.Limit{Requests: 10, Window: time.Minute, SubWindows: 6}
	_, st := evalOne(t, t0, limiter.Hit{Key: "k", Limit: l, Hits: 4}, limiter.State{})
	_, st = evalOne(t, t0+30_000, limiter.Hit{Key: "k", Limit: l, Hits: 3}, st)
	_, st = evalOne(t, t0+70_000, limiter.Hit{Key: "k", Limit: l, Hits: 9, Refund: true}, st)
	if res, _ := evalOne(t, t0+70_000, limiter.Hit{Key: "k", Limit: l, Hits: 0}, st); res.Remaining != 10 {
		t.Fatalf("after refunding more than the window holds: %+v, want 10 remaining", res)
	}
	if got := st.Slots; got != nil {
		t.Fatalf("after refunding more than the window holds: slots %v, want none", got)
	}
}
