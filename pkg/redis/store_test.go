package redis

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/limiter"
)

func perMinute(key string, n uint64) limiter.Hit {
	return limiter.Hit{Key: key, Limit: limiter.Limit{Requests: n, Window: time.Minute}, Hits: 1}
}

// race runs callers concurrent requests spread over stores and returns how
// many were admitted (every hit Allowed).
func race(t *testing.T, stores []*Store, callers int, hits []limiter.Hit) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range callers {
		wg.Go(func() {
			<-start
			res, err := stores[i%len(stores)].Apply(context.Background(), hits)
			if err != nil {
				t.Errorf("Apply: %v", err)
				return
			}
			all := true
			for _, r := range res {
				all = all && r.Allowed
			}
			if all {
				admitted.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	return admitted.Load()
}

// TestConcurrentStores: 4 Stores, each with its own client, share one Redis
// and its clock (TIME); 400 concurrent callers on one 100/minute counter.
func TestConcurrentStores(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	prefix := redistest.Prefix(t.Name())
	var stores []*Store
	for range 4 {
		stores = append(stores, New(newClient(t, addr), Options{Prefix: prefix, CallTimeout: loadTimeout}))
	}
	t.Cleanup(func() { deletePrefix(t, newClient(t, addr), prefix) })
	if got := race(t, stores, 400, []limiter.Hit{perMinute("k", 100)}); got != 100 {
		t.Errorf("400 callers on 100/minute admitted %d, want 100", got)
	}
}

// clusterKeys returns n keys whose counters (with window w) are in n
// different slots on n different masters where possible.
func clusterKeys(t *testing.T, c *goredis.ClusterClient, n int, w time.Duration) []string {
	t.Helper()
	ctx := context.Background()
	nodeOf := func(key string) string {
		slots, err := c.ClusterSlots(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		sl := slot(key)
		for _, r := range slots {
			if sl >= r.Start && sl <= r.End {
				return r.Nodes[0].Addr
			}
		}
		t.Fatalf("slot %d of %q has no node", sl, key)
		return ""
	}
	var keys []string
	seen := map[string]bool{}
	for i := 0; len(keys) < n && i < 1000; i++ {
		k := fmt.Sprintf("d%d", i)
		node := nodeOf(counterKey(DefaultPrefix, limiter.Hit{Key: k, Limit: limiter.Limit{Window: w}}))
		if !seen[node] || len(seen) >= 3 {
			seen[node] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// TestClusterConcurrentCrossSlot: 4 Stores on a Cluster, 400 concurrent
// requests each hitting three counters on three masters, limits 100, 150 and
// 200 per minute. Then sequential requests until one is denied. Exactly 100
// are admitted and every counter holds exactly 100: all or nothing held and
// every refund was exact. The script reads the test clock, fixed in one
// minute: under Redis TIME a run that crossed a minute (seconds, on a loaded
// host) admitted more by design, since the last minute's requests weigh less
// in a sliding window as the new one passes (111 admitted 6.6 s into it).
func TestClusterConcurrentCrossSlot(t *testing.T) {
	t.Parallel()
	addrs := redistest.Cluster(t)
	prefix := redistest.Prefix(t.Name())
	admin := newClusterClient(t, addrs)
	t.Cleanup(func() { deletePrefix(t, admin, prefix) })
	keys := clusterKeys(t, admin, 3, time.Minute)
	hits := []limiter.Hit{perMinute(keys[0], 200), perMinute(keys[1], 100), perMinute(keys[2], 150)}
	clock := testclock.New(time.UnixMilli(1_800_000_000_000))
	var stores []*Store
	for range 4 {
		stores = append(stores, New(newClusterClient(t, addrs), Options{Prefix: prefix, CallTimeout: loadTimeout, Now: clock.Now}))
	}
	if groups, _ := stores[0].split(hits); len(groups) != 3 {
		t.Fatalf("keys %q are in %d slots, want 3", keys, len(groups))
	}
	got := race(t, stores, 400, hits)
	for i := 0; ; i++ {
		if i > 200 {
			t.Fatal("more than 300 requests admitted on a 100/minute limit")
		}
		if race(t, stores[:1], 1, hits) == 0 {
			break
		}
		got++
	}
	if got != 100 {
		t.Errorf("admitted %d requests on limits 200, 100 and 150 per minute, want 100", got)
	}
	for _, h := range hits {
		key := counterKey(prefix, h)
		if _, cur, _, _ := readCounter(t, admin, key); cur != 100 {
			t.Errorf("counter %q = %d, want 100 (the admitted requests)", key, cur)
		}
	}
}

// TestClusterRefundIsExact: on a Cluster, a request that a later slot denies
// leaves the earlier slots exactly as they were, and its Results describe the
// counters as they were.
func TestClusterRefundIsExact(t *testing.T) {
	t.Parallel()
	addrs := redistest.Cluster(t)
	prefix := redistest.Prefix(t.Name())
	admin := newClusterClient(t, addrs)
	t.Cleanup(func() { deletePrefix(t, admin, prefix) })
	now := time.UnixMilli(1_800_000_000_000)
	s := New(newClusterClient(t, addrs), Options{Prefix: prefix, CallTimeout: testTimeout, Now: func() time.Time { return now }})
	keys := clusterKeys(t, admin, 3, time.Minute)
	ctx := context.Background()

	// Fill the counter of the slot decided last, so that the earlier two
	// consume and must be refunded.
	hits := []limiter.Hit{perMinute(keys[0], 10), perMinute(keys[1], 10), perMinute(keys[2], 10)}
	groups, _ := s.split(hits)
	last := hits[groups[2].hits[0]]
	last.Hits = 10
	if _, err := s.Apply(ctx, []limiter.Hit{last}); err != nil {
		t.Fatal(err)
	}
	for _, h := range hits {
		if h.Key == last.Key {
			continue
		}
		warm := h
		warm.Hits = 3
		if _, err := s.Apply(ctx, []limiter.Hit{warm}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Apply(ctx, hits)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range hits {
		want := limiter.Result{Allowed: true, Remaining: 7, ResetAfter: 2 * time.Minute}
		if h.Key == last.Key {
			// cur 10 of 10 at the start of the window: 1 more fits once
			// prev*(1-f) <= 9, 6 s into the next window.
			want = limiter.Result{RetryAfter: 66 * time.Second, ResetAfter: 2 * time.Minute, OverLimit: true}
		}
		if res[i] != want {
			t.Errorf("hit %d (%s) = %+v, want %+v", i, h.Key, res[i], want)
		}
		_, cur, _, _ := readCounter(t, admin, counterKey(prefix, h))
		if wantCur := uint64(3); h.Key == last.Key && cur != 10 || h.Key != last.Key && cur != wantCur {
			t.Errorf("counter of %s = %d after a denied request, want its earlier value", h.Key, cur)
		}
	}
}

func TestSlotMatchesRedis(t *testing.T) {
	t.Parallel()
	c := newClusterClient(t, redistest.Cluster(t))
	for _, k := range []string{"", "a", "}", "%", "{x}", strings.Repeat("é", 300), "\xff"} {
		key := counterKey(DefaultPrefix, limiter.Hit{Key: k, Limit: limiter.Limit{Window: time.Second}})
		want, err := c.ClusterKeySlot(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := slot(key); int64(got) != want {
			t.Errorf("slot(%q) = %d, CLUSTER KEYSLOT = %d", key, got, want)
		}
	}
}

// TestScriptFlush: decisions resume after FUNCTION FLUSH and SCRIPT FLUSH
// with the same Store (FCALL fails with "Function not found", EVALSHA with
// NOSCRIPT, and the Store loads the library or the script again), whether it
// calls the library or, on a Redis without functions, the script.
func TestScriptFlush(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"standalone", "cluster", "standalone eval", "cluster eval"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var s *Store
			var flush func() error
			hits := []limiter.Hit{perMinute("a", 3)}
			if strings.HasPrefix(name, "standalone") {
				var c *goredis.Client
				s, c = newTestStore(t, Options{})
				flush = func() error {
					return errors.Join(c.ScriptFlush(context.Background()).Err(), c.FunctionFlush(context.Background()).Err())
				}
			} else {
				addrs := redistest.Cluster(t)
				prefix := redistest.Prefix(t.Name())
				c := newClusterClient(t, addrs)
				t.Cleanup(func() { deletePrefix(t, c, prefix) })
				s = New(newClusterClient(t, addrs), Options{Prefix: prefix, CallTimeout: testTimeout})
				flush = func() error {
					return c.ForEachShard(context.Background(), func(ctx context.Context, n *goredis.Client) error {
						return errors.Join(n.ScriptFlush(ctx).Err(), n.FunctionFlush(ctx).Err())
					})
				}
				hits = append(hits, perMinute(clusterKeys(t, c, 2, time.Minute)[1], 3), perMinute(clusterKeys(t, c, 2, time.Minute)[0], 3))
			}
			if strings.HasSuffix(name, "eval") {
				s.d.ns.caller.mode.Store(modeEval)
			}
			for i := range 4 {
				if err := flush(); err != nil {
					t.Fatal(err)
				}
				res, err := s.Apply(context.Background(), hits)
				if err != nil {
					t.Fatalf("Apply after FUNCTION FLUSH and SCRIPT FLUSH: %v", err)
				}
				if want := i < 3; res[0].Allowed != want {
					t.Errorf("request %d: Allowed = %v, want %v", i, res[0].Allowed, want)
				}
			}
		})
	}
}

// TestRestart: while Redis is down Apply fails with ErrStoreUnavailable, and
// once it is back (same port, empty, no scripts) decisions resume with the
// same Store.
func TestRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := New(newClient(t, srv.Addr()), Options{CallTimeout: testTimeout})
	ctx := context.Background()
	hits := []limiter.Hit{perMinute("a", 2)}
	if _, err := s.Apply(ctx, hits); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	_, err := s.Apply(ctx, hits)
	if !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Fatalf("Apply with Redis down = %v, want ErrStoreUnavailable", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Errorf("Ping with Redis down = %v, want ErrStoreUnavailable", err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// A pooled connection from before the restart may fail once.
	var res []limiter.Result
	for i := range 5 {
		if res, err = s.Apply(ctx, hits); err == nil {
			break
		}
		t.Logf("attempt %d after restart: %v", i, err)
	}
	if err != nil {
		t.Fatalf("Apply after restart: %v", err)
	}
	if want := (limiter.Result{Allowed: true, Remaining: 1, ResetAfter: res[0].ResetAfter}); res[0] != want {
		t.Errorf("first hit after restart = %+v, want %+v (the counter was lost with the data)", res[0], want)
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping after restart: %v", err)
	}
}

// TestTTL: every key the Store wrote has a TTL of at most two windows.
func TestTTL(t *testing.T) {
	t.Parallel()
	s, c := newTestStore(t, Options{})
	ctx := context.Background()
	windows := []time.Duration{time.Second, 1501 * time.Millisecond, time.Minute, time.Hour, 24 * time.Hour}
	for i, w := range windows {
		for j, k := range []string{"a", "}", strings.Repeat("x", 1000)} {
			hits := []limiter.Hit{
				{Key: k, Limit: limiter.Limit{Requests: 10, Window: w}, Hits: uint64(1 + i + j)},
				{Key: k + "r", Limit: limiter.Limit{Requests: 10, Window: w}, Hits: 1},
				{Key: k + "r", Limit: limiter.Limit{Requests: 10, Window: w}, Hits: 1, Refund: true},
				{Key: k + "s", Limit: limiter.Limit{Requests: 0, Window: w}, Hits: 1, Shadow: true},
			}
			if _, err := s.Apply(ctx, hits); err != nil {
				t.Fatal(err)
			}
		}
	}
	keys := scanPrefix(t, c, s.prefix)
	if len(keys) != 2*len(windows)*3 { // the refunded counters are zero and deleted
		t.Errorf("found %d keys, want %d", len(keys), 2*len(windows)*3)
	}
	for _, k := range keys {
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		var w int64
		if _, err := fmt.Sscanf(k[strings.IndexByte(k, '{')+1:], "sw:%d:", &w); err != nil {
			t.Fatalf("key %q: %v", k, err)
		}
		if ttl <= 0 || ttl > 2*time.Duration(w)*time.Millisecond {
			t.Errorf("PTTL %q = %v, want in (0, %v]", k, ttl, 2*time.Duration(w)*time.Millisecond)
		}
	}
}

// TestDeniedWritesNothing: a denied request neither changes a counter nor
// extends its TTL.
func TestDeniedWritesNothing(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_800_000_000_000)
	s, c := newTestStore(t, Options{Now: func() time.Time { return now }})
	ctx := context.Background()
	a, b := perMinute("a", 5), perMinute("b", 1)
	if _, err := s.Apply(ctx, []limiter.Hit{a, b}); err != nil {
		t.Fatal(err)
	}
	ka, kb := counterKey(s.prefix, a), counterKey(s.prefix, b)
	if err := c.PExpire(ctx, ka, time.Hour).Err(); err != nil { // a marker TTL
		t.Fatal(err)
	}
	res, err := s.Apply(ctx, []limiter.Hit{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if want := (limiter.Result{Allowed: true, Remaining: 4, ResetAfter: 2 * time.Minute}); res[0] != want {
		t.Errorf("allowed hit of a denied request = %+v, want %+v", res[0], want)
	}
	if _, cur, _, _ := readCounter(t, c, ka); cur != 1 {
		t.Errorf("counter a = %d after a denied request, want 1", cur)
	}
	if _, cur, _, _ := readCounter(t, c, kb); cur != 1 {
		t.Errorf("counter b = %d after a denied request, want 1", cur)
	}
	if ttl := c.PTTL(ctx, ka).Val(); ttl <= 2*time.Minute {
		t.Errorf("PTTL of a = %v: a denied request rewrote the TTL", ttl)
	}
}

func TestRefundNeverBelowZero(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_800_000_000_000)
	s, c := newTestStore(t, Options{Now: func() time.Time { return now }})
	ctx := context.Background()
	h := perMinute("a", 10)
	h.Hits = 3
	if _, err := s.Apply(ctx, []limiter.Hit{h}); err != nil {
		t.Fatal(err)
	}
	h.Refund, h.Hits = true, 2
	if _, err := s.Apply(ctx, []limiter.Hit{h}); err != nil {
		t.Fatal(err)
	}
	if _, cur, _, _ := readCounter(t, c, counterKey(s.prefix, h)); cur != 1 {
		t.Errorf("counter after +3 -2 = %d, want 1", cur)
	}
	h.Hits = 5
	res, err := s.Apply(ctx, []limiter.Hit{h})
	if err != nil {
		t.Fatal(err)
	}
	if want := (limiter.Result{Allowed: true, Remaining: 10}); res[0] != want {
		t.Errorf("refund below zero = %+v, want %+v", res[0], want)
	}
	if n := c.Exists(ctx, counterKey(s.prefix, h)).Val(); n != 0 {
		t.Errorf("a counter refunded to zero still exists")
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t, Options{})
	hits := []limiter.Hit{perMinute("a", 1)}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Apply(ctx, hits); !errors.Is(err, limiter.ErrStoreUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("Apply(canceled ctx) = %v, want ErrStoreUnavailable and context.Canceled", err)
	}

	short := New(newClient(t, redistest.Addr(t)), Options{CallTimeout: time.Nanosecond})
	if _, err := short.Apply(context.Background(), hits); !errors.Is(err, limiter.ErrStoreUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Apply with 1ns CallTimeout = %v, want ErrStoreUnavailable and context.DeadlineExceeded", err)
	}

	bad := hits[0]
	bad.Limit.Window = 0
	if _, err := s.Apply(context.Background(), []limiter.Hit{hits[0], bad}); err == nil || errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Errorf("Apply(invalid limit) = %v, want a plain error", err)
	}

	closed := New(newClient(t, redistest.Addr(t)), Options{})
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := closed.Apply(context.Background(), hits); !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Errorf("Apply after Close = %v, want ErrStoreUnavailable", err)
	}
}

// TestClusterQuotaGroupAcrossSlots: a quota group whose hits are in three
// slots on three masters denies only when all its hits are over; then every
// slot's consumption is taken back exactly, and otherwise every counter,
// the over quota ones included, counts.
func TestClusterQuotaGroupAcrossSlots(t *testing.T) {
	t.Parallel()
	addrs := redistest.Cluster(t)
	prefix := redistest.Prefix(t.Name())
	admin := newClusterClient(t, addrs)
	t.Cleanup(func() { deletePrefix(t, admin, prefix) })
	now := time.UnixMilli(1_800_000_000_000) // a window start
	s := New(newClusterClient(t, addrs), Options{Prefix: prefix, CallTimeout: testTimeout, Now: func() time.Time { return now }})
	keys := clusterKeys(t, admin, 3, time.Minute)
	ctx := context.Background()
	quota := func(key string, n uint64) limiter.Hit {
		h := perMinute(key, n)
		h.Quota = true
		return h
	}
	a, b, c := quota(keys[0], 1), quota(keys[1], 5), perMinute(keys[2], 10)
	full := b
	full.Hits = 5
	if _, err := s.Apply(ctx, []limiter.Hit{a, full}); err != nil {
		t.Fatal(err)
	}
	cur := func(h limiter.Hit) uint64 {
		_, n, _, _ := readCounter(t, admin, counterKey(prefix, h))
		return n
	}

	req := []limiter.Hit{a, b, c}
	if _, split := s.split(req); !split {
		t.Fatalf("quota hits on %q and %q: split = false, want true (two slots)", keys[0], keys[1])
	}
	res, err := s.Apply(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := []limiter.Result{
		{RetryAfter: 2 * time.Minute, ResetAfter: 2 * time.Minute, OverLimit: true},
		{RetryAfter: 72 * time.Second, ResetAfter: 2 * time.Minute, OverLimit: true},
		{Allowed: true, Remaining: 10},
	}
	if !slices.Equal(res, want) {
		t.Errorf("quota group over in every slot = %+v, want %+v", res, want)
	}
	if got := []uint64{cur(a), cur(b), cur(c)}; !slices.Equal(got, []uint64{1, 5, 0}) {
		t.Errorf("counters after the denied request = %v, want [1 5 0] (every slot refunded)", got)
	}

	quotaC := quota(keys[2], 10)
	res, err = s.Apply(ctx, []limiter.Hit{a, quotaC})
	if err != nil {
		t.Fatal(err)
	}
	want = []limiter.Result{
		{RetryAfter: 2 * time.Minute, ResetAfter: 2 * time.Minute},
		{Allowed: true, Remaining: 9, ResetAfter: 2 * time.Minute},
	}
	if !slices.Equal(res, want) {
		t.Errorf("quota group with one hit under its limit = %+v, want %+v", res, want)
	}
	if got := []uint64{cur(a), cur(quotaC)}; !slices.Equal(got, []uint64{2, 1}) {
		t.Errorf("counters after the admitted request = %v, want [2 1]", got)
	}
}

// TestSplitQuotaGroups: quota hits are sent as shadow hits exactly when the
// group's enforced hits are in more than one slot.
func TestSplitQuotaGroups(t *testing.T) {
	t.Parallel()
	standalone, _ := newTestStore(t, Options{})
	addrs := redistest.Cluster(t)
	cluster := New(newClusterClient(t, addrs), Options{})
	keys := clusterKeys(t, newClusterClient(t, addrs), 2, time.Minute)
	quota := func(key string) limiter.Hit {
		h := perMinute(key, 5)
		h.Quota = true
		return h
	}
	shadowQuota := quota(keys[1])
	shadowQuota.Shadow = true
	for _, tc := range []struct {
		name string
		s    *Store
		hits []limiter.Hit
		want bool
	}{
		{"standalone", standalone, []limiter.Hit{quota(keys[0]), quota(keys[1])}, false},
		{"one slot", cluster, []limiter.Hit{quota(keys[0]), quota(keys[0]), perMinute(keys[1], 1)}, false},
		{"two slots", cluster, []limiter.Hit{quota(keys[0]), quota(keys[1])}, true},
		{"a shadow quota hit is not in the group", cluster, []limiter.Hit{quota(keys[0]), shadowQuota}, false},
	} {
		groups, split := tc.s.split(tc.hits)
		if split != tc.want {
			t.Errorf("%s: split = %v, want %v", tc.name, split, tc.want)
		}
		for _, g := range groups {
			for j, i := range g.hits {
				f := g.e.hits[j].flags
				h := tc.hits[i]
				if wantShadow := h.Shadow || h.Quota && tc.want; (f&flagShadow != 0) != wantShadow || (f&flagQuota != 0) != h.Quota {
					t.Errorf("%s: hit %d flags %b, want shadow %v quota %v", tc.name, i, f, wantShadow, h.Quota)
				}
			}
		}
	}
}

// TestTTLEveryAlgorithm: every algorithm's key gets, in the script that
// writes it, the TTL of the moment its state no longer matters (the Go
// twin's expires), and the state is then equivalent to none: the same hit
// decides alike on it and on an empty counter.
func TestTTLEveryAlgorithm(t *testing.T) {
	t.Parallel()
	const now = int64(1_800_000_012_345)
	s, c := newTestStore(t, Options{Now: func() time.Time { return time.UnixMilli(now) }})
	ctx := context.Background()
	limits := []limiter.Limit{
		{Requests: 10, Window: time.Minute},
		{Requests: 10, Window: time.Minute, SubWindows: 12},
		{Requests: 3, Window: time.Second, Algorithm: limiter.TokenBucket, Burst: 10},
		{Requests: 10, Window: time.Minute, Algorithm: limiter.FixedWindow},
		{Requests: 10, Window: time.Minute, Algorithm: limiter.SlidingLog},
		{Requests: 10, Window: time.Minute, Algorithm: limiter.Concurrency},
	}
	for _, l := range limits {
		h := limiter.Hit{Key: "ttl", Limit: l, Hits: 4}
		if _, err := s.Apply(ctx, []limiter.Hit{h}); err != nil {
			t.Fatal(err)
		}
		_, next, _, err := limiter.Evaluate(now, []limiter.Hit{h}, []limiter.State{{}})
		if err != nil {
			t.Fatal(err)
		}
		want := stateTTL(idOf(h), next[0], now)
		key := counterKey(s.prefix, h)
		got, err := c.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		// PTTL counts down in real time from the write.
		if got > want || got < want-time.Second {
			t.Errorf("%v (sub-windows %d): PTTL = %v, want %v", l.Algorithm, l.SubWindows, got, want)
		}
		at := now + want.Milliseconds()
		check := limiter.Hit{Key: "ttl", Limit: l, Hits: 1}
		r1, _, _, _ := limiter.Evaluate(at, []limiter.Hit{check}, []limiter.State{next[0]})
		r0, _, _, _ := limiter.Evaluate(at, []limiter.Hit{check}, []limiter.State{{}})
		if !reflect.DeepEqual(r1, r0) {
			t.Errorf("%v (sub-windows %d): at expiry the state still matters: %+v, empty %+v", l.Algorithm, l.SubWindows, r1, r0)
		}
		r1, _, _, _ = limiter.Evaluate(at-1, []limiter.Hit{check}, []limiter.State{next[0]})
		r0, _, _, _ = limiter.Evaluate(at-1, []limiter.Hit{check}, []limiter.State{{}})
		if reflect.DeepEqual(r1, r0) {
			t.Errorf("%v (sub-windows %d): 1 ms before expiry the state no longer matters: the TTL is late", l.Algorithm, l.SubWindows)
		}
	}
}

// TestSubWindowSlotsWiden drives one sub-window counter through counts that
// need 1, 2, 4 and 8 bytes a slot (lua/sliding_sub.lua):
// each count moves into the slots a sub-window later, the string widens to
// hold it, and the total, the Result and the stored slots stay exact.
func TestSubWindowSlotsWiden(t *testing.T) {
	var now atomic.Int64
	now.Store(1_767_225_600_000)
	s, c := newTestStore(t, Options{Now: func() time.Time { return time.UnixMilli(now.Load()) }})
	l := limiter.Limit{Requests: 1 << 50, Window: 5 * time.Second, SubWindows: 5}
	h := limiter.Hit{Key: "wide", Limit: l}
	id := idOf(h)
	var total uint64
	for i, hits := range []uint64{200, 300, 70_000, 5_000_000_000, 1} {
		h.Hits = hits
		r, err := s.Apply(context.Background(), []limiter.Hit{h})
		if err != nil {
			t.Fatal(err)
		}
		total += hits
		if !r[0].Allowed || r[0].Remaining != l.Requests-total {
			t.Fatalf("step %d: %+v, want allowed with %d remaining", i, r[0], l.Requests-total)
		}
		st, ok := readState(t, c, s.prefix, id)
		if !ok {
			t.Fatalf("step %d: no counter", i)
		}
		var sum int64
		for _, n := range st.Slots {
			sum += n
		}
		if sum != int64(total) || st.Slots[len(st.Slots)-1] != int64(hits) {
			t.Fatalf("step %d: slots %v, want %d in all and %d now", i, st.Slots, total, hits)
		}
		now.Add(1000) // the next sub-window: this count moves into slot 1
	}
	v, err := c.Get(context.Background(), counterKey(s.prefix, h)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if w := v[len(v)-2]; w != 8 || len(v) != 5*8+26 {
		t.Errorf("width %d, %d bytes: want 8-byte slots after a count of 5e9", w, len(v))
	}
}
