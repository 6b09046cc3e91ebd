package limiter_test

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

const (
	minuteMs = int64(60_000)
	// t0 is the start of a minute (and of an hour): window index i0 for 1 min.
	t0 = int64(1_800_000_000_000)
	i0 = t0 / minuteMs
)

func perMinute(n uint64) limiter.Limit {
	return limiter.Limit{Requests: n, Window: time.Minute}
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// sw is a sliding window State: window index, cur and prev.
func sw(index int64, cur, prev uint64) limiter.State {
	return limiter.State{At: index, N1: cur, N2: prev}
}

// evaluate is limiter.Evaluate on input that must be valid.
func evaluate(t testing.TB, now int64, hits []limiter.Hit, states []limiter.State) ([]limiter.Result, []limiter.State, bool) {
	t.Helper()
	res, next, adm, err := limiter.Evaluate(now, hits, states)
	if err != nil {
		t.Fatalf("Evaluate(%d, %+v, %+v) error: %v", now, hits, states, err)
	}
	return res, next, adm
}

func TestEvaluate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		now      int64
		hits     []limiter.Hit
		counters []limiter.State
		want     []limiter.Result
		wantNext []limiter.State
		wantAdm  bool
	}{
		{
			name:     "empty counter admits",
			now:      t0,
			hits:     []limiter.Hit{{Key: "a", Limit: perMinute(10), Hits: 1}},
			counters: []limiter.State{{}},
			want:     []limiter.Result{{Allowed: true, Remaining: 9, ResetAfter: ms(120_000)}},
			wantNext: []limiter.State{sw(i0, 1, 0)},
			wantAdm:  true,
		},
		{
			name:     "reaches the limit exactly",
			now:      t0 + 1000,
			hits:     []limiter.Hit{{Key: "a", Limit: perMinute(10), Hits: 1}},
			counters: []limiter.State{sw(i0, 9, 0)},
			want:     []limiter.Result{{Allowed: true, Remaining: 0, ResetAfter: ms(119_000)}},
			wantNext: []limiter.State{sw(i0, 10, 0)},
			wantAdm:  true,
		},
		{
			// Next window at e=6000: 10*(54000/60000) + 1 = 10.
			name:     "one over the limit retries in the next window",
			now:      t0 + 1000,
			hits:     []limiter.Hit{{Key: "a", Limit: perMinute(10), Hits: 1}},
			counters: []limiter.State{sw(i0, 10, 0)},
			want:     []limiter.Result{{RetryAfter: ms(59_000 + 6_000), ResetAfter: ms(119_000)}},
			wantNext: []limiter.State{sw(i0, 10, 0)},
		},
		{
			name:     "several hits reach the limit exactly",
			now:      t0,
			hits:     []limiter.Hit{{Key: "a", Limit: perMinute(10), Hits: 4}},
			counters: []limiter.State{sw(i0, 6, 0)},
			want:     []limiter.Result{{Allowed: true, ResetAfter: ms(120_000)}},
			wantNext: []limiter.State{sw(i0, 10, 0)},
			wantAdm:  true,
		},
		{
			name:     "rollover weights the previous window by the remaining fraction",
			now:      t0 + 30_000,
			hits:     []limiter.Hit{{Key: "a", Limit: perMinute(10), Hits: 1}},
			counters: []limiter.State{sw(i0-1, 10, 3)},
			want:     []limiter.Result{{Allowed: true, Remaining: 4, ResetAfter: ms(90_000)}},
			wantNext: []limiter.State{sw(i0, 1, 10)},
			wantAdm:  true,
		},
		{
			name:     "rollover at the first ms weighs the previous window fully",
			now:      t0,
			hits:     []limiter.Hit{{Key: "a", Limit: perMinute(10), Hits: 1}},
			counters: []limiter.State{sw(i0-1, 10, 7)},
			// Same window at e=6000: 10*54000/60000 + 1 = 10.
			want:     []limiter.Result{{RetryAfter: ms(6_000), ResetAfter: ms(60_000)}},
			wantNext: []limiter.State{sw(i0, 0, 10)},
		},
		{
			name:     "estimate exactly at the limit: 5 more fit",
			now:      t0 + 30_000,
			hits:     []limiter.Hit{{Key: "a", Limit: perMinute(10), Hits: 5}},
			counters: []limiter.State{sw(i0, 0, 10)},
			want:     []limiter.Result{{Allowed: true, Remaining: 0, ResetAfter: ms(90_000)}},
			wantNext: []limiter.State{sw(i0, 5, 10)},
			wantAdm:  true,
		},
		{
			// Same window at e=36000: 10*24000/60000 + 5 + 1 = 10.
			name:     "estimate exactly at the limit: the 6th is over",
			now:      t0 + 30_000,
			hits:     []limiter.Hit{{Key: "a", Limit: perMinute(10), Hits: 1}},
			counters: []limiter.State{sw(i0, 5, 10)},
			want:     []limiter.Result{{RetryAfter: ms(6_000), ResetAfter: ms(90_000)}},
			wantNext: []limiter.State{sw(i0, 5, 10)},
		},
		{
			name:     "a gap of two windows resets",
			now:      t0 + 59_999,
			hits:     []limiter.Hit{{Key: "a", Limit: perMinute(10), Hits: 1}},
			counters: []limiter.State{sw(i0-2, 10, 10)},
			want:     []limiter.Result{{Allowed: true, Remaining: 9, ResetAfter: ms(60_001)}},
			wantNext: []limiter.State{sw(i0, 1, 0)},
			wantAdm:  true,
		},
		{
			name:     "a gap of many windows resets",
			now:      t0,
			hits:     []limiter.Hit{{Key: "a", Limit: perMinute(10), Hits: 10}},
			counters: []limiter.State{sw(3, 10, 10)},
			want:     []limiter.Result{{Allowed: true, Remaining: 0, ResetAfter: ms(120_000)}},
			wantNext: []limiter.State{sw(i0, 10, 0)},
			wantAdm:  true,
		},
		{
			name:     "hits larger than the limit can never be admitted",
			now:      t0 + 10_000,
			hits:     []limiter.Hit{{Key: "a", Limit: perMinute(10), Hits: 11}},
			counters: []limiter.State{{}},
			want:     []limiter.Result{{ExceedsLimit: true, RetryAfter: ms(60_000)}},
			wantNext: []limiter.State{sw(i0, 0, 0)},
		},
		{
			name:     "requests_per_unit 0 is over for every hit",
			now:      t0,
			hits:     []limiter.Hit{{Key: "a", Limit: perMinute(0), Hits: 1}},
			counters: []limiter.State{{}},
			want:     []limiter.Result{{ExceedsLimit: true, RetryAfter: ms(60_000)}},
			wantNext: []limiter.State{sw(i0, 0, 0)},
		},
		{
			name:     "check only on an empty counter with requests_per_unit 0",
			now:      t0,
			hits:     []limiter.Hit{{Key: "a", Limit: perMinute(0), Hits: 0}},
			counters: []limiter.State{{}},
			want:     []limiter.Result{{Allowed: true}},
			wantNext: []limiter.State{sw(i0, 0, 0)},
			wantAdm:  true,
		},
		{
			name: "check only consumes nothing",
			now:  t0 + 30_000,
			hits: []limiter.Hit{{Key: "a", Limit: perMinute(10), Hits: 0}},
			// estimate 4*0.5 + 3 = 5
			counters: []limiter.State{sw(i0, 3, 4)},
			want:     []limiter.Result{{Allowed: true, Remaining: 5, ResetAfter: ms(90_000)}},
			wantNext: []limiter.State{sw(i0, 3, 4)},
			wantAdm:  true,
		},
		{
			name: "a denied request consumes from no counter",
			now:  t0,
			hits: []limiter.Hit{
				{Key: "a", Limit: perMinute(10), Hits: 1},
				{Key: "b", Limit: perMinute(5), Hits: 1},
				{Key: "c", Limit: perMinute(10), Hits: 1, Shadow: true},
			},
			counters: []limiter.State{sw(i0, 3, 0), sw(i0, 5, 0), {}},
			want: []limiter.Result{
				{Allowed: true, Remaining: 7, ResetAfter: ms(120_000)},
				{RetryAfter: ms(60_000 + 12_000), ResetAfter: ms(120_000)},
				{Allowed: true, Remaining: 10},
			},
			wantNext: []limiter.State{sw(i0, 3, 0), sw(i0, 5, 0), sw(i0, 0, 0)},
		},
		{
			name: "a shadow hit never denies and is counted when admitted",
			now:  t0,
			hits: []limiter.Hit{
				{Key: "a", Limit: perMinute(10), Hits: 1},
				{Key: "s", Limit: perMinute(2), Hits: 1, Shadow: true},
			},
			counters: []limiter.State{{}, sw(i0, 2, 0)},
			want: []limiter.Result{
				{Allowed: true, Remaining: 9, ResetAfter: ms(120_000)},
				{RetryAfter: ms(60_000 + 30_000), ResetAfter: ms(120_000)},
			},
			wantNext: []limiter.State{sw(i0, 1, 0), sw(i0, 3, 0)},
			wantAdm:  true,
		},
		{
			name:     "a shadow hit larger than the limit saturates at MaxCount",
			now:      t0,
			hits:     []limiter.Hit{{Key: "s", Limit: perMinute(10), Hits: math.MaxUint64, Shadow: true}},
			counters: []limiter.State{sw(i0, 5, 0)},
			want:     []limiter.Result{{ExceedsLimit: true, RetryAfter: ms(60_000), ResetAfter: ms(120_000)}},
			wantNext: []limiter.State{sw(i0, limiter.MaxCount, 0)},
			wantAdm:  true,
		},
		{
			name:     "a refund lowers cur",
			now:      t0 + 30_000,
			hits:     []limiter.Hit{{Key: "a", Limit: perMinute(10), Hits: 2, Refund: true}},
			counters: []limiter.State{sw(i0, 3, 4)},
			want:     []limiter.Result{{Allowed: true, Remaining: 7, ResetAfter: ms(90_000)}},
			wantNext: []limiter.State{sw(i0, 1, 4)},
			wantAdm:  true,
		},
		{
			// A refund sent after its hits' window rolled finds them in
			// prev: it empties cur, then takes the rest from prev.
			name:     "a refund takes from cur, then from prev",
			now:      t0 + 30_000,
			hits:     []limiter.Hit{{Key: "a", Limit: perMinute(10), Hits: 5, Refund: true}},
			counters: []limiter.State{sw(i0, 3, 4)},
			want:     []limiter.Result{{Allowed: true, Remaining: 9, ResetAfter: ms(30_000)}},
			wantNext: []limiter.State{sw(i0, 0, 2)},
			wantAdm:  true,
		},
		{
			name:     "a refund never goes below zero",
			now:      t0 + 30_000,
			hits:     []limiter.Hit{{Key: "a", Limit: perMinute(10), Hits: 9, Refund: true}},
			counters: []limiter.State{sw(i0, 3, 4)},
			want:     []limiter.Result{{Allowed: true, Remaining: 10}},
			wantNext: []limiter.State{sw(i0, 0, 0)},
			wantAdm:  true,
		},
		{
			name:     "a refund on a counter over its limit is allowed",
			now:      t0,
			hits:     []limiter.Hit{{Key: "a", Limit: perMinute(10), Hits: 1, Refund: true}},
			counters: []limiter.State{sw(i0, 12, 0)},
			want:     []limiter.Result{{Allowed: true, Remaining: 0, ResetAfter: ms(120_000)}},
			wantNext: []limiter.State{sw(i0, 11, 0)},
			wantAdm:  true,
		},
		{
			name: "hits on one counter share the largest increment",
			now:  t0,
			hits: []limiter.Hit{
				{Key: "a", Limit: perMinute(10), Hits: 2},
				{Key: "a", Limit: perMinute(10), Hits: 5},
				{Key: "a", Limit: limiter.Limit{Requests: 10, Window: time.Second}, Hits: 3},
			},
			counters: []limiter.State{sw(i0, 1, 0), sw(i0, 1, 0), {}},
			want: []limiter.Result{
				{Allowed: true, Remaining: 4, ResetAfter: ms(120_000)},
				{Allowed: true, Remaining: 4, ResetAfter: ms(120_000)},
				{Allowed: true, Remaining: 7, ResetAfter: ms(2_000)},
			},
			wantNext: []limiter.State{sw(i0, 6, 0), sw(i0, 6, 0), sw(t0/1000, 3, 0)},
			wantAdm:  true,
		},
		{
			name: "an increment and a refund on one counter both apply",
			now:  t0,
			hits: []limiter.Hit{
				{Key: "a", Limit: perMinute(10), Hits: 4},
				{Key: "a", Limit: perMinute(10), Hits: 1, Refund: true},
			},
			counters: []limiter.State{sw(i0, 2, 0), sw(i0, 2, 0)},
			want: []limiter.Result{
				{Allowed: true, Remaining: 5, ResetAfter: ms(120_000)},
				{Allowed: true, Remaining: 5, ResetAfter: ms(120_000)},
			},
			wantNext: []limiter.State{sw(i0, 5, 0), sw(i0, 5, 0)},
			wantAdm:  true,
		},
		{
			name:     "a clock before the epoch uses floor division",
			now:      -1,
			hits:     []limiter.Hit{{Key: "a", Limit: limiter.Limit{Requests: 10, Window: time.Second}, Hits: 1}},
			counters: []limiter.State{{}},
			want:     []limiter.Result{{Allowed: true, Remaining: 9, ResetAfter: ms(1_001)}},
			wantNext: []limiter.State{sw(-1, 1, 0)},
			wantAdm:  true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, next, adm := evaluate(t, tc.now, tc.hits, tc.counters)
			for i := range tc.want { // no quota hits here: an enforced hit not Allowed is over limit
				tc.want[i].OverLimit = !tc.hits[i].Shadow && !tc.hits[i].Refund && !tc.want[i].Allowed
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Evaluate results = %+v, want %+v", got, tc.want)
			}
			if !reflect.DeepEqual(next, tc.wantNext) {
				t.Errorf("Evaluate next = %+v, want %+v", next, tc.wantNext)
			}
			if adm != tc.wantAdm {
				t.Errorf("Evaluate admitted = %v, want %v", adm, tc.wantAdm)
			}
		})
	}
}

// TestEvaluateAdmitsUntilTheLimit walks one counter hit by hit.
func TestEvaluateAdmitsUntilTheLimit(t *testing.T) {
	// limit 10, prev 10, half the window elapsed, cur 0: estimate 5.
	c := []limiter.State{sw(i0-1, 10, 0)}
	hit := []limiter.Hit{{Key: "a", Limit: perMinute(10), Hits: 1}}
	for i := 1; i <= 6; i++ {
		res, next, adm := evaluate(t, t0+30_000, hit, c)
		wantAdm := i <= 5
		if adm != wantAdm || res[0].Allowed != wantAdm {
			t.Fatalf("hit %d: admitted = %v, Allowed = %v, want %v", i, adm, res[0].Allowed, wantAdm)
		}
		if wantAdm && res[0].Remaining != uint64(5-i) {
			t.Errorf("hit %d: Remaining = %d, want %d", i, res[0].Remaining, 5-i)
		}
		c = next
	}
}

type randomCase struct {
	now     int64
	hit     limiter.Hit
	counter limiter.State
}

// randomState returns a random but plausible single-hit state.
func randomState(r *rand.Rand) randomCase {
	windows := []int64{1, 7, 1000, 60_000, 3_600_000, 86_400_000}
	w := windows[r.IntN(len(windows))]
	limit := uint64(r.IntN(40))
	if r.IntN(10) == 0 {
		limit = uint64(r.IntN(1_000_000))
	}
	now := t0 + r.Int64N(10*w)
	idx := now/w - int64(r.IntN(4))
	count := func() uint64 {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return limit
		}
		return uint64(r.Int64N(int64(limit) + 5))
	}
	n := uint64(r.IntN(4))
	if r.IntN(4) == 0 {
		n = uint64(r.Int64N(int64(limit) + 3))
	}
	return randomCase{
		now:     now,
		hit:     limiter.Hit{Key: "k", Limit: limiter.Limit{Requests: limit, Window: ms(w)}, Hits: n},
		counter: sw(idx, count(), count()),
	}
}

func evalOne(t testing.TB, now int64, h limiter.Hit, c limiter.State) (limiter.Result, limiter.State) {
	t.Helper()
	res, next, _ := evaluate(t, now, []limiter.Hit{h}, []limiter.State{c})
	return res[0], next[0]
}

// TestEvaluateRetryAfterIsExact: with no other traffic, the same hit is
// admitted after exactly RetryAfter and not 1 ms earlier.
func TestEvaluateRetryAfterIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	checked := 0
	for range 200_000 {
		tc := randomState(r)
		res, _ := evalOne(t, tc.now, tc.hit, tc.counter)
		if res.Allowed || res.ExceedsLimit {
			continue
		}
		checked++
		retry := res.RetryAfter.Milliseconds()
		if retry <= 0 || ms(retry) != res.RetryAfter {
			t.Fatalf("%+v: RetryAfter = %v, want a positive whole number of ms", tc, res.RetryAfter)
		}
		if got, _ := evalOne(t, tc.now+retry, tc.hit, tc.counter); !got.Allowed {
			t.Fatalf("%+v: RetryAfter = %v, but not Allowed then: %+v", tc, res.RetryAfter, got)
		}
		if retry > 1 {
			if got, _ := evalOne(t, tc.now+retry-1, tc.hit, tc.counter); got.Allowed {
				t.Fatalf("%+v: RetryAfter = %v, but Allowed 1 ms earlier: %+v", tc, res.RetryAfter, got)
			}
		}
	}
	if checked < 10_000 {
		t.Errorf("only %d denied states checked", checked)
	}
}

// TestEvaluateRemainingIsExact: after an admitted hit, Remaining more single
// hits are admitted right away and the next one is not.
func TestEvaluateRemainingIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	checked := 0
	for range 20_000 {
		tc := randomState(r)
		if tc.hit.Limit.Requests > 1000 {
			continue
		}
		res, c := evalOne(t, tc.now, tc.hit, tc.counter)
		if !res.Allowed {
			continue
		}
		checked++
		one := tc.hit
		one.Hits = 1
		for i := range res.Remaining + 1 {
			got, next := evalOne(t, tc.now, one, c)
			if want := i < res.Remaining; got.Allowed != want {
				t.Fatalf("%+v: Remaining = %d, but hit %d Allowed = %v", tc, res.Remaining, i+1, got.Allowed)
			}
			c = next
		}
	}
	if checked < 5_000 {
		t.Errorf("only %d admitted states checked", checked)
	}
}

// TestEvaluateResetAfterIsExact: after ResetAfter with no other traffic the
// full limit remains, and 1 ms earlier it does not.
func TestEvaluateResetAfterIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	check := limiter.Hit{Key: "k"}
	for range 50_000 {
		tc := randomState(r)
		res, c := evalOne(t, tc.now, tc.hit, tc.counter)
		check.Limit = tc.hit.Limit
		reset := res.ResetAfter.Milliseconds()
		L := tc.hit.Limit.Requests
		if got, _ := evalOne(t, tc.now+reset, check, c); got.Remaining != L {
			t.Fatalf("%+v: ResetAfter = %v, but Remaining then = %d, want %d", tc, res.ResetAfter, got.Remaining, L)
		}
		if reset > 0 && L > 0 {
			if got, _ := evalOne(t, tc.now+reset-1, check, c); got.Remaining == L {
				t.Fatalf("%+v: ResetAfter = %v, but full Remaining 1 ms earlier", tc, res.ResetAfter)
			}
		}
	}
}

// TestEvaluateErrorsOnBadInput: Evaluate returns an error, and no Results,
// for input a caller should have validated; it never panics.
func TestEvaluateErrorsOnBadInput(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hits     []limiter.Hit
		counters []limiter.State
	}{
		{"counters do not match hits", []limiter.Hit{{Limit: perMinute(1)}}, nil},
		{"zero window", []limiter.Hit{{}}, []limiter.State{{}}},
		{"sub-millisecond window", []limiter.Hit{{Limit: limiter.Limit{Window: time.Microsecond}}}, []limiter.State{{}}},
		{"unknown algorithm", []limiter.Hit{{Limit: limiter.Limit{Window: time.Second, Algorithm: 200}}}, []limiter.State{{}}},
		{"second hit invalid", []limiter.Hit{{Limit: perMinute(1)}, {}}, []limiter.State{{}, {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, next, adm, err := limiter.Evaluate(t0, tc.hits, tc.counters)
			if err == nil || res != nil || next != nil || adm {
				t.Errorf("Evaluate = %v, %v, %v, %v; want only an error", res, next, adm, err)
			}
		})
	}
}
