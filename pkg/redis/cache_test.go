package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestCacheSyncsEveryCounter: a limiter cache on Redis (standalone and
// Cluster) decides warm counters in process and its syncs, one part per
// slot, leave every counter holding exactly the hits admitted.
func TestCacheSyncsEveryCounter(t *testing.T) {
	addrs := redistest.Cluster(t)
	for _, tc := range []struct {
		name    string
		cluster bool
	}{{"standalone", false}, {"cluster", true}} {
		t.Run(tc.name, func(t *testing.T) {
			clock := testclock.New(time.UnixMilli(1_700_000_040_000))
			var st *Store
			if tc.cluster {
				prefix := redistest.Prefix(t.Name())
				st = New(newClusterClient(t, addrs), Options{Now: clock.Now, Prefix: prefix, CallTimeout: loadTimeout})
				t.Cleanup(func() { deletePrefix(t, newClusterClient(t, addrs), prefix) })
			} else {
				st, _ = newTestStore(t, Options{Now: clock.Now, CallTimeout: loadTimeout})
			}
			c := limiter.NewCache(st, limiter.CacheOptions{Now: clock.Now})
			ctx := context.Background()
			const keys, limit = 40, 100000
			hit := func(k int) limiter.Hit {
				return limiter.Hit{Key: fmt.Sprint("k", k), Hits: 1, Limit: limiter.Limit{Requests: limit, Window: time.Hour, Cache: true}}
			}
			var hits []limiter.Hit
			for k := range keys {
				hits = append(hits, hit(k))
			}
			if parts := st.Partition(hits); (len(parts) > 1) != tc.cluster {
				t.Errorf("Partition gave %d parts, want more than one only on a Cluster", len(parts))
			}
			for range 30 { // 3 s at 10 per second per key
				for k := range keys {
					if _, err := c.Apply(ctx, []limiter.Hit{hit(k)}); err != nil {
						t.Fatal(err)
					}
				}
				clock.Advance(100 * time.Millisecond)
				if err := c.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if c.Stats().Decided == 0 {
				t.Fatal("nothing decided in process")
			}
			for k := range keys {
				h := hit(k)
				h.Hits, h.Limit.Cache = 0, false
				res, err := st.Apply(ctx, []limiter.Hit{h})
				if err != nil {
					t.Fatal(err)
				}
				if want := uint64(limit - 30); res[0].Remaining != want {
					t.Errorf("key %d: remaining %d, want %d", k, res[0].Remaining, want)
				}
			}
			t.Logf("stats %+v", c.Stats())
		})
	}
}
