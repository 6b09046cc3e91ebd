package limitertest

import (
	"context"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// The classes of a pool (limiter.Limit.Ceiling): a pool of 1,000 a second
// with default at 80% and critical at 100%, the load-shedding scenario the
// contract requires of every store.
const (
	poolLimit       = 1000
	defaultCeiling  = 800 // permille
	criticalCeiling = 1000
)

// class returns pool at ceiling (permille).
func class(pool limiter.Limit, ceiling uint16) limiter.Limit {
	pool.Ceiling = ceiling
	return pool
}

// testPoolClassesUnderOverload offers, for 10 s of the store's clock in
// steps of 10 ms (longer when real time outruns them), default 2,000 a second and critical 150 a second, each
// step's requests sent at once from several callers in random order:
// critical is admitted for at least 99% of what it offered, default while
// the pool (critical included) is within default's ceiling, so default and
// critical together about 800 a second, and the pool, counting the
// admitted requests' times, never passes 1,000 in any window of one second.
func testPoolClassesUnderOverload(t *testing.T, e *env) {
	pool := limiter.Limit{Requests: poolLimit, Window: time.Second, SubWindows: limiter.DefaultSubWindows}
	def, crit := class(pool, defaultCeiling), class(pool, criticalCeiling)
	key := e.key("checkout_db")
	const (
		callers   = 4
		step      = 10 * time.Millisecond
		length    = 10 * time.Second
		defRate   = 2_000 // a second of the store's clock
		critRate  = 150
		perSecond = float64(time.Second)
	)
	r := rand.New(rand.NewPCG(rand.Uint64(), 29))
	var admitted []int64 // Unix ms of every admitted hit
	offered, got := map[uint16]int{}, map[uint16]int{}
	// The clock keeps up with real time (keepUp): Redis expires counters in
	// real time, so a step that took longer than the clock moved would lose
	// the counter's hits and admit them again. Each step offers the rates'
	// share of the time the clock moved since the last one, so the offered
	// rates stay 2,000 and 150 a second of the store's clock either way.
	start := e.clk.Now()
	last, owedDef, owedCrit := start.Add(-step), 0.0, 0.0
	for now := start; now.Before(start.Add(length)); now = e.clk.Now() {
		dt := float64(now.Sub(last)) / perSecond
		last = now
		owedDef += defRate * dt
		owedCrit += critRate * dt
		var reqs []limiter.Limit
		for ; owedDef >= 1; owedDef-- {
			reqs = append(reqs, def)
		}
		for ; owedCrit >= 1; owedCrit-- {
			reqs = append(reqs, crit)
		}
		r.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
		ok := sendAll(t, e.store, key, reqs, callers)
		for i, l := range reqs {
			offered[l.Ceiling]++
			if ok[i] {
				got[l.Ceiling]++
				admitted = append(admitted, now.UnixMilli())
			}
		}
		e.clk.Advance(step)
		e.keepUp()
	}
	seconds := float64(e.clk.Now().Sub(start)) / perSecond
	t.Logf("critical %d of %d admitted, default %d of %d", got[criticalCeiling], offered[criticalCeiling], got[defaultCeiling], offered[defaultCeiling])
	if c, o := got[criticalCeiling], offered[criticalCeiling]; float64(c) < 0.99*float64(o) {
		t.Errorf("critical admitted %d of %d offered, want at least 99%%", c, o)
	}
	// Default is admitted only while the pool, critical's hits included, is
	// within 800: default and critical together fill about 800 a second
	// (critical a little more, in the reserve above), so default alone
	// about 800 - 150.
	d, both := float64(got[defaultCeiling])/seconds, float64(got[defaultCeiling]+got[criticalCeiling])/seconds
	if both < 760 || both > 840 || d < 600 || d > 690 {
		t.Errorf("default admitted %.0f a second, with critical %.0f; want about 650, with critical about 800", d, both)
	}
	sort.Slice(admitted, func(i, j int) bool { return admitted[i] < admitted[j] })
	if most := maxInAnyWindow(admitted, 1000); most > poolLimit {
		t.Errorf("the pool admitted %d requests in one window of 1 s, over its %d", most, poolLimit)
	}
}

// sendAll sends one hit of each limit in reqs on key from callers
// goroutines and reports which were admitted.
func sendAll(t *testing.T, s limiter.Store, key string, reqs []limiter.Limit, callers int) []bool {
	ok := make([]bool, len(reqs))
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Go(func() {
			for i := c; i < len(reqs); i += callers {
				res, err := s.Apply(context.Background(), []limiter.Hit{{Key: key, Limit: reqs[i], Hits: 1}})
				if err != nil {
					errs <- err
					return
				}
				ok[i] = res[0].Allowed
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Apply: %v", err)
	}
	return ok
}

// maxInAnyWindow is the most times of adm (ascending) in any window
// (t - w, t].
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

// testPoolClassesConcurrency runs a concurrency pool of 20 in flight,
// default at 80% and critical at 100%: callers acquire and release at
// random; in flight never passes 20, default never holds the pool above
// 16, and critical is never shed while in flight is under its ceiling.
// The calls are sequential, so that what is in flight before each is
// known; apply checks every Result against limiter.Evaluate.
func testPoolClassesConcurrency(t *testing.T, e *env) {
	e.followReal = true
	pool := limiter.Limit{Algorithm: limiter.Concurrency, Requests: 20, Window: time.Minute}
	def, crit := class(pool, defaultCeiling), class(pool, criticalCeiling)
	key := e.key("workers")
	r := rand.New(rand.NewPCG(rand.Uint64(), 30))
	type slot struct {
		l     limiter.Limit
		token uint64
	}
	var held []slot // the requests in flight, with their classes
	shed := map[uint16]int{}
	for range 1500 {
		if len(held) > 0 && r.IntN(5) < 2 {
			i := r.IntN(len(held))
			e.apply(limiter.Hit{Key: key, Limit: held[i].l, Hits: 1, Refund: true, SlotToken: held[i].token})
			held = append(held[:i], held[i+1:]...)
			continue
		}
		l := def
		if r.IntN(4) == 0 {
			l = crit
		}
		token := limiter.NewSlotToken()
		res := e.apply(limiter.Hit{Key: key, Limit: l, Hits: 1, SlotToken: token})[0]
		switch {
		case res.Allowed:
			held = append(held, slot{l, token})
		case l.Ceiling == criticalCeiling && len(held) < 20:
			t.Fatalf("critical shed with %d of 20 in flight", len(held))
		default:
			shed[l.Ceiling]++
			// Envoy releases a shed request too: that frees nothing.
			e.apply(limiter.Hit{Key: key, Limit: l, Hits: 1, Refund: true, SlotToken: token})
		}
		if len(held) > 20 || res.Allowed && l.Ceiling == defaultCeiling && len(held) > 16 {
			t.Fatalf("%d in flight after an admitted request at %d permille", len(held), l.Ceiling)
		}
		e.clk.Advance(ms(r.Int64N(3)))
	}
	if shed[defaultCeiling] == 0 {
		t.Errorf("no default request shed: the scenario never reached default's ceiling")
	}
}

// testPoolClassesEveryAlgorithm drives one pool of each algorithm with
// random classes, sizes, refunds and clock moves; apply compares every
// Result with limiter.Evaluate, so the store applies each class's ceiling
// exactly as the Go twins do.
func testPoolClassesEveryAlgorithm(t *testing.T, e *env) {
	e.followReal = true
	r := rand.New(rand.NewPCG(rand.Uint64(), 31))
	pools := []limiter.Limit{
		limit(10, time.Second),
		{Requests: 12, Window: 6 * time.Second, SubWindows: 6},
		{Requests: 4, Window: time.Second, Algorithm: limiter.TokenBucket, Burst: 9},
		algLimit(limiter.FixedWindow, 10, time.Second),
		algLimit(limiter.SlidingLog, 10, 3*time.Second),
		algLimit(limiter.Concurrency, 10, 2*time.Second),
	}
	ceilings := []uint16{0, 1000, 800, 500, 333, 1}
	for range 500 {
		p := pools[r.IntN(len(pools))]
		hits := make([]limiter.Hit, 1+r.IntN(3))
		for i := range hits {
			hits[i] = limiter.Hit{Key: e.key(p.Algorithm.String()), Limit: class(p, ceilings[r.IntN(len(ceilings))]),
				Hits: uint64(r.IntN(4)), Refund: r.IntN(6) == 0, Shadow: r.IntN(10) == 0, SlotToken: uint64(1 + r.IntN(3))}
		}
		e.apply(hits...)
		switch r.IntN(5) {
		case 0:
			e.clk.Advance(ms(1 + r.Int64N(1_000)))
		case 1:
			e.clk.Advance(ms(r.Int64N(3)))
		}
	}
}
