package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
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
	sub int64
}

func idOf(h limiter.Hit) identity {
	return identity{h.Key, h.Limit.Window, h.Limit.Algorithm, h.Limit.SubWindowCount()}
}

func (id identity) limit() limiter.Limit {
	return limiter.Limit{Window: id.w, Algorithm: id.alg, SubWindows: uint8(id.sub)}
}

// readState reads a counter's State back from Redis, as its algorithm's Lua
// section stores it; a missing key is the zero State.
func readState(t testing.TB, c goredis.UniversalClient, prefix string, id identity) (limiter.State, bool) {
	t.Helper()
	ctx := context.Background()
	key := counterKey(prefix, limiter.Hit{Key: id.key, Limit: id.limit()})
	switch {
	case id.alg == limiter.SlidingWindow && id.sub > 1:
		return readString(t, c, key, func(v string) (limiter.State, error) { return parsePacked(v, id.sub) })
	case id.alg == limiter.FixedWindow:
		return readString(t, c, key, parseFixed)
	case id.alg == limiter.SlidingWindow:
		i, cur, prev, ok := readCounter(t, c, key)
		return limiter.State{At: i, N1: cur, N2: prev}, ok
	case id.alg == limiter.TokenBucket:
		return readString(t, c, key, parseToken)
	case id.alg == limiter.SlidingLog || id.alg == limiter.Concurrency:
		zs, err := c.ZRangeWithScores(ctx, key, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(zs) == 0 {
			return limiter.State{}, false
		}
		st := limiter.State{}
		for _, z := range zs {
			if z.Score <= 0 {
				continue // a tombstone (lua/log.lua)
			}
			st.Slots = append(st.Slots, int64(z.Score))
			if id.alg == limiter.Concurrency {
				// "<time>:<index>:<token>"
				parts := strings.Split(z.Member.(string), ":")
				token, err := strconv.ParseUint(parts[len(parts)-1], 10, 64)
				if len(parts) != 3 || err != nil {
					t.Fatalf("concurrency slot %q: want <time>:<index>:<token>", z.Member)
				}
				st.Slots = append(st.Slots, int64(token))
			}
		}
		return st, st.Slots != nil
	}
	t.Fatalf("readState: no reader for algorithm %v", id.alg)
	return limiter.State{}, false
}

// readString reads the string counter at key with parse, failing t when it
// does not parse; a missing key is the zero State.
func readString(t testing.TB, c goredis.UniversalClient, key string, parse func(string) (limiter.State, error)) (limiter.State, bool) {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if errors.Is(err, goredis.Nil) {
		return limiter.State{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	st, err := parse(v)
	if err != nil {
		t.Fatalf("counter %q: %v", key, err)
	}
	return st, true
}

// parseFixed reads a fixed window's string (lua/fixed.lua): '<dd', the window
// index and the count, both whole, the count more than 0 (an empty counter
// is deleted).
func parseFixed(v string) (limiter.State, error) {
	if len(v) != 16 {
		return limiter.State{}, fmt.Errorf("%d bytes: want 16", len(v))
	}
	le := binary.LittleEndian
	i := math.Float64frombits(le.Uint64([]byte(v[:8])))
	c := math.Float64frombits(le.Uint64([]byte(v[8:])))
	if i != math.Trunc(i) || c != math.Trunc(c) || c <= 0 || c > limiter.MaxCount {
		return limiter.State{}, fmt.Errorf("index %v, count %v: want whole numbers, the count in 1..MaxCount", i, c)
	}
	return limiter.State{At: int64(i), N1: uint64(c)}, nil
}

// parseToken reads a token bucket's string (lua/token.lua): '<ddd', t, f and
// d, whole numbers below 2^53, not all 0 (a full bucket is deleted).
func parseToken(v string) (limiter.State, error) {
	if len(v) != 24 {
		return limiter.State{}, fmt.Errorf("%d bytes: want 24", len(v))
	}
	var n [3]float64
	for i := range n {
		n[i] = math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[8*i : 8*i+8])))
		if n[i] != math.Trunc(n[i]) || n[i] < 0 || n[i] >= 1<<53 {
			return limiter.State{}, fmt.Errorf("field %d is %v: want a whole number in [0, 2^53)", i, n[i])
		}
	}
	if n == [3]float64{} {
		return limiter.State{}, errors.New("a full bucket is stored: want it deleted")
	}
	return limiter.State{At: int64(n[0]), N1: uint64(n[1]), N2: uint64(n[2])}, nil
}

// parsePacked reads the packed string of a sliding window of n sub-windows
// (lua/sliding_sub.lua): n slots of w bytes, slot i the count of sub-window at - i,
// then the head: the sub-window at, the total, at's count, w and a salt
// byte. It checks the layout, that w holds every slot and that the total is
// the sum. A stored string is never stale (the script
// writes only what it rebuilt at its sub-window).
func parsePacked(v string, n int64) (limiter.State, error) {
	if len(v) < 26 {
		return limiter.State{}, fmt.Errorf("%d bytes: want a 26-byte head", len(v))
	}
	h := len(v) - 26
	w := int(v[h+24])
	if (w != 1 && w != 2 && w != 4 && w != 8) || h != int(n)*w {
		return limiter.State{}, fmt.Errorf("%d bytes of slots of width %d: want %d slots", h, w, n)
	}
	le := binary.LittleEndian
	f := func(off int) float64 { return math.Float64frombits(le.Uint64([]byte(v[off : off+8]))) }
	slot := func(i int) int64 {
		b := []byte(v[i*w : (i+1)*w])
		switch w {
		case 1:
			return int64(b[0])
		case 2:
			return int64(le.Uint16(b))
		case 4:
			return int64(le.Uint32(b))
		}
		return int64(f(i * w))
	}
	at, total, cur := int64(f(h)), int64(f(h+8)), int64(f(h+16))
	st := limiter.State{At: at, Slots: make([]int64, n+1)}
	st.Slots[n] = cur
	sum, widest := cur, int64(0)
	for i := range int(n) {
		c := slot(i)
		st.Slots[int(n)-1-i] = c
		sum, widest = sum+c, max(widest, c)
	}
	need := 8
	switch {
	case widest < 1<<8:
		need = 1
	case widest < 1<<16:
		need = 2
	case widest < 1<<32:
		need = 4
	}
	if w < need {
		return limiter.State{}, fmt.Errorf("width %d cannot hold a slot of %d", w, widest)
	}
	if sum != total {
		return limiter.State{}, fmt.Errorf("total %d, slots sum to %d", total, sum)
	}
	return st, nil
}

// stateTTL is the TTL the script sets on a counter it writes with state s at
// nowMs: its expiry (limiter's expires), at most two windows away.
func stateTTL(id identity, s limiter.State, nowMs int64) time.Duration {
	w := id.w.Milliseconds()
	switch {
	case id.alg == limiter.SlidingWindow && id.sub > 1:
		sub, last := w/id.sub, 0
		for i, c := range s.Slots {
			if c != 0 {
				last = i + 1
			}
		}
		return time.Duration((s.At+int64(last))*sub-nowMs) * time.Millisecond
	case id.alg == limiter.SlidingWindow:
		e := max(nowMs-s.At*w, 0) // 0 when the clock stepped back into an earlier window
		return time.Duration(2*w-e) * time.Millisecond
	case id.alg == limiter.FixedWindow:
		return time.Duration((s.At+1)*w-nowMs) * time.Millisecond
	case id.alg == limiter.TokenBucket:
		ttl := s.At - nowMs
		if s.N1 > 0 {
			ttl++
		}
		return time.Duration(ttl) * time.Millisecond
	case id.alg == limiter.SlidingLog:
		return time.Duration(s.Slots[len(s.Slots)-1]+w-nowMs) * time.Millisecond
	case id.alg == limiter.Concurrency:
		return time.Duration(s.Slots[len(s.Slots)-2]+w-nowMs) * time.Millisecond
	}
	panic("stateTTL: no rule for algorithm " + id.alg.String())
}

// emptyState reports whether s holds nothing under id's algorithm, so that
// the script deletes its key.
func emptyState(id identity, s limiter.State) bool {
	switch {
	case id.alg == limiter.SlidingWindow && id.sub > 1:
		return s.Slots == nil
	case id.alg == limiter.SlidingWindow:
		return s.N1 == 0 && s.N2 == 0
	case id.alg == limiter.FixedWindow:
		return s.N1 == 0
	case id.alg == limiter.TokenBucket:
		return s.At == 0 && s.N1 == 0 && s.N2 == 0
	case id.alg == limiter.SlidingLog || id.alg == limiter.Concurrency:
		return len(s.Slots) == 0
	}
	panic("emptyState: no rule for algorithm " + id.alg.String())
}

// sameState compares two States of one counter, a nil and an empty Slots
// alike.
func sameState(a, b limiter.State) bool {
	return a.At == b.At && a.N1 == b.N1 && a.N2 == b.N2 && slices.Equal(a.Slots, b.Slots)
}

// TestDifferential drives limiter.Evaluate (the Go twin) and the Lua script
// with the same explicit clock and the same random requests, and requires
// identical Results, identical admissions and identical stored counters. The
// requests mix every algorithm, refunds, shadow hits, quota groups and the
// ceilings of pools' classes.
//
// Redis expires keys on its own (real) clock while the test clock is
// simulated, so a counter with a short window may vanish from Redis while the
// model still holds it. That is allowed only once at least the TTL the script
// set has passed in real time since the write (less 1 ms: Redis keeps expiry
// times in whole ms, so a TTL of n ms may end up to 1 ms early); the model's
// counter is then reset to zero, as Redis's was.
func TestDifferential(t *testing.T) {
	t.Parallel()
	for _, mode := range []int32{modeFunction, modeEval} {
		t.Run(map[int32]string{modeFunction: "function", modeEval: "eval"}[mode], func(t *testing.T) {
			t.Parallel()
			differential(t, mode, 1)
		})
	}
}

// TestDifferentialBatch is TestDifferential with several requests (1 to 6)
// decided by one script call, as concurrent decisions share one: each must
// get what limiter.Evaluate gives when the requests come one after another
// at the same instant.
func TestDifferentialBatch(t *testing.T) {
	t.Parallel()
	differential(t, modeFunction, 6)
}

// differential runs TestDifferential's steps with the script called as
// mode, each step one script call deciding 1 to batch requests.
func differential(t *testing.T, mode int32, batch int) {
	seed := *diffSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0x5115ce))

	var simNow atomic.Int64
	simNow.Store(1_700_000_000_123)
	s, c := newTestStore(t, Options{Now: func() time.Time { return time.UnixMilli(simNow.Load()) }})
	s.caller.mode.Store(mode)
	if err := s.caller.load(context.Background(), s.node.c); err != nil {
		t.Fatal(err)
	}
	m := &diffModel{t: t, c: c, prefix: s.prefix, states: map[identity]limiter.State{}, written: map[identity]diffWrite{}, uncertain: map[identity]bool{}}

	steps := 4000 / (1 + batch/3) // a batch decides 3.5 requests on average
	requests, admittedN, quotaDenied, quotaOverAdmitted := 0, 0, 0, 0
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
		reqs := make([][]limiter.Hit, 1+rng.IntN(batch))
		for i := range reqs {
			reqs[i] = randomRequest(rng)
			m.checkAll(step, reqs[i])
		}
		nowMs := simNow.Load()
		before := time.Now()
		got := decideAll(t, s, nowMs, reqs)
		for r, hits := range reqs {
			requests++
			next, admitted := m.expect(step, nowMs, hits, got[r])
			for i, h := range hits {
				switch {
				case !h.Quota || h.Shadow || h.Refund || got[r][i].Allowed:
				case got[r][i].OverLimit:
					quotaDenied++
				case admitted:
					quotaOverAdmitted++
				}
			}
			if admitted {
				admittedN++
			}
			m.record(hits, next, nowMs, before, admitted)
		}
		for _, hits := range reqs {
			m.checkAll(step, hits)
		}
	}
	t.Logf("%d steps, %d requests, %d admitted, %d counters expired by TTL meanwhile; quota hits over limit: %d denying, %d in admitted requests",
		steps, requests, admittedN, m.expired, quotaDenied, quotaOverAdmitted)
	if admittedN == 0 || admittedN == requests {
		t.Errorf("%d of %d requests admitted: the random mix does not exercise both outcomes", admittedN, requests)
	}
	if quotaDenied == 0 || quotaOverAdmitted == 0 {
		t.Errorf("quota hits over limit: %d denying, %d admitted by their group: the random mix does not exercise quota groups",
			quotaDenied, quotaOverAdmitted)
	}
}

// decideAll decides reqs at nowMs: one request through Store.Apply (the
// whole path), several in one script call (one entry each), and returns
// their Results.
func decideAll(t *testing.T, s *Store, nowMs int64, reqs [][]limiter.Hit) [][]limiter.Result {
	t.Helper()
	if len(reqs) == 1 {
		got, err := s.Apply(context.Background(), reqs[0])
		if err != nil {
			t.Fatalf("Apply: %v", err)
		}
		return [][]limiter.Result{got}
	}
	groups := make([]*group, len(reqs))
	es := make([]*entry, len(reqs))
	for r, hits := range reqs {
		gs, _ := s.split(hits)
		groups[r], es[r] = gs[0], gs[0].e
	}
	runAt(t, s, nowMs, es...)
	out := make([][]limiter.Result, len(reqs))
	for r, g := range groups {
		g.replied, g.admitted = true, g.e.admitted
		out[r] = make([]limiter.Result, len(reqs[r]))
		fill(out[r], g, g.admitted)
		limiter.MarkOverLimit(reqs[r], out[r])
	}
	return out
}

// randomRequest returns 1 to 4 random hits on a few keys and windows, with
// every algorithm, refunds, shadow hits, quota groups and pools' class
// ceilings (on a third of the hits) mixed in; limits
// that an algorithm refuses are replaced by valid ones (randomLimit).
func randomRequest(rng *rand.Rand) []limiter.Hit {
	keys := []string{"a", "b", "", "}{", "%7D"}
	windows := []time.Duration{time.Second, time.Minute, 1501 * time.Millisecond, 7 * time.Millisecond,
		333 * time.Millisecond, time.Hour, 24 * time.Hour}
	// Beyond 2^53 the doubles round, but both twins round alike; 1<<60 hits
	// on a MaxUint64 limit saturate counters at limiter.MaxCount.
	requests := []uint64{0, 1, 2, 3, 5, 10, 100, 1 << 32, 1<<32 - 1, 1 << 60, math.MaxUint64}
	sizes := []uint64{0, 1, 1, 1, 2, 3, 5, 11, 200, 1 << 33, 1 << 60, limiter.MaxCount + 1}
	algorithms := limiter.Algorithms()
	hits := make([]limiter.Hit, 1+rng.IntN(4))
	for i := range hits {
		hits[i] = limiter.Hit{
			Key:    keys[rng.IntN(len(keys))],
			Limit:  limiter.Limit{Requests: requests[rng.IntN(len(requests))], Window: windows[rng.IntN(len(windows))]},
			Hits:   sizes[rng.IntN(len(sizes))],
			Refund: rng.IntN(7) == 0,
			Shadow: rng.IntN(7) == 0,
			Quota:  rng.IntN(4) == 0,
			// A few tokens, so that releases find acquires' slots; the
			// largest too, which a double holds exactly.
			SlotToken: []uint64{0, 1, 2, 3, limiter.MaxSlotToken}[rng.IntN(5)],
		}
		hits[i].Limit.Algorithm = algorithms[rng.IntN(len(algorithms))]
		hits[i].Limit = randomLimit(rng, hits[i].Limit)
		if l := &hits[i].Limit; rng.IntN(3) == 0 && l.Requests <= limiter.MaxCount && !l.Overdraw && !l.CountDenied {
			// A pool's class: the same counter under a share of its limit.
			l.Ceiling = []uint16{1, 7, 333, 500, 800, 999, 1000}[rng.IntN(7)]
		}
	}
	return hits
}

// randomLimit adds random algorithm parameters to l (sub-windows, a burst)
// and brings a Requests that its algorithm refuses into range.
func randomLimit(rng *rand.Rand, l limiter.Limit) limiter.Limit {
	w := l.Window.Milliseconds()
	switch l.Algorithm {
	case limiter.SlidingWindow:
		for _, n := range []uint8{2, 3, 6, 7, 20, 60} {
			if w%int64(n) == 0 && rng.IntN(3) == 0 {
				l.SubWindows = n
			}
		}
	case limiter.TokenBucket:
		if rng.IntN(2) == 0 {
			l.Burst = []uint64{1, 2, 7, 300, 1 << 20}[rng.IntN(5)]
		}
		for l.Validate() != nil {
			l.Requests /= 1 << 10
			l.Burst /= 1 << 10
			if l.Requests == 0 {
				l.Burst = 0
			}
		}
	case limiter.SlidingLog, limiter.Concurrency:
		l.Requests = min(l.Requests, limiter.MaxLogRequests)
		return l
	}
	switch rng.IntN(7) {
	case 0, 1:
		l.Overdraw = true
	case 2, 3:
		l.CountDenied = true
	}
	return l
}

// diffModel is TestDifferential's model of the counters in Redis: the States
// limiter.Evaluate produced, and when each was last written (for expiry).
type diffModel struct {
	t       *testing.T
	c       goredis.UniversalClient
	prefix  string
	states  map[identity]limiter.State
	written map[identity]diffWrite
	expired int // counters Redis expired while the model held them
	// uncertain holds the counters of the last call whose TTL had passed
	// when the call's Results, the same either way, could not tell whether
	// Redis expired them first.
	uncertain map[identity]bool
}

type diffWrite struct {
	at    time.Time // real time before the call that set the TTL
	ttl   time.Duration
	until int64 // the expiry on the test clock: now + ttl
}

// checkAll compares Redis's counter of every hit with the model's. A counter
// missing from Redis is accepted once its TTL has passed in real time.
func (m *diffModel) checkAll(step int, hits []limiter.Hit) {
	m.t.Helper()
	for _, h := range hits {
		id := idOf(h)
		want := m.states[id]
		got, ok := readState(m.t, m.c, m.prefix, id)
		uncertain := m.uncertain[id]
		delete(m.uncertain, id)
		if sameState(got, want) {
			continue
		}
		if uncertain {
			// It expired before the call, which wrote it anew: the
			// Results were the same either way.
			m.states[id] = got
			continue
		}
		if w, ok2 := m.written[id]; !ok && ok2 && time.Since(w.at) >= w.ttl-time.Millisecond {
			m.forget(id)
			continue
		}
		m.t.Fatalf("step %d: counter %q/%v in redis = %+v (exists %v), model %+v", step, id.key, id.w, got, ok, want)
	}
}

func (m *diffModel) forget(id identity) {
	m.expired++
	delete(m.states, id)
	delete(m.written, id)
}

// expect requires got, the script's Results for hits at nowMs, to be
// limiter.Evaluate's on the model, and returns Evaluate's next States and
// admission. A counter may have expired in Redis between the check and the
// script: that is accepted only for counters whose TTL had passed by the time
// Apply returned, and only if zeroing some of them explains got exactly.
func (m *diffModel) expect(step int, nowMs int64, hits []limiter.Hit, got []limiter.Result) ([]limiter.State, bool) {
	m.t.Helper()
	states := make([]limiter.State, len(hits))
	var expirable []identity
	for i, h := range hits {
		id := idOf(h)
		states[i] = m.states[id]
		if w, ok := m.written[id]; ok && time.Since(w.at) >= w.ttl-time.Millisecond && !slices.Contains(expirable, id) {
			expirable = append(expirable, id)
		}
	}
	want, next, admitted, err := limiter.Evaluate(nowMs, hits, states)
	if err != nil {
		m.t.Fatalf("step %d: Evaluate: %v", step, err)
	}
	if equalResults(got, want) {
		for _, id := range expirable {
			m.uncertain[id] = true
		}
		return next, admitted
	}
	for mask := 1; mask < 1<<len(expirable); mask++ {
		alt := slices.Clone(states)
		for i, h := range hits {
			if j := slices.Index(expirable, idOf(h)); j >= 0 && mask&(1<<j) != 0 {
				alt[i] = limiter.State{}
			}
		}
		if w2, n2, a2, _ := limiter.Evaluate(nowMs, hits, alt); equalResults(got, w2) {
			for j, id := range expirable {
				if mask&(1<<j) != 0 {
					m.forget(id)
				}
			}
			return n2, a2
		}
	}
	for i := range hits {
		if got[i] != want[i] {
			m.t.Fatalf("step %d (now %d): hit %d %s:\n lua %+v\n go  %+v\nrequest %s\ncounters %+v",
				step, nowMs, i, describe(hits[i]), got[i], want[i], describeAll(hits), states)
		}
	}
	return next, admitted
}

// record stores the States of an admitted request, written by a call that
// started at before.
func (m *diffModel) record(hits []limiter.Hit, next []limiter.State, nowMs int64, before time.Time, admitted bool) {
	for i, h := range hits {
		id := idOf(h)
		if !admitted && !overdrawn(hits, id) {
			continue // a denied request changes only what overdraw hits grew
		}
		nc := next[i]
		if emptyState(id, nc) {
			nc = limiter.State{} // the script deletes an empty counter
		}
		if !sameState(nc, m.states[id]) && !sameState(nc, limiter.State{}) {
			ttl := stateTTL(id, nc, nowMs)
			// A write that leaves a stored counter's expiry where it was
			// may keep the TTL set before (the script writes such a
			// change in place): on Redis's clock that is the same instant,
			// on this test's either may hold, so the earlier counts.
			w, ok := m.written[id]
			if !ok || sameState(m.states[id], limiter.State{}) || w.until != nowMs+ttl.Milliseconds() ||
				before.Add(ttl).Before(w.at.Add(w.ttl)) {
				m.written[id] = diffWrite{at: before, ttl: ttl, until: nowMs + ttl.Milliseconds()}
			}
		}
		m.states[id] = nc
	}
}

func equalResults(a, b []limiter.Result) bool { return slices.Equal(a, b) }

func describe(h limiter.Hit) string {
	return fmt.Sprintf("{key %q limit %d/%v %v burst %d sub %d overdraw %v count_denied %v ceiling %d hits %d refund %v shadow %v quota %v token %d}",
		h.Key, h.Limit.Requests, h.Limit.Window, h.Limit.Algorithm, h.Limit.Burst, h.Limit.SubWindows, h.Limit.Overdraw,
		h.Limit.CountDenied, h.Limit.Ceiling, h.Hits, h.Refund, h.Shadow, h.Quota, h.SlotToken)
}

func describeAll(hits []limiter.Hit) string {
	s := ""
	for _, h := range hits {
		s += describe(h) + " "
	}
	return s
}

// overdrawn reports whether a denied request still grows counter id: one of
// its overdraw or count-denied hits on it asks for hits
// (limiter.Limit.Overdraw, limiter.Limit.CountDenied).
func overdrawn(hits []limiter.Hit, id identity) bool {
	for _, h := range hits {
		if idOf(h) == id && (h.Limit.Overdraw || h.Limit.CountDenied) && !h.Refund && h.Hits > 0 {
			return true
		}
	}
	return false
}
