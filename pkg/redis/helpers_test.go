package redis

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// testTimeout is the per-call deadline in tests: -race on 2 cores is slow,
// and the 15 ms production default would make tests flaky, not stricter.
const testTimeout = 2 * time.Second

// loadTimeout is the per-call deadline of tests that run hundreds of
// concurrent callers and need every one decided: the Store sheds a call
// that its round trip estimate says cannot be answered in time, and under
// -race, with other tests in parallel, hundreds of calls queued behind a
// pool of 10 connections wait seconds.
const loadTimeout = time.Minute

func newClient(t testing.TB, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newClusterClient(t testing.TB, addrs []string) *goredis.ClusterClient {
	t.Helper()
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newTestStore returns a Store on its own client to the shared Redis, with a
// prefix of its own, and deletes the prefix's keys when t ends.
func newTestStore(t testing.TB, o Options) (*Store, *goredis.Client) {
	t.Helper()
	addr := redistest.Addr(t)
	if o.Prefix == "" {
		o.Prefix = redistest.Prefix(t.Name())
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = testTimeout
	}
	c := newClient(t, addr)
	s := New(newClient(t, addr), o)
	t.Cleanup(func() { deletePrefix(t, c, o.Prefix) })
	return s, c
}

// scanPrefix returns every key under prefix on c (every master of a Cluster).
func scanPrefix(t testing.TB, c goredis.UniversalClient, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	var keys []string
	scan := func(ctx context.Context, n *goredis.Client) error {
		it := n.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		return it.Err()
	}
	var err error
	switch c := c.(type) {
	case *goredis.ClusterClient:
		var mu sync.Mutex // ForEachMaster calls concurrently
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, n)
		})
	case *goredis.Client:
		err = scan(ctx, c)
	}
	if err != nil {
		t.Fatalf("scan %q: %v", prefix, err)
	}
	return keys
}

func deletePrefix(t testing.TB, c goredis.UniversalClient, prefix string) {
	for _, k := range scanPrefix(t, c, prefix) {
		_ = c.Del(context.Background(), k).Err()
	}
}

// readCounter reads a counter hash back; a missing key is the zero state.
func readCounter(t testing.TB, c goredis.UniversalClient, key string) (index int64, cur, prev uint64, exists bool) {
	t.Helper()
	v, err := c.HMGet(context.Background(), key, "i", "c", "p").Result()
	if err != nil {
		t.Fatalf("HMGET %q: %v", key, err)
	}
	if v[0] == nil {
		return 0, 0, 0, false
	}
	num := func(x any) uint64 {
		if x == nil {
			return 0 // the script leaves zero fields unwritten
		}
		n, err := strconv.ParseUint(x.(string), 10, 64)
		if err != nil {
			t.Fatalf("HMGET %q: field %q: %v", key, x, err)
		}
		return n
	}
	i, err := strconv.ParseInt(v[0].(string), 10, 64)
	if err != nil {
		t.Fatalf("HMGET %q: index %q: %v", key, v[0], err)
	}
	return i, num(v[1]), num(v[2]), true
}

// deadlineFor waits until cond holds, failing t with what after d. It polls:
// a condition it waits for (a free lane, a replica's copy, a probe's PING,
// a refresh) is the state of another goroutine or process that tells no
// one, not an ordering the test could make with a synchronisation point.
func deadlineFor(t *testing.T, d time.Duration, cond func() bool, what string) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// idle reports whether n has no call in flight.
func (n *node) idle() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.active == 0
}

// queued is how many decisions wait on n for a call.
func (n *node) queued() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.queue)
}
