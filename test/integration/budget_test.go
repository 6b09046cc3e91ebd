package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRedisPauseWithinBudgetNoError stops Redis (SIGSTOP) for 1.2 s while
// calls wait on it: 16 with a 5 s gRPC deadline and 16 with none (their
// budget the 3 s --store-timeout). Every call's budget outlasts the pause,
// so nothing is at fault and every call must be decided: no error, no
// failure-mode answer, and the store's error count stays 0. (With a socket
// read timeout shorter than the budget, 500 ms as it was, the calls in
// flight failed with an i/o timeout, the node was then marked stalled, and
// every call that followed was answered UNAVAILABLE until a PING got
// through: 1,249 errors in a 700 ms pause at 64 callers.)
func TestRedisPauseWithinBudgetNoError(t *testing.T) {
	srv := redistest.Start(t)
	s := startSluice(t, "--config", "test/integration/testdata/chaos",
		"--redis-url", "redis://"+srv.Addr()+"/0", "--redis-prefix", redistest.Prefix(t.Name()),
		"--store-timeout", "3s")
	s.call(t, "chaos_unset", []string{"load", "warm"}) // connections open, script loaded
	before := metrics(t, s)

	const callers = 16
	srv.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	var started, done sync.WaitGroup
	errs := make(chan error, 2*callers)
	for i := range 2 * callers {
		started.Add(1)
		done.Go(func() {
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if i%2 == 0 {
				ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
			}
			defer cancel()
			started.Done()
			resp, err := s.Client.ShouldRateLimit(ctx, request("chaos_unset", []string{"load", "paused"}))
			if err == nil && resp.GetStatuses()[0].GetLimitRemaining() == 0 {
				err = status.Error(codes.Unknown, "answered with no remaining count: not decided by Redis")
			}
			errs <- err
		})
	}
	started.Wait()
	time.Sleep(1200 * time.Millisecond) // the outage: longer than 500 ms, shorter than every budget
	srv.Resume(t)
	resumed = true
	done.Wait()
	close(errs)
	got := map[codes.Code]int{}
	for err := range errs {
		got[status.Code(err)]++
		if err != nil {
			t.Errorf("call during a 1.2 s pause within its budget: %v", err)
		}
	}
	after := metrics(t, s)
	if n := after[`sluice_store_calls_total{result="error"}`] - before[`sluice_store_calls_total{result="error"}`]; n != 0 {
		t.Errorf("store calls that failed: %v, want 0", n)
	}
	if got[codes.OK] != 2*callers {
		t.Errorf("answers %v, want %d OK", got, 2*callers)
	}
	// After the pause the node is healthy: the next call is decided too.
	if r := s.call(t, "chaos_unset", []string{"load", "after"}); r.GetStatuses()[0].GetLimitRemaining() == 0 {
		t.Errorf("call after the pause: %v, want a decision by Redis", r)
	}
}
