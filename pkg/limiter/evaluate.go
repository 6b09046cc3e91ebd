package limiter

import (
	"fmt"
	"time"
)

// Evaluate decides one request, the Go twin of the Redis Lua script
// (pkg/redis): the in-memory Store calls it, and a differential test requires
// the script to give the same answers. Each hit is decided by its Limit's
// Algorithm; a request may mix algorithms and stays all or nothing.
//
// nowMs is the clock in Unix milliseconds. states[i] is the stored State of
// hits[i]'s counter (hits with the same identity must be given the same
// State). Evaluate returns one Result per hit (OverLimit set as MarkOverLimit
// sets it), the State to store for each hit's counter, and whether the
// request is admitted. Only an admitted request changes a counter: each
// counter grows by the largest Hits among its non-refund hits and shrinks by
// the largest among its refunds, never below empty, saturating at MaxCount.
// Every hit is decided with the growth its counter takes (that largest Hits),
// each against its own Limit; a hit with more Hits than its Limit's Capacity
// is never Allowed (ExceedsLimit, RetryAfter one Window); a Limit's Ceiling
// lowers both what it admits and its Capacity, never what its counter
// counts. An Overdraw hit is
// Allowed while one more hit fits, whatever its Hits, and its counter grows
// by the largest Hits among its overdraw hits even when the request is
// denied (Limit.Overdraw); a CountDenied hit is decided as any other, and
// its counter grows by it even when the request is denied
// (Limit.CountDenied).
//
// The arithmetic is done in float64 in the same order as the Lua script, so
// both agree bit for bit; see sliding.go for where it is exact.
//
// Evaluate returns an error, and no Results, when len(states) != len(hits)
// or a hit does not Validate. It never changes hits or states; it
// neither keeps nor shares state and so is safe for concurrent use.
func Evaluate(nowMs int64, hits []Hit, states []State) (results []Result, next []State, admitted bool, err error) {
	if len(states) != len(hits) {
		return nil, nil, false, fmt.Errorf("limiter: evaluate %d hits with %d states, want one per hit", len(hits), len(states))
	}
	for i := range hits {
		if err := hits[i].Validate(); err != nil {
			return nil, nil, false, fmt.Errorf("limiter: evaluate hit %d of %d: %w", i, len(hits), err)
		}
	}
	results = make([]Result, len(hits))
	next = make([]State, len(hits))
	var sc evalScratch
	admitted = evaluate(nowMs, hits, states, results, next, &sc)
	return results, next, admitted, nil
}

// evalScratch holds the per-call working memory of evaluate, so that a Store
// can reuse it across calls instead of allocating it on every request.
type evalScratch struct {
	leader []int
	growth []counterGrowth // indexed by leader
	// penalized is, indexed by leader, whether the request started a
	// Penalty block on the counter (its state changes though denied).
	penalized []bool
}

// counterGrowth is what a request does to one counter: the change it makes
// when admitted, and od, what its overdraw and CountDenied hits make it
// take whatever the outcome (at most inc).
type counterGrowth struct {
	change
	od uint64
}

// overdrawn reports whether the counter led by hit i grows by overdraw or
// CountDenied hits even when the request is denied; valid after evaluate.
func (sc *evalScratch) overdrawn(i int) bool { return sc.growth[i].od > 0 || sc.penalized[i] }

// evaluate is Evaluate writing into results and next (both len(hits)) and
// using sc for its working memory. Every Limit must already Validate.
func evaluate(nowMs int64, hits []Hit, states []State, results []Result, next []State, sc *evalScratch) (admitted bool) {
	leader, g := growth(hits, sc)

	// Roll every counter to now and decide each hit with the growth its
	// counter will really take, so that a hit with fewer Hits (or a shadow
	// hit with more) cannot let its limit be passed.
	for i, h := range hits {
		a := algorithms[h.Limit.Algorithm]
		next[i] = a.roll(states[i], nowMs, h.Limit)
		next[i].BlockUntil, next[i].BlockLevel = states[i].BlockUntil, states[i].BlockLevel
		n := g[leader[i]].inc
		switch {
		case h.Refund:
			results[i] = Result{Allowed: true}
		case blocked(h, states[i], nowMs):
			// ExceedsLimit as the store's twin flags it.
			results[i] = Result{RetryAfter: msDuration(states[i].BlockUntil - nowMs), Blocked: true,
				ExceedsLimit: !h.Limit.Overdraw && n > h.Limit.CeilingOf(a.capacity(h.Limit))}
			g[leader[i]].od = 0 // a blocked counter consumes nothing
		case h.Limit.Overdraw:
			// Allowed while the counter is under the limit, whatever n.
			ok, retry := a.decide(next[i], nowMs, h.Limit, 1)
			results[i] = Result{Allowed: ok, RetryAfter: msDuration(retry)}
		case n > h.Limit.CeilingOf(a.capacity(h.Limit)):
			results[i] = Result{ExceedsLimit: true, RetryAfter: h.Limit.Window}
		default:
			ok, retry := a.decide(next[i], nowMs, h.Limit, n)
			results[i] = Result{Allowed: ok, RetryAfter: msDuration(retry)}
		}
	}
	admitted = MarkOverLimit(hits, results)
	penalize(nowMs, hits, states, results, next, sc)

	// Consume once per counter, on the state of its first hit, and give
	// every hit of the counter the result. A denied request still consumes
	// its overdraw and CountDenied hits.
	changed := false
	for i, h := range hits {
		if leader[i] != i {
			continue
		}
		a := algorithms[h.Limit.Algorithm]
		p := next[i]
		switch {
		case admitted:
			next[i] = a.consume(next[i], nowMs, h.Limit, g[i].change)
		case g[i].od > 0:
			next[i] = a.consume(next[i], nowMs, h.Limit, change{inc: g[i].od, acquire: g[i].acquire})
		default:
			changed = changed || sc.penalized[i]
			continue
		}
		next[i].BlockUntil, next[i].BlockLevel = p.BlockUntil, p.BlockLevel
		changed = true
	}
	if changed {
		for i := range hits {
			next[i] = next[leader[i]]
		}
	}

	// Report from the state after the outcome.
	for i, h := range hits {
		rem, reset := algorithms[h.Limit.Algorithm].report(next[i], nowMs, h.Limit, results[i].Allowed)
		if h.Limit.Penalty.On() && !results[i].Allowed {
			reset = max(reset, next[i].BlockUntil-nowMs)
		}
		results[i].Remaining, results[i].ResetAfter = rem, msDuration(reset)
	}
	return admitted
}

// blocked reports whether h is decided by a Penalty block on its counter,
// whose stored state is s: a hit that is not a refund, at nowMs before the
// block ends.
func blocked(h Hit, s State, nowMs int64) bool {
	return h.Limit.Penalty.On() && !h.Refund && nowMs < s.BlockUntil
}

// penalize starts a Penalty block on each counter whose hit its limit
// denied while the counter was not blocked (Penalty), once per counter,
// writing the block into next (at the counter's leader) and into the
// RetryAfter of the counter's denied hits, and recording it in
// sc.penalized.
func penalize(nowMs int64, hits []Hit, states []State, results []Result, next []State, sc *evalScratch) {
	sc.penalized = grow(sc.penalized, len(hits))
	leader := sc.leader
	for i, h := range hits {
		l := leader[i]
		if !h.Limit.Penalty.On() || h.Refund || results[i].Allowed || blocked(h, states[i], nowMs) || sc.penalized[l] {
			continue
		}
		sc.penalized[l] = true
		next[l].BlockUntil, next[l].BlockLevel = offend(states[i], nowMs, h.Limit.Penalty)
	}
	for i, h := range hits {
		if l := leader[i]; sc.penalized[l] && !h.Refund && !results[i].Allowed {
			results[i].RetryAfter = max(results[i].RetryAfter, msDuration(next[l].BlockUntil-nowMs))
			results[i].Blocked = true
		}
	}
}

// growth maps each hit to the first hit on its counter (its leader) and
// returns, indexed by leader, what the request does to the counter
// (counterGrowth): the largest Hits among its non-refund hits (inc), among
// its refunds (dec) and among its overdraw and CountDenied non-refund hits
// (od, at most inc), and the largest SlotToken among its acquires and among
// its releases. The slices are sc's.
func growth(hits []Hit, sc *evalScratch) (leader []int, g []counterGrowth) {
	n := len(hits)
	sc.leader = groupLeaders(hits, grow(sc.leader, n))
	sc.growth = grow(sc.growth, n)
	leader, g = sc.leader, sc.growth
	for i, h := range hits {
		c := &g[leader[i]]
		switch {
		case h.Refund:
			c.dec = max(c.dec, h.Hits)
			c.release = max(c.release, h.SlotToken)
			continue
		case h.Limit.Overdraw || h.Limit.CountDenied:
			c.od = max(c.od, h.Hits)
		}
		c.inc = max(c.inc, h.Hits)
		c.acquire = max(c.acquire, h.SlotToken)
	}
	return leader, g
}

// groupLeaders maps each hit to the first hit with the same counter identity,
// writing into leader (len(hits)) and returning it.
func groupLeaders(hits []Hit, leader []int) []int {
	if len(hits) <= 16 {
		for i := range hits {
			h := &hits[i]
			leader[i] = i
			for j := range i {
				// Field by field, the cheap ones first: comparing counterIDs
				// costs a call per pair.
				o := &hits[j]
				if o.Limit.Window == h.Limit.Window && o.Limit.Algorithm == h.Limit.Algorithm && o.Key == h.Key &&
					o.Limit.Calendar == h.Limit.Calendar && o.Limit.Penalty == h.Limit.Penalty &&
					(o.Limit.SubWindows == h.Limit.SubWindows || o.Limit.SubWindowCount() == h.Limit.SubWindowCount()) {
					leader[i] = j
					break
				}
			}
		}
		return leader
	}
	first := make(map[counterID]int, len(hits))
	for i, h := range hits {
		id := idOf(h)
		if j, ok := first[id]; ok {
			leader[i] = j
		} else {
			first[id] = i
			leader[i] = i
		}
	}
	return leader
}

// counterID is the identity of one counter, as Hit documents it.
type counterID struct {
	key    string
	window time.Duration
	alg    Algorithm
	sub    uint8  // Limit.SubWindowCount()
	pen    uint32 // penaltyID(Limit.Penalty): a Penalty is 32 bytes, too many for every counter
	cal    Calendar
}

func idOf(h Hit) counterID {
	return counterID{key: h.Key, window: h.Limit.Window, alg: h.Limit.Algorithm, sub: uint8(h.Limit.SubWindowCount()),
		cal: h.Limit.Calendar, pen: penaltyID(h.Limit.Penalty)}
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
