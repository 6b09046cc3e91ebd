package limitertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// Shares is a store of shared limits (limiter.Claim), as pkg/rlqs uses one:
// limiter.MemoryShares and pkg/redis's Shares.
type Shares interface {
	Share(ctx context.Context, claims []limiter.Claim) ([]limiter.Share, error)
	Release(ctx context.Context, claims []limiter.Claim) error
}

// TestShares runs the shared-limit contract against stores made by
// newStore, which must use now as its only clock (a Redis store passes it to
// its script), as TestStore's do. Subtests run in parallel and use random
// keys, so one Redis serves them all.
//
// It checks hand-computed divisions (alone, equal, proportional above the
// limit, headroom under it, keeping a share within 10%, waiting for the
// others to shrink), expiry after Hold, Release, the independence of limits
// (windows, unusual keys), refused claims, exact agreement with
// limiter.Divide run on a model over random sequences (with the sum of live
// shares never above the limit), and that concurrent claims keep that sum.
func TestShares(t *testing.T, newStore func(t *testing.T, now func() time.Time) Shares) {
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *shareEnv)
	}{
		{"Alone", testShareAlone},
		{"EqualDemandConverges", testShareEqual},
		{"ProportionalOverLimit", testShareProportional},
		{"HeadroomUnderLimit", testShareHeadroom},
		{"KeepsShareWithinTenPercent", testShareHysteresis},
		{"KeepsWhatIsHandedOut", testShareKeep},
		{"ExpiresAfterHold", testShareExpiry},
		{"Release", testShareRelease},
		{"LimitsAreIndependent", testShareIndependent},
		{"InvalidClaims", testShareInvalid},
		{"MatchesDivide", testShareModel},
		{"Concurrent", testShareConcurrent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := testclock.New(startOfHourAhead())
			e := &shareEnv{t: t, clock: clock, store: newStore(t, clock.Now), key: randomPrefix()}
			tc.run(t, e)
		})
	}
}

// startOfHourAhead is the start of an hour between one and two hours from
// now, TestStore's clock.
func startOfHourAhead() time.Time {
	return time.Now().Truncate(time.Hour).Add(2 * time.Hour)
}

func randomPrefix() string { return fmt.Sprintf("shares-%016x:", rand.Uint64()) }

type shareEnv struct {
	t     *testing.T
	clock *testclock.Clock
	store Shares
	key   string
}

// claim is a claim on the env's limit "l" of one minute, held 10 s.
func (e *shareEnv) claim(holder string, limit, demand uint64) limiter.Claim {
	return limiter.Claim{Key: e.key + "l", Window: time.Minute, Holder: holder, Limit: limit, Demand: demand, Hold: 10 * time.Second}
}

// share sends one claim and returns its Share, failing the test on error.
func (e *shareEnv) share(c limiter.Claim) limiter.Share {
	e.t.Helper()
	got, err := e.store.Share(context.Background(), []limiter.Claim{c})
	if err != nil {
		e.t.Fatalf("Share(%+v): %v", c, err)
	}
	if len(got) != 1 {
		e.t.Fatalf("Share(1 claim) = %d shares", len(got))
	}
	return got[0]
}

// steps claims in order, each holder's demand as given, and requires each
// Share to be want's.
func (e *shareEnv) steps(limit uint64, steps []shareStep) {
	e.t.Helper()
	for i, s := range steps {
		got := e.share(e.claim(s.holder, limit, s.demand))
		if got != s.want {
			e.t.Fatalf("step %d: %s claims demand %d of %d: %+v, want %+v", i, s.holder, s.demand, limit, got, s.want)
		}
	}
}

type shareStep struct {
	holder string
	demand uint64
	want   limiter.Share
}

func sh(requests uint64, holders int, demand uint64) limiter.Share {
	return limiter.Share{Requests: requests, Holders: holders, Demand: demand}
}

func testShareAlone(t *testing.T, e *shareEnv) {
	e.steps(10, []shareStep{
		{"a", 5000, sh(7, 1, 5000)},     // under the limit: 5 + 5/2, half the headroom kept for a newcomer
		{"a", 90_000, sh(10, 1, 90000)}, // over it: all of it
		{"a", 0, sh(5, 1, 0)},           // idle: half of it
	})
	if got := e.share(e.claim("z", 0, 1000)); got != sh(0, 2, 1000) {
		t.Errorf("a limit of 0: %+v, want nothing", got)
	}
}

func testShareEqual(t *testing.T, e *shareEnv) {
	e.steps(100, []shareStep{
		{"a", 50_000, sh(75, 1, 50_000)},  // 50 + 50/2
		{"b", 50_000, sh(25, 2, 100_000)}, // target 50: what a left free, until a claims again
		{"a", 50_000, sh(50, 2, 100_000)},
		{"b", 50_000, sh(50, 2, 100_000)},
		{"a", 50_000, sh(50, 2, 100_000)},
	})
}

func testShareProportional(t *testing.T, e *shareEnv) {
	e.steps(100, []shareStep{
		{"a", 150_000, sh(100, 1, 150_000)},
		{"b", 50_000, sh(0, 2, 200_000)},
		{"a", 150_000, sh(75, 2, 200_000)}, // 100 * 150/200
		{"b", 50_000, sh(25, 2, 200_000)},  // 100 * 50/200
		{"c", 200_000, sh(0, 3, 400_000)},  // 50 * 200/400, nothing free yet
		{"a", 150_000, sh(37, 3, 400_000)}, // floor(37.5)
		{"b", 50_000, sh(12, 3, 400_000)},  // floor(12.5)
		{"c", 200_000, sh(50, 3, 400_000)},
	})
}

func testShareHeadroom(t *testing.T, e *shareEnv) {
	e.steps(100, []shareStep{
		{"a", 30_000, sh(65, 1, 30_000)}, // 30 + 70/2: one part of the headroom per holder, one kept free
		{"b", 10_000, sh(30, 2, 40_000)}, // a newcomer gets its target, 10 + 60/3, from what is free
		{"a", 30_000, sh(50, 2, 40_000)}, // 30 + 60/3
		{"b", 10_000, sh(30, 2, 40_000)}, // 10 + 60/3
		{"b", 0, sh(23, 2, 30_000)},      // 0 + 70/3: |23-30|*10 = 70 > 30, so it shrinks
	})
}

func testShareHysteresis(t *testing.T, e *shareEnv) {
	e.steps(100, []shareStep{
		{"a", 50_000, sh(75, 1, 50_000)},
		{"b", 50_000, sh(25, 2, 100_000)},
		{"a", 50_000, sh(50, 2, 100_000)},
		{"b", 50_000, sh(50, 2, 100_000)},
		{"a", 54_000, sh(50, 2, 104_000)}, // target 51 (100*54/104): within 10% above 50, kept
		{"b", 46_000, sh(46, 2, 100_000)}, // target 46: within 10% below 50, but a needs 54: shrinks
		{"a", 60_000, sh(54, 2, 106_000)}, // target 56: |56-50|*10 = 60 > 50, but only 54 free
		{"b", 40_000, sh(40, 2, 100_000)}, // target 40: shrinks
		{"a", 60_000, sh(60, 2, 100_000)}, // target 60, now free
	})
	// Three holders: a may keep 34 against a target of 31 while the others
	// still get theirs, and gives it up once they would not.
	e.key += "3:"
	e.steps(100, []shareStep{
		{"a", 30_000, sh(65, 1, 30_000)},
		{"b", 30_000, sh(35, 2, 60_000)}, // target 43 (30 + 40/3), 35 free
		{"a", 33_000, sh(45, 2, 63_000)}, // 33 + 37/3
		{"b", 30_000, sh(42, 2, 63_000)}, // 30 + 37/3
		{"c", 30_000, sh(13, 3, 93_000)}, // target 31 (30 + 7/4), 13 free
		{"b", 30_000, sh(31, 3, 93_000)},
		{"a", 33_000, sh(34, 3, 93_000)},
		{"c", 30_000, sh(31, 3, 93_000)},
		{"a", 32_000, sh(34, 3, 92_000)}, // target 34 (32 + 8/4)
		{"b", 30_000, sh(31, 3, 92_000)}, // target 32: 31 is within 10% below it, kept
		{"a", 28_000, sh(34, 3, 88_000)}, // target 31 (28 + 12/4): 34 kept, b and c need 33 each
		{"b", 36_000, sh(35, 3, 94_000)}, // target 37, 35 free
		{"c", 31_000, sh(31, 3, 95_000)},
		{"a", 31_000, sh(31, 3, 98_000)}, // target 31: keeping 34 would leave b and c 66 < 36 + 31
	})
}

// testShareKeep: a claim's Keep holds the claimant's share up to what it
// handed out, never above its current share nor what the others leave; a
// claim keeping some takes a larger target at once.
func testShareKeep(t *testing.T, e *shareEnv) {
	keep := func(holder string, demand, keep uint64, want limiter.Share) {
		t.Helper()
		c := e.claim(holder, 100, demand)
		c.Keep = keep
		if got := e.share(c); got != want {
			t.Fatalf("%s claims demand %d keeping %d: %+v, want %+v", holder, demand, keep, got, want)
		}
	}
	keep("a", 50_000, 0, sh(75, 1, 50_000))
	keep("a", 0, 60, sh(60, 1, 0))        // target 50, but 60 handed out: 60
	keep("a", 0, 90, sh(60, 1, 0))        // never raised to Keep: 60
	keep("a", 0, 0, sh(50, 1, 0))         // nothing kept: the target
	keep("a", 2_000, 40, sh(51, 1, 2000)) // target 51 within 10% above 50, taken at once
	keep("b", 50_000, 0, sh(49, 2, 52_000))
	keep("a", 0, 100, sh(51, 2, 50_000)) // keeps its 51, no more
}

func testShareExpiry(t *testing.T, e *shareEnv) {
	e.steps(100, []shareStep{
		{"a", 50_000, sh(75, 1, 50_000)},
		{"b", 50_000, sh(25, 2, 100_000)},
	})
	e.clock.Advance(10*time.Second - time.Millisecond)
	e.steps(100, []shareStep{{"b", 50_000, sh(25, 2, 100_000)}}) // a's hold has 1 ms left: a keeps 75
	e.clock.Advance(time.Millisecond)
	e.steps(100, []shareStep{{"b", 50_000, sh(75, 1, 50_000)}}) // a's hold ended: reclaimed
}

func testShareRelease(t *testing.T, e *shareEnv) {
	e.steps(100, []shareStep{
		{"a", 50_000, sh(75, 1, 50_000)},
		{"b", 50_000, sh(25, 2, 100_000)},
		{"a", 50_000, sh(50, 2, 100_000)},
		{"b", 50_000, sh(50, 2, 100_000)},
	})
	ctx := context.Background()
	if err := e.store.Release(ctx, []limiter.Claim{e.claim("a", 0, 0), e.claim("never", 0, 0)}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	e.steps(100, []shareStep{{"b", 50_000, sh(75, 1, 50_000)}})
	if err := e.store.Release(ctx, nil); err != nil {
		t.Fatalf("Release(nil): %v", err)
	}
}

func testShareIndependent(t *testing.T, e *shareEnv) {
	keys := []string{"", "}", "%7D", "{x}", "%", strings.Repeat("k", 1000), strings.Repeat("k", 999) + "j", "\xff\x00"}
	windows := []time.Duration{time.Second, time.Minute}
	// Every (key, window) is its own limit: "a" alone in each gets its
	// demand and half the headroom, 1 + 6/2.
	for _, k := range keys {
		for _, w := range windows {
			c := limiter.Claim{Key: e.key + k, Window: w, Holder: "a", Limit: 7, Demand: 1000, Hold: time.Second}
			if got := e.share(c); got != sh(4, 1, 1000) {
				t.Errorf("first claim on (%q, %v): %+v, want 4 of 7, as alone", k, w, got)
			}
		}
	}
}

func testShareInvalid(t *testing.T, e *shareEnv) {
	valid := e.claim("a", 10, 1000)
	for _, tc := range []struct {
		name  string
		edit  func(*limiter.Claim)
		field string
	}{
		{"no holder", func(c *limiter.Claim) { c.Holder = "" }, "holder"},
		{"no window", func(c *limiter.Claim) { c.Window = 0 }, "window"},
		{"sub-millisecond window", func(c *limiter.Claim) { c.Window = 1500 * time.Microsecond }, "window"},
		{"no hold", func(c *limiter.Claim) { c.Hold = 0 }, "hold"},
		{"demand over the maximum", func(c *limiter.Claim) { c.Demand = limiter.MaxDemand + 1 }, "demand"},
		{"limit over the maximum", func(c *limiter.Claim) { c.Limit = limiter.MaxShared + 1 }, "limit"},
		{"keep over the maximum", func(c *limiter.Claim) { c.Keep = limiter.MaxShared + 1 }, "keep"},
	} {
		bad := valid
		tc.edit(&bad)
		_, err := e.store.Share(context.Background(), []limiter.Claim{valid, bad})
		if err == nil || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%s: Share error %v, want one naming %s", tc.name, err, tc.field)
		}
	}
	// None of the refused calls divided the valid claim either.
	if got := e.share(e.claim("b", 10, 1000)); got != sh(5, 1, 1000) {
		t.Errorf("after refused claims: %+v, want b alone (1 + 9/2)", got)
	}
}

// testShareModel runs random claims, releases and clock moves on a few
// holders and limits, and requires every Share to equal limiter.Divide's on
// a model of the holdings, and the live shares of each limit to add up to at
// most its limit.
func testShareModel(t *testing.T, e *shareEnv) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 0))
	model := map[string]map[string]limiter.Holding{}
	holders := []string{"a", "b", "c", "d", "e"}
	limits := map[string]uint64{"l0": 37, "l1": 5, "l2": 0}
	for i := range 400 {
		lim := fmt.Sprintf("l%d", r.IntN(len(limits)))
		c := limiter.Claim{Key: e.key + lim, Window: time.Minute, Holder: holders[r.IntN(len(holders))],
			Limit: limits[lim], Demand: uint64(r.IntN(80_000)), Hold: time.Duration(1+r.IntN(3)) * time.Second}
		if r.IntN(2) == 0 {
			c.Keep = uint64(r.IntN(int(c.Limit) + 2))
		}
		now := e.clock.Now().UnixMilli()
		switch op := r.IntN(10); {
		case op == 0:
			if err := e.store.Release(context.Background(), []limiter.Claim{c}); err != nil {
				t.Fatalf("seed %d step %d: Release: %v", seed, i, err)
			}
			delete(model[lim], c.Holder)
		case op == 1:
			e.clock.Advance(time.Duration(r.IntN(1500)) * time.Millisecond)
		default:
			var want limiter.Share
			want, model[lim] = limiter.Divide(model[lim], c, now)
			if got := e.share(c); got != want {
				t.Fatalf("seed %d step %d: %+v: %+v, want %+v (Divide)", seed, i, c, got, want)
			}
			var sum uint64
			for _, h := range model[lim] {
				if h.Expires > now {
					sum += h.Share
				}
			}
			if sum > c.Limit {
				t.Fatalf("seed %d step %d: live shares add up to %d, over the limit %d", seed, i, sum, c.Limit)
			}
		}
	}
}

// testShareConcurrent has several holders claim one limit at once with
// changing demand; each holder's last Share is its holding, and those must
// add up to at most the limit.
func testShareConcurrent(t *testing.T, e *shareEnv) {
	const holders, claims, limit = 8, 40, 100
	last := make([]limiter.Share, holders)
	var wg sync.WaitGroup
	for h := range holders {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(h), 1))
			for range claims {
				got, err := e.store.Share(context.Background(), []limiter.Claim{e.claim(fmt.Sprint("h", h), limit, uint64(r.IntN(100_000)))})
				if err != nil {
					t.Errorf("Share: %v", err)
					return
				}
				last[h] = got[0]
			}
		})
	}
	wg.Wait()
	var sum uint64
	for _, s := range last {
		sum += s.Requests
	}
	if sum > limit {
		t.Errorf("after concurrent claims the shares add up to %d, over the limit %d: %+v", sum, limit, last)
	}
	if got := e.share(e.claim("h0", limit, 0)); got.Holders != holders {
		t.Errorf("holders = %d, want %d", got.Holders, holders)
	}
}
