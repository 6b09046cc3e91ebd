package redis

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestStrayValueAtCounterKey: a counter key that holds what the script did
// not write (another type, or a string of another layout) reads as no
// counter and is written over; the call, which may decide other requests
// too, does not fail.
func TestStrayValueAtCounterKey(t *testing.T) {
	t.Parallel()
	s, c := newTestStore(t, Options{})
	ctx := context.Background()
	limits := []limiter.Limit{
		{Requests: 10, Window: time.Minute},
		{Requests: 10, Window: time.Minute, SubWindows: 12},
		{Requests: 10, Window: time.Minute, Algorithm: limiter.TokenBucket},
		{Requests: 10, Window: time.Minute, Algorithm: limiter.FixedWindow},
		{Requests: 10, Window: time.Minute, Algorithm: limiter.SlidingLog},
	}
	strays := map[string]func(key string) error{
		"short string": func(key string) error { return c.Set(ctx, key, "hello", time.Minute).Err() },
		"long string":  func(key string) error { return c.Set(ctx, key, strings.Repeat("x", 40), time.Minute).Err() },
		"hash":         func(key string) error { return c.HSet(ctx, key, "c", "2").Err() },
		"sorted set":   func(key string) error { return c.ZAdd(ctx, key, goredis.Z{Score: 1, Member: "m"}).Err() },
		"hash of words": func(key string) error {
			return c.HSet(ctx, key, "i", "abc", "c", "xyz").Err()
		},
		// Scored at +inf, Lua cannot read the score back; a log counts it as
		// a hit until the key expires, a window after.
		"sorted set at inf": func(key string) error { return c.ZAdd(ctx, key, goredis.Z{Score: math.Inf(1), Member: "b"}).Err() },
		"NaN, 16 bytes":     func(key string) error { return c.Set(ctx, key, strings.Repeat("\xff", 16), 0).Err() },
		"NaN, 24 bytes":     func(key string) error { return c.Set(ctx, key, strings.Repeat("\xff", 24), 0).Err() },
	}
	for _, l := range limits {
		for name, put := range strays {
			h := limiter.Hit{Key: "stray " + name, Limit: l, Hits: 1}
			key := counterKey(s.prefix, h)
			if err := put(key); err != nil {
				t.Fatal(err)
			}
			other := limiter.Hit{Key: "other " + name, Limit: l, Hits: 1}
			res, err := s.Apply(ctx, []limiter.Hit{h, other})
			if err != nil {
				t.Errorf("%v (sub-windows %d), a %s at its key: %v", l.Algorithm, l.SubWindows, name, err)
				continue
			}
			want := uint64(9)
			if name == "sorted set at inf" && l.Algorithm == limiter.SlidingLog {
				want = 8
			}
			if !res[0].Allowed || res[0].Remaining != want {
				t.Errorf("%v (sub-windows %d), a %s at its key: %+v, want a fresh counter (Remaining %d)",
					l.Algorithm, l.SubWindows, name, res[0], want)
			}
			if st, ok := readState(t, c, s.prefix, idOf(h)); !ok || emptyState(idOf(h), st) {
				t.Errorf("%v (sub-windows %d), a %s at its key: not written over (%+v, %v)", l.Algorithm, l.SubWindows, name, st, ok)
			}
		}
	}
}
