package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// hammer runs callers per Store on hits for d and returns the decisions and
// the requests admitted.
func hammer(t *testing.T, stores []*Store, callers int, hits []limiter.Hit, d time.Duration) (decisions, admitted int64) {
	t.Helper()
	var nd, na atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for _, s := range stores {
		for range callers {
			wg.Go(func() {
				for time.Now().Before(end) {
					res, err := s.Apply(context.Background(), hits)
					if err != nil {
						t.Errorf("Apply: %v", err)
						return
					}
					nd.Add(1)
					if res[0].Allowed {
						na.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	return nd.Load(), na.Load()
}

// leaseStores starts a Redis of the test's own and two Stores on it under
// one prefix that lease from 100 decisions a second.
func leaseStores(t *testing.T, now func() time.Time) (*redistest.Server, string, []*Store) {
	t.Helper()
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t.Name())
	var stores []*Store
	for range 2 {
		stores = append(stores, New(newClient(t, srv.Addr()), Options{Prefix: prefix, CallTimeout: loadTimeout, LeaseRate: 100, Logger: zaptest.NewLogger(t), Now: now}))
	}
	return srv, prefix, stores
}

// TestLeaseHotKey: 2 Stores x 32 callers on one counter that never fills.
// Once the key is hot (after a whole second above LeaseRate), the Stores
// spend leased permits: well under 0.05 script calls per decision. The
// counter in Redis holds every admitted request and the unspent permits;
// after Close gives those back, exactly the admitted requests.
func TestLeaseHotKey(t *testing.T) {
	srv, prefix, stores := leaseStores(t, nil)
	h := limiter.Hit{Key: "hot", Limit: limiter.Limit{Requests: 1 << 40, Window: time.Minute, SubWindows: 6}, Hits: 1}
	warmDecisions, warmAdmitted := hammer(t, stores, 32, []limiter.Hit{h}, 1500*time.Millisecond)
	c0 := scriptCalls(t, srv.Addr())
	decisions, admitted := hammer(t, stores, 32, []limiter.Hit{h}, time.Second)
	calls := int64(scriptCalls(t, srv.Addr()) - c0)
	perDecision := float64(calls) / float64(decisions)
	t.Logf("hot: %d decisions, %d script calls: %.4f calls per decision", decisions, calls, perDecision)
	if perDecision > 0.05 || decisions == 0 {
		t.Errorf("hot key: %.4f script calls per decision (%d decisions), want at most 0.05", perDecision, decisions)
	}
	if admitted != decisions || warmAdmitted != warmDecisions {
		t.Errorf("admitted %d of %d (warm: %d of %d), want all", admitted, decisions, warmAdmitted, warmDecisions)
	}
	for _, s := range stores {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if total, want := packedCount(t, srv.Addr(), prefix, h), admitted+warmAdmitted; total != want {
		t.Errorf("counter after Close = %d, want the %d admitted (unspent permits given back)", total, want)
	}
}

// TestLeaseLimit: the same load on a counter the run fills: the fleet
// admits no more than the limit in any window, leases and all, and the
// permits a Store holds unspent (the unfairness leases cost) are reported.
func TestLeaseLimit(t *testing.T) {
	// A sliding window of one sub-window admits more after a minute starts
	// (the last minute's hits weigh less as it passes): a run that crossed
	// one would admit more than the limit by design, not by its leases. The
	// Stores' clock (the script's, instead of Redis TIME) runs at the real
	// pace from 5 s into a minute, so the 4 s run crosses none.
	offset := (65*time.Second - time.Duration(time.Now().UnixNano())%time.Minute) % time.Minute
	_, _, stores := leaseStores(t, func() time.Time { return time.Now().Add(offset) })
	const limit = 20000
	h := limiter.Hit{Key: "fills", Limit: limiter.Limit{Requests: limit, Window: time.Minute}, Hits: 1}
	decisions, admitted := hammer(t, stores, 32, []limiter.Hit{h}, 4*time.Second)
	t.Logf("%d decisions, %d admitted of %d (%.4f)", decisions, admitted, limit, float64(admitted)/limit)
	if admitted > limit {
		t.Errorf("admitted %d, want at most the limit %d", admitted, limit)
	}
	if decisions < 2*limit {
		t.Fatalf("%d decisions: the run did not fill the counter", decisions)
	}
	if admitted < limit*99/100 {
		t.Errorf("admitted %d, want at least 99%% of %d: leases held too many permits unspent", admitted, limit)
	}
	for _, s := range stores {
		_ = s.Close()
	}
}

// TestLeaseUnfairness measures what leases cost: two Stores are hot on one
// counter, then one goes quiet while the other keeps going. The permits the
// quiet one leased and never spent are lost to the busy one until the quiet
// one gives them back (within about a second after their sub-window, here
// a second long, ends): then it holds none, and after Close the counter
// holds exactly the admitted requests.
func TestLeaseUnfairness(t *testing.T) {
	srv, prefix, stores := leaseStores(t, nil)
	h := limiter.Hit{Key: "shared", Limit: limiter.Limit{Requests: 1 << 40, Window: time.Minute, SubWindows: 60}, Hits: 1}
	var quietDecisions, quietAdmitted int64
	var held uint64
	var wg sync.WaitGroup
	wg.Go(func() {
		quietDecisions, quietAdmitted = hammer(t, stores[1:], 4, []limiter.Hit{h}, 2*time.Second)
		held = stores[1].leases.held()
	})
	busyDecisions, busyAdmitted := hammer(t, stores[:1], 32, []limiter.Hit{h}, 5*time.Second)
	wg.Wait()
	rate := float64(quietDecisions) / 2
	t.Logf("quiet: %d decisions in 2 s, %d permits held when it went quiet (%.0f ms of its traffic); busy: %d decisions",
		quietDecisions, held, 1000*float64(held)/rate, busyDecisions)
	if left := stores[1].leases.held(); left != 0 {
		t.Errorf("quiet Store holds %d permits 3 s after it went quiet, want 0 (given back)", left)
	}
	for _, s := range stores {
		_ = s.Close()
	}
	if total, want := packedCount(t, srv.Addr(), prefix, h), quietAdmitted+busyAdmitted; total != want {
		t.Errorf("counter after Close = %d, want the %d admitted", total, want)
	}
}

// packedCount returns the hits the sub-window counter of h (under prefix)
// holds on the Redis at addr.
func packedCount(t *testing.T, addr, prefix string, h limiter.Hit) int64 {
	t.Helper()
	v, err := redistest.Do(addr, "GET", counterKey(cleanPrefix(prefix), h))
	if err != nil {
		t.Fatal(err)
	}
	st, err := parsePacked(v.(string), h.Limit.SubWindowCount())
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, c := range st.Slots {
		total += c
	}
	return total
}

// TestLeaseGivenBackWhenQuiet: a Store hot on a counter of an hour's window
// (fixed, and sliding of one sub-window: the (sub-)window that counts the
// permits is the whole hour) goes quiet. The permits it leased and did not
// spend go back about a second after it stopped spending them, not when the
// hour ends: 3 s later it holds none, and the counter in Redis holds exactly
// the admitted requests.
func TestLeaseGivenBackWhenQuiet(t *testing.T) {
	for _, l := range []limiter.Limit{
		{Requests: 1 << 40, Window: time.Hour, Algorithm: limiter.FixedWindow},
		{Requests: 1 << 40, Window: time.Hour, SubWindows: 1},
	} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			srv, prefix, stores := leaseStores(t, nil)
			h := limiter.Hit{Key: "quiet", Limit: l, Hits: 1}
			decisions, admitted := hammer(t, stores[:1], 16, []limiter.Hit{h}, 2500*time.Millisecond)
			quiet, first := time.Now(), stores[0].leases.held()
			if first == 0 {
				t.Fatal("no permits held when the Store went quiet: the run leased nothing")
			}
			key, c := counterKey(cleanPrefix(prefix), h), newClient(t, srv.Addr())
			count := func() uint64 {
				if l.Algorithm != limiter.FixedWindow {
					_, n, _, _ := readCounter(t, c, key)
					return n
				}
				v, err := redistest.Do(srv.Addr(), "GET", key)
				if err != nil {
					t.Fatal(err)
				}
				st, err := parseFixed(v.(string))
				if err != nil {
					t.Fatal(err)
				}
				return st.N1
			}
			// The sweep gives the permits back in the background: within 3 s
			// none is held, and the counter holds the admitted requests.
			deadlineFor(t, 3*time.Second, func() bool { return stores[0].leases.held() == 0 },
				"permits given back after the Store went quiet (want 0 held)")
			deadlineFor(t, time.Until(quiet.Add(3*time.Second)), func() bool { return count() == uint64(admitted) },
				fmt.Sprintf("counter after the Store went quiet = the %d admitted", admitted))
			t.Logf("%d decisions in 2.5 s; %d permits held when it went quiet, given back within %v", decisions, first,
				time.Since(quiet).Round(10*time.Millisecond))
			for _, s := range stores {
				_ = s.Close()
			}
		})
	}
}

// TestLeaseRateZeroIsOff: a LeaseRate of 0 turns leases off, as
// --redis-lease-rate 0 does, so that the server passes its setting as it
// is; a rate above 0 leases from that rate.
func TestLeaseRateZeroIsOff(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		want uint32 // the lease tier's rate; 0: no tier
	}{{0, 0}, {-1, 0}, {DefaultLeaseRate, DefaultLeaseRate}, {50, 50}} {
		s := New(newClient(t, redistest.Addr(t)), Options{LeaseRate: tc.rate})
		var got uint32
		if s.leases != nil {
			got = s.leases.rate
		}
		if got != tc.want {
			t.Errorf("New(LeaseRate %v): lease rate %d, want %d (0: off)", tc.rate, got, tc.want)
		}
		s.Close()
	}
}
