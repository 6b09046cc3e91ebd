package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestClusterRefundsUnderLoad: refunds are never lost under load. They once
// had a fresh 15 ms deadline and were lost (100 callers, hits 2, 3 and 5: a
// sibling counter reached 315 where 15 were admitted). A
// request counts [parent][sibling][tight] in three slots on three masters,
// tight (30 an hour) decided last, so every denial refunds the two others.
// The round trip that refunds a denial is given 100 µs here, so that most
// refunds miss it, some after they ran, and the refunder retries them. With
// 100 and 400 concurrent callers and hits 2, 3 and 5, every counter must end
// at hits x the admitted requests: no refund lost, none applied twice.
func TestClusterRefundsUnderLoad(t *testing.T) {
	t.Parallel()
	addrs := redistest.Cluster(t)
	admin := newClusterClient(t, addrs)
	names := clusterKeys(t, admin, 3, time.Hour)
	for _, tc := range []struct {
		callers, each int
	}{{100, 3}, {400, 2}} {
		for _, hits := range []uint64{2, 3, 5} {
			t.Run(fmt.Sprintf("%d callers hits %d", tc.callers, hits), func(t *testing.T) {
				prefix := redistest.Prefix(t.Name())
				t.Cleanup(func() { deletePrefix(t, admin, prefix) })
				// Every request must be decided, for the counts to be exact.
				s := New(newClusterClient(t, addrs), Options{Prefix: prefix, CallTimeout: loadTimeout})
				s.d.settleTimeout = 100 * time.Microsecond
				req := refundRequest(s, names, hits)
				var admitted, denied atomic.Int64
				var wg sync.WaitGroup
				start := make(chan struct{})
				for range tc.callers {
					wg.Go(func() {
						<-start
						for range tc.each {
							res, err := s.Apply(context.Background(), req)
							if err != nil {
								t.Errorf("Apply: %v", err)
								return
							}
							if res[2].OverLimit {
								denied.Add(1)
							} else {
								admitted.Add(1)
							}
						}
					})
				}
				close(start)
				wg.Wait()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := s.d.refunds.flush(ctx); err != nil {
					t.Fatalf("refunds still pending after 10 s: %v", err)
				}
				want := hits * uint64(admitted.Load())
				var got []uint64
				for _, h := range req {
					_, cur, _, _ := readCounter(t, admin, counterKey(prefix, h))
					got = append(got, cur)
				}
				t.Logf("admitted %d, denied %d; counters %v, want %d each; %d refund attempts retried",
					admitted.Load(), denied.Load(), got, want, s.d.refunds.retried.Load())
				if !slices.Equal(got, []uint64{want, want, want}) {
					t.Errorf("counters [parent sibling tight] = %v after %d admitted requests of hits %d, want %d each",
						got, admitted.Load(), hits, want)
				}
				if admitted.Load() != int64(30/hits) {
					t.Errorf("admitted %d requests of hits %d under 30 an hour, want %d", admitted.Load(), hits, 30/hits)
				}
			})
		}
	}
}

// refundRequest returns [parent][sibling][tight] on the three keys of
// names, tight (30 an hour) on the one in the highest slot, so that it is
// decided last, the two others a million an hour; each with hits.
func refundRequest(s *Store, names []string, hits uint64) []limiter.Hit {
	names = slices.Clone(names)
	hour := func(key string, n uint64) limiter.Hit {
		return limiter.Hit{Key: key, Limit: limiter.Limit{Requests: n, Window: time.Hour}, Hits: hits}
	}
	slices.SortFunc(names, func(a, b string) int {
		return slot(counterKey(s.prefix, hour(a, 1))) - slot(counterKey(s.prefix, hour(b, 1)))
	})
	return []limiter.Hit{hour(names[0], 1_000_000), hour(names[1], 1_000_000), hour(names[2], 30)}
}

// TestClusterKnownDenialWithAShardDown: a known denial is the answer: with
// one master of a private Cluster down, a request that another
// slot denies is OVER_LIMIT, whether the denying slot is decided before the
// unreachable one or after it, and the unreachable slot's Results say
// nothing; a request on the unreachable slot alone is an error.
func TestClusterKnownDenialWithAShardDown(t *testing.T) {
	t.Parallel()
	nodes, addrs := redistest.StartCluster(t)
	admin := newClusterClient(t, addrs)
	prefix := redistest.Prefix(t.Name())
	s := New(newClusterClient(t, addrs), Options{Prefix: prefix, CallTimeout: testTimeout})
	one := func(key string, n uint64) limiter.Hit {
		return limiter.Hit{Key: key, Limit: limiter.Limit{Requests: n, Window: time.Hour}, Hits: 1}
	}
	names := clusterKeys(t, admin, 3, time.Hour)
	slices.SortFunc(names, func(a, b string) int {
		return slot(counterKey(prefix, one(a, 1))) - slot(counterKey(prefix, one(b, 1)))
	})
	first, down, last := one(names[0], 1), one(names[1], 1000), one(names[2], 1)
	ctx := context.Background()
	for _, h := range []limiter.Hit{first, last} { // each at its limit
		if _, err := s.Apply(ctx, []limiter.Hit{h}); err != nil {
			t.Fatal(err)
		}
	}
	node, err := admin.MasterForKey(ctx, counterKey(prefix, down))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Addr() == node.Options().Addr {
			n.Stop()
		}
	}

	for _, tc := range []struct {
		name string
		req  []limiter.Hit
		deny int // the index of the denying hit
	}{
		{"denied before the unreachable slot", []limiter.Hit{first, down}, 0},
		{"denied after the unreachable slot", []limiter.Hit{down, last}, 1},
	} {
		res, err := s.Apply(ctx, tc.req)
		if err != nil {
			t.Errorf("%s: Apply = %v, want the denial", tc.name, err)
			continue
		}
		if !res[tc.deny].OverLimit {
			t.Errorf("%s: denying hit = %+v, want OverLimit", tc.name, res[tc.deny])
		}
		if got := res[1-tc.deny]; got != (limiter.Result{Allowed: true}) {
			t.Errorf("%s: unreachable hit = %+v, want a Result that says nothing (Allowed, zero)", tc.name, got)
		}
	}
	if _, err := s.Apply(ctx, []limiter.Hit{down}); !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Errorf("Apply on the unreachable slot alone = %v, want ErrStoreUnavailable", err)
	}
}
