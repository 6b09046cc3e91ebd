package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// scriptCalls returns how many script calls (EVALSHA, EVAL and FCALL) the
// Redis at addr has run (INFO commandstats): the calls that reached it.
func scriptCalls(t *testing.T, addr string) int {
	t.Helper()
	r, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(r.(string), "\r\n") {
		for _, cmd := range []string{"evalsha", "eval", "fcall"} {
			if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
				c, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				if err != nil {
					t.Fatal(err)
				}
				n += c
			}
		}
	}
	return n
}

// TestShedBeforeRedis: load is shed before Redis, not after, in the
// Store: with a pool of 2 connections and Redis paused (SIGSTOP), of 10
// concurrent decisions 2 go to Redis (and time out), the other 8 are
// answered without being sent; once the node is known stalled, a decision
// is answered at once (errShed), sent nowhere. After Redis resumes, at most
// the 2 scripts sent have run late (INFO commandstats), and decisions
// resume.
func TestShedBeforeRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 2, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	s := New(c, Options{Prefix: redistest.Prefix(t.Name()), CallTimeout: 300 * time.Millisecond, CallsInFlight: 2})
	hit := []limiter.Hit{perMinute("k", 1000)}
	ctx := context.Background()
	if _, err := s.Apply(ctx, hit); err != nil {
		t.Fatal(err)
	}
	before := scriptCalls(t, srv.Addr())
	// The first decision's flush may still be looping (slow under -race):
	// wait until no call is in flight, so that each of the 2 calls the node
	// allows starts with one decision and the rest queue behind them.
	deadlineFor(t, 5*time.Second, s.d.ns.one.idle, "the first call's lane free")

	srv.Pause(t)
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range errs {
		wg.Go(func() { _, errs[i] = s.Apply(ctx, hit) })
	}
	wg.Wait()
	var shed int
	for _, err := range errs {
		if !errors.Is(err, limiter.ErrStoreUnavailable) {
			t.Errorf("Apply with Redis paused = %v, want ErrStoreUnavailable", err)
		}
		if errors.Is(err, errShed) {
			shed++
		}
	}
	if shed != 8 {
		t.Errorf("%d of 10 decisions not sent with 2 connections hung, want 8: %v", shed, errs)
	}
	start := time.Now()
	if _, err := s.Apply(ctx, hit); !errors.Is(err, errShed) || time.Since(start) > 100*time.Millisecond {
		t.Errorf("Apply on a stalled node = %v after %v, want errShed at once", err, time.Since(start))
	}
	srv.Resume(t)

	deadlineFor(t, 5*time.Second, func() bool {
		_, err := s.Apply(ctx, hit)
		return err == nil
	}, "decisions resumed after Redis resumed")
	// Scripts run in Redis from the pause on: those sent while it was
	// paused, at most 2 (the calls in flight; one that had to dial a new
	// connection waited for its handshake and sent nothing), then the one
	// that succeeded above.
	if got := scriptCalls(t, srv.Addr()) - before; got < 1 || got > 3 {
		t.Errorf("Redis ran %d scripts from the pause on, want at most 2 sent while paused, then 1", got)
	}
}

// TestGateEstimate: the round trip estimate starts at minRoundTrip and
// moves an eighth of the way to each measure; a call whose deadline leaves
// less than a round trip is shed at once while another call is in flight,
// and goes when none is (it measures the round trip again).
func TestGateEstimate(t *testing.T) {
	g := newGate(func(context.Context) error { return nil })
	if got := g.roundTrip(); got != minRoundTrip {
		t.Errorf("roundTrip() = %v before any reply, want %v", got, minRoundTrip)
	}
	g.measured(8*time.Millisecond + 7*minRoundTrip/8*8/7) // moves an eighth of the way
	want := minRoundTrip + (8*time.Millisecond+minRoundTrip-minRoundTrip)/8
	if got := g.roundTrip(); got != want {
		t.Errorf("roundTrip() = %v after one 8.1 ms reply, want %v", got, want)
	}

	// A 10 ms round trip, a deadline 5 ms away: with a call in flight the
	// call is shed at once, never sent; with none it goes.
	g.rtt.Store(int64(10 * time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	first, err := g.enter(ctx)
	if err != nil {
		t.Fatalf("enter with no call in flight and 5 ms left of a 10 ms round trip = %v, want it sent", err)
	}
	start := time.Now()
	if _, err := g.enter(ctx); !errors.Is(err, errShed) || time.Since(start) > 100*time.Millisecond {
		t.Errorf("enter beside a call in flight with 5 ms left of a 10 ms round trip = %v after %v, want errShed at once", err, time.Since(start))
	}
	g.leave(first, nil)
	if n := g.flying.Load(); n != 0 {
		t.Errorf("%d calls in flight after the one sent left, want 0", n)
	}
	// A deadline already passed: never sent, even alone.
	ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	if _, err := g.enter(ctx); !errors.Is(err, errShed) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("enter past its deadline = %v, want errShed wrapping context.DeadlineExceeded", err)
	}
}

// TestRefundWarnings holds the refund warnings to failures: once every
// successful Cluster refund logged "refund failed" (its integer reply was
// read as a list). Refunds that succeed log nothing; refunds that fail are
// retried and logged at most once per interval, with the count of failed
// attempts, and one past RefundHorizon is dropped and counted.
func TestRefundWarnings(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.WarnLevel)
	addrs := redistest.Cluster(t)
	admin := newClusterClient(t, addrs)
	prefix := redistest.Prefix(t.Name())
	t.Cleanup(func() { deletePrefix(t, admin, prefix) })
	s := New(newClusterClient(t, addrs), Options{Prefix: prefix, CallTimeout: testTimeout, Logger: zap.New(core)})
	req := refundRequest(s, clusterKeys(t, admin, 3, time.Hour), 1)
	var denied int
	for range 100 {
		res, err := s.Apply(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if res[2].OverLimit {
			denied++
		}
	}
	if denied != 70 || logs.Len() != 0 {
		t.Errorf("%d denied requests refunded (want 70) logged %d warnings, want none: %v", denied, logs.Len(), logs.All())
	}

	// A refunder on a port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	r := newRefunder(New(newClient(t, dead), Options{}).d.runDirect, zap.New(core))
	defer r.close(0)
	for i := range 50 {
		r.add(context.Background(), &entry{kind: kindUndo, keys: []string{"k", "k:u:" + fmt.Sprint(i)},
			specs: []keySpec{{window: 60000, subs: 1}, {alg: markerAlgorithm}}, undo: []float64{0, 0}, ttl: 60000})
	}
	deadlineFor(t, 5*time.Second, func() bool { return r.retried.Load() >= 100 }, "50 refunds tried twice")
	if n := logs.FilterMessageSnippet("refund").Len(); n != 1 {
		t.Errorf("50 refunds failing again and again logged %d warnings, want 1 (at most one per %v)", n, refundLogInterval)
	}
	// Refunds queued long ago fail once more and are dropped. (Each is
	// aged while queued, not while in flight, where send reads it.)
	r.lastLog.Store(0) // let the next warning through
	deadlineFor(t, 10*time.Second, func() bool {
		r.mu.Lock()
		for _, u := range r.queue {
			u.first = time.Now().Add(-2 * RefundHorizon)
		}
		r.mu.Unlock()
		return r.pending() == 0
	}, "refunds past the horizon dropped")
	// Every drop is counted: in a warning, or in the count for the next.
	dropped := r.dropped.Load()
	for _, e := range logs.FilterMessageSnippet("refund").All() {
		dropped += e.ContextMap()["dropped"].(int64)
	}
	if dropped != 50 {
		t.Errorf("50 refunds dropped past the horizon, %d counted (warnings and pending count)", dropped)
	}
}
