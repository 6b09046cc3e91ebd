package redis

import (
	"context"
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
	run := func(now int64, keys []string, args ...any) any {
		t.Helper()
		r, err := script.Run(ctx, c, keys, append([]any{args[0], strconv.FormatInt(now, 10)}, args[1:]...)...).Result()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	apply := func(now int64, key string, n uint64, refund bool) (idx, delta int64) {
		t.Helper()
		flags := 0
		if refund {
			flags = 1
		}
		r := run(now, []string{key}, "a", int(limiter.SlidingWindow), w, 1, 1, 100, 0, n, flags).([]any)
		return r[len(r)-2].(int64), r[len(r)-1].(int64)
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
			undo := func() any {
				return run(t0+tc.undoAt, []string{key, marker}, "u", RefundMarkerTTL.Milliseconds(), int(limiter.SlidingWindow), w, 1, idx, delta)
			}
			first := undo()
			if got := state(key); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("after undo: %+v, want %+v", got, tc.want)
			}
			if again := undo(); again != int64(-1) || first == int64(-1) {
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
