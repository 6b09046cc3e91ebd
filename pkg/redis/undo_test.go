package redis

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestUndo drives the script's "u" mode directly: it takes back exactly the
// delta an "a" call reported, from cur in the same window, from prev one
// window later, not at all after that, and recreates (with a TTL) a counter
// that a refund had deleted. Run again with the same marker (a retry whose
// first reply was lost), it changes nothing and answers -1; the marker
// expires after the TTL given.
func TestUndo(t *testing.T) {
	t.Parallel()
	s, c := newTestStore(t, Options{})
	ctx := context.Background()
	const w = 60_000
	t0 := int64(1_800_000_000_000) // a window start
	spec := specOf(limiter.Limit{Window: w * time.Millisecond})
	apply := func(now int64, key string, n uint64, refund bool) (idx, delta float64) {
		t.Helper()
		var flags byte
		if refund {
			flags = flagRefund
		}
		e := &entry{kind: kindApply, full: true, keys: []string{key}, specs: []keySpec{spec},
			hits: []hitArg{{requests: 100, hits: float64(n), flags: flags}}}
		runAt(t, s, now, e)
		return e.kr[0].u1, e.kr[0].u2
	}
	state := func(key string) limiter.State {
		t.Helper()
		i, cur, prev, _ := readCounter(t, c, key)
		return limiter.State{At: i, N1: cur, N2: prev}
	}
	idx0 := t0 / w
	for _, tc := range []struct {
		name    string
		setup   uint64 // hits before the undone call
		n       uint64
		refund  bool
		undoAt  int64 // ms after t0
		want    limiter.State
		wantTTL bool
	}{
		{"same window", 5, 3, false, 10, limiter.State{At: idx0, N1: 5, N2: 0}, true},
		{"rolled once", 5, 3, false, w + 10, limiter.State{At: idx0 + 1, N1: 0, N2: 5}, true},
		{"rolled twice", 5, 3, false, 2*w + 10, limiter.State{}, false}, // zero, deleted
		{"refund that deleted the counter", 2, 5, true, 10, limiter.State{At: idx0, N1: 2, N2: 0}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := counterKey(s.prefix, limiter.Hit{Key: tc.name, Limit: limiter.Limit{Window: w * time.Millisecond}})
			apply(t0, key, tc.setup, false)
			idx, delta := apply(t0+1, key, tc.n, tc.refund)
			if tc.undoAt >= w {
				// Roll the stored counter as a later request would.
				apply(t0+tc.undoAt, key, 0, false)
			}
			marker := key + ":u:test"
			undo := func() float64 {
				e := &entry{kind: kindUndo, keys: []string{key, marker}, specs: []keySpec{spec, {alg: markerAlgorithm}},
					undo: []float64{idx, delta}, ttl: float64(RefundMarkerTTL.Milliseconds())}
				runAt(t, s, t0+tc.undoAt, e)
				return e.changed
			}
			first := undo()
			if got := state(key); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("after undo: %+v, want %+v", got, tc.want)
			}
			if again := undo(); again != -1 || first == -1 {
				t.Errorf("undo = %v, then again with its marker %v, want a count, then -1", first, again)
			}
			if got := state(key); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("after the undo was retried: %+v, want %+v (unchanged)", got, tc.want)
			}
			if ttl := c.PTTL(ctx, marker).Val(); ttl <= 0 || ttl > RefundMarkerTTL {
				t.Errorf("PTTL of the marker = %v, want in (0, %v]", ttl, RefundMarkerTTL)
			}
			ttl := c.PTTL(ctx, key).Val()
			if tc.wantTTL && (ttl <= 0 || ttl > 2*w*time.Millisecond) {
				t.Errorf("PTTL after undo = %v, want in (0, 2 windows]", ttl)
			}
			if !tc.wantTTL && ttl != -2 {
				t.Errorf("PTTL after undo = %v, want no key", ttl)
			}
		})
	}
}

// runAt runs es in one script call on s's Redis with the clock at now (Unix
// ms), failing t on any error.
func runAt(t testing.TB, s *Store, now int64, es ...*entry) {
	t.Helper()
	ps := make([]*pending, len(es))
	for i, e := range es {
		ps[i] = &pending{e: e}
	}
	for i, err := range runEntries(context.Background(), s.d.ns.one.c, s.d.ns.one.caller, strconv.FormatInt(now, 10), ps) {
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
}

// TestUndoLateRefund: a refund that took hits from older (sub-)windows too
// (the current one held fewer) replies an undo token per (sub-)window it
// changed, and the undo built from the reply (undoEntry) puts every hit
// back where it was taken, on the classic counter and on sub-windows.
func TestUndoLateRefund(t *testing.T) {
	t.Parallel()
	s, c := newTestStore(t, Options{})
	const w = 60_000
	t0 := int64(1_800_000_000_000) // a window start
	for _, l := range []limiter.Limit{
		{Requests: 100, Window: w * time.Millisecond},
		{Requests: 100, Window: w * time.Millisecond, SubWindows: 6},
	} {
		t.Run(fmt.Sprintf("sub_windows %d", l.SubWindowCount()), func(t *testing.T) {
			h := limiter.Hit{Key: t.Name(), Limit: l}
			id := identity{key: h.Key, w: l.Window, alg: l.Algorithm, sub: l.SubWindowCount()}
			apply := func(now int64, n uint64, refund bool) *group {
				t.Helper()
				h.Hits, h.Refund = n, refund
				gs, _ := s.split([]limiter.Hit{h})
				gs[0].e.full = true
				runAt(t, s, now, gs[0].e)
				gs[0].replied, gs[0].admitted = true, gs[0].e.admitted
				return gs[0]
			}
			apply(t0+1_000, 7, false)  // sub-window 0 of window 0
			apply(t0+21_000, 5, false) // sub-window 2
			apply(t0+w+1_000, 2, false)
			before, _ := readState(t, c, s.prefix, id)
			g := apply(t0+w+2_000, 10, true)
			after, _ := readState(t, c, s.prefix, id)
			if sameState(before, after) || len(g.e.kr[0].more) == 0 {
				t.Fatalf("refund of 10 over 2 in the current window: %+v -> %+v, undo tokens more %v: want older hits taken, with their tokens",
					before, after, g.e.kr[0].more)
			}
			u, ok := s.d.undoEntry(g)
			if !ok {
				t.Fatal("undoEntry: nothing to take back")
			}
			runAt(t, s, t0+w+3_000, u)
			if got, _ := readState(t, c, s.prefix, id); !sameState(got, before) {
				t.Errorf("after undo: %+v, want %+v (as before the refund)", got, before)
			}
		})
	}
}

// TestUndoSlots: the undo of a concurrency entry that acquired under one
// slot token and released another's slot takes back exactly those: the
// acquired slots are gone and the released one is held again, under its own
// token (a later release of it frees it).
func TestUndoSlots(t *testing.T) {
	t.Parallel()
	s, c := newTestStore(t, Options{})
	t0 := int64(1_800_000_000_000)
	l := limiter.Limit{Requests: 10, Window: time.Minute, Algorithm: limiter.Concurrency}
	id := identity{key: "slots", w: l.Window, alg: l.Algorithm}
	apply := func(now int64, hits ...limiter.Hit) *group {
		t.Helper()
		for i := range hits {
			hits[i].Key, hits[i].Limit = "slots", l
		}
		gs, _ := s.split(hits)
		gs[0].e.full = true
		runAt(t, s, now, gs[0].e)
		gs[0].replied, gs[0].admitted = true, gs[0].e.admitted
		return gs[0]
	}
	apply(t0, limiter.Hit{Hits: 2, SlotToken: 7})
	before, _ := readState(t, c, s.prefix, id)
	g := apply(t0+5, limiter.Hit{Hits: 3, SlotToken: 8}, limiter.Hit{Hits: 1, Refund: true, SlotToken: 7})
	if got, _ := readState(t, c, s.prefix, id); len(got.Slots) != 2*4 {
		t.Fatalf("after acquiring 3 and releasing 1: %v, want 4 slots", got.Slots)
	}
	u, ok := s.d.undoEntry(g)
	if !ok {
		t.Fatal("undoEntry: nothing to take back")
	}
	runAt(t, s, t0+10, u)
	if got, _ := readState(t, c, s.prefix, id); !sameState(got, before) {
		t.Fatalf("after undo: %v, want %v", got.Slots, before.Slots)
	}
	apply(t0+20, limiter.Hit{Hits: 2, Refund: true, SlotToken: 7})
	if got, ok := readState(t, c, s.prefix, id); ok {
		t.Fatalf("after releasing token 7's two slots: %v, want none", got.Slots)
	}
}
