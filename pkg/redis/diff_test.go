package redis

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/pkg/limiter"
)

var diffSeed = flag.Uint64("diff.seed", 0, "seed of TestDifferential (0: from the clock)")

// identity is a counter's identity, as limiter.Hit documents it.
type identity struct {
	key string
	w   time.Duration
	alg limiter.Algorithm
}

func idOf(h limiter.Hit) identity { return identity{h.Key, h.Limit.Window, h.Limit.Algorithm} }

// readState reads a counter's State back from Redis, as its algorithm's Lua
// section stores it; a missing key is the zero State.
func readState(t testing.TB, c goredis.UniversalClient, prefix string, id identity) (limiter.State, bool) {
	t.Helper()
	key := counterKey(prefix, limiter.Hit{Key: id.key, Limit: limiter.Limit{Window: id.w, Algorithm: id.alg}})
	switch id.alg {
	case limiter.SlidingWindow:
		i, cur, prev, ok := readCounter(t, c, key)
		return limiter.State{At: i, N: [2]uint64{cur, prev}}, ok
	}
	t.Fatalf("readState: no reader for algorithm %v", id.alg)
	return limiter.State{}, false
}

// stateTTL is the TTL the script sets on a counter it writes with state s at
// nowMs: its expiry, at most two windows away (the sliding window: the end
// of window At+1).
func stateTTL(alg limiter.Algorithm, s limiter.State, w, nowMs int64) time.Duration {
	switch alg {
	case limiter.SlidingWindow:
		e := max(nowMs-s.At*w, 0) // 0 when the clock stepped back into an earlier window
		return time.Duration(2*w-e) * time.Millisecond
	}
	panic("stateTTL: no rule for algorithm " + alg.String())
}

// emptyState reports whether s holds nothing under alg, so that the script
// deletes its key (the sliding window: no hits in either window).
func emptyState(alg limiter.Algorithm, s limiter.State) bool {
	switch alg {
	case limiter.SlidingWindow:
		return s.N == [2]uint64{}
	}
	panic("emptyState: no rule for algorithm " + alg.String())
}

// TestDifferential drives limiter.Evaluate (the Go twin) and the Lua script
// with the same explicit clock and the same random requests, and requires
// identical Results, identical admissions and identical stored counters. The
// requests mix every algorithm, refunds, shadow hits and quota groups.
//
// Redis expires keys on its own (real) clock while the test clock is
// simulated, so a counter with a short window may vanish from Redis while the
// model still holds it. That is allowed only once at least the TTL the script
// set has passed in real time since the write; the model's counter is then
// reset to zero, as Redis's was.
func TestDifferential(t *testing.T) {
	t.Parallel()
	seed := *diffSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0x5115ce))

	var simNow atomic.Int64
	simNow.Store(1_700_000_000_123)
	s, c := newTestStore(t, Options{Now: func() time.Time { return time.UnixMilli(simNow.Load()) }})

	keys := []string{"a", "b", "", "}{", "%7D"}
	windows := []time.Duration{time.Second, time.Minute, 1501 * time.Millisecond, 7 * time.Millisecond,
		333 * time.Millisecond, time.Hour, 24 * time.Hour}
	// Beyond 2^53 the doubles round, but both twins round alike; 1<<60 hits
	// on a MaxUint64 limit saturate counters at limiter.MaxCount.
	requests := []uint64{0, 1, 2, 3, 5, 10, 100, 1 << 32, 1<<32 - 1, 1 << 60, math.MaxUint64}
	sizes := []uint64{0, 1, 1, 1, 2, 3, 5, 11, 200, 1 << 33, 1 << 60, limiter.MaxCount + 1}

	model := map[identity]limiter.State{}
	type write struct {
		at  time.Time // real time before the call that wrote
		ttl time.Duration
	}
	written := map[identity]write{}
	expired := 0

	// check compares Redis's counter for id with the model's.
	check := func(step int, id identity) {
		t.Helper()
		want := model[id]
		got, ok := readState(t, c, s.prefix, id)
		if got == want {
			return
		}
		if w, ok2 := written[id]; !ok && ok2 && time.Since(w.at) >= w.ttl {
			expired++
			delete(model, id)
			delete(written, id)
			return
		}
		t.Fatalf("step %d: counter %q/%v in redis = %+v (exists %v), model %+v", step, id.key, id.w, got, ok, want)
	}

	algorithms := limiter.Algorithms()
	const steps = 4000
	admittedN, quotaDenied, quotaOverAdmitted := 0, 0, 0
	for step := range steps {
		switch r := rng.IntN(100); {
		case r < 50:
			simNow.Add(rng.Int64N(20))
		case r < 85:
			simNow.Add(rng.Int64N(2000))
		case r < 97:
			simNow.Add(rng.Int64N(3 * 86_400_000)) // jumps of several windows
		default:
			simNow.Add(-rng.Int64N(100)) // a clock that steps back
		}
		n := 1 + rng.IntN(4)
		hits := make([]limiter.Hit, n)
		for i := range hits {
			hits[i] = limiter.Hit{
				Key:    keys[rng.IntN(len(keys))],
				Limit:  limiter.Limit{Requests: requests[rng.IntN(len(requests))], Window: windows[rng.IntN(len(windows))]},
				Hits:   sizes[rng.IntN(len(sizes))],
				Refund: rng.IntN(7) == 0,
				Shadow: rng.IntN(7) == 0,
				Quota:  rng.IntN(4) == 0,
			}
			hits[i].Limit.Algorithm = algorithms[rng.IntN(len(algorithms))]
		}
		for _, h := range hits {
			check(step, idOf(h))
		}
		counters := make([]limiter.State, n)
		for i, h := range hits {
			counters[i] = model[idOf(h)]
		}
		nowMs := simNow.Load()
		want, next, admitted, err := limiter.Evaluate(nowMs, hits, counters)
		if err != nil {
			t.Fatalf("step %d: Evaluate: %v", step, err)
		}

		before := time.Now()
		got, err := s.Apply(context.Background(), hits)
		if err != nil {
			t.Fatalf("step %d: Apply: %v", step, err)
		}
		if !equalResults(got, want) {
			// A counter may have expired in Redis between the check above
			// and the script. Accept that only for counters whose TTL had
			// passed by the time Apply returned, and only if zeroing some
			// of them explains the script's answer exactly.
			var expirable []identity
			for _, h := range hits {
				id := idOf(h)
				if w, ok := written[id]; ok && time.Since(w.at) >= w.ttl && !slices.Contains(expirable, id) {
					expirable = append(expirable, id)
				}
			}
			explained := false
			for mask := 1; mask < 1<<len(expirable) && !explained; mask++ {
				alt := slices.Clone(counters)
				for i, h := range hits {
					for j, id := range expirable {
						if mask&(1<<j) != 0 && id == idOf(h) {
							alt[i] = limiter.State{}
						}
					}
				}
				if w2, n2, a2, _ := limiter.Evaluate(nowMs, hits, alt); equalResults(got, w2) {
					want, next, admitted, explained = w2, n2, a2, true
					for j, id := range expirable {
						if mask&(1<<j) != 0 {
							expired++
							delete(model, id)
							delete(written, id)
						}
					}
				}
			}
			if !explained {
				for i := range hits {
					if got[i] != want[i] {
						t.Fatalf("step %d (now %d): hit %d %s:\n lua %+v\n go  %+v\nrequest %s\ncounters %+v",
							step, nowMs, i, describe(hits[i]), got[i], want[i], describeAll(hits), counters)
					}
				}
			}
		}
		for i, h := range hits {
			switch {
			case !h.Quota || h.Shadow || h.Refund || got[i].Allowed:
			case got[i].OverLimit:
				quotaDenied++
			case admitted:
				quotaOverAdmitted++
			}
		}
		if admitted {
			admittedN++
			for i, h := range hits {
				id := idOf(h)
				nc := next[i]
				if emptyState(id.alg, nc) {
					nc = limiter.State{} // the script deletes an empty counter
				}
				if nc != model[id] && nc != (limiter.State{}) {
					written[id] = write{at: before, ttl: stateTTL(id.alg, nc, h.Limit.Window.Milliseconds(), nowMs)}
				}
				model[id] = nc
			}
		}
		for _, h := range hits {
			check(step, idOf(h))
		}
	}
	t.Logf("%d steps, %d admitted, %d counters expired by TTL meanwhile; quota hits over limit: %d denying, %d in admitted requests",
		steps, admittedN, expired, quotaDenied, quotaOverAdmitted)
	if admittedN == 0 || admittedN == steps {
		t.Errorf("%d of %d requests admitted: the random mix does not exercise both outcomes", admittedN, steps)
	}
	if quotaDenied == 0 || quotaOverAdmitted == 0 {
		t.Errorf("quota hits over limit: %d denying, %d admitted by their group: the random mix does not exercise quota groups",
			quotaDenied, quotaOverAdmitted)
	}
}

func equalResults(a, b []limiter.Result) bool { return slices.Equal(a, b) }

func describe(h limiter.Hit) string {
	return fmt.Sprintf("{key %q limit %d/%v %v hits %d refund %v shadow %v quota %v}",
		h.Key, h.Limit.Requests, h.Limit.Window, h.Limit.Algorithm, h.Hits, h.Refund, h.Shadow, h.Quota)
}

func describeAll(hits []limiter.Hit) string {
	s := ""
	for _, h := range hits {
		s += describe(h) + " "
	}
	return s
}
