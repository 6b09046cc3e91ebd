package integration

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestNewInstanceAnswersFromReady: under load from two instances on one
// Redis (about 2,000 decisions/s between them, from 32 callers),
// a third started then answers its first 1,000 decisions after it
// reports ready with no more errors than an instance in steady state: it
// is ready only once its connections are open and the limiter library is
// loaded. (Before, 15-25% of a new instance's first calls failed for 1-2 s
// under load.)
func TestNewInstanceAnswersFromReady(t *testing.T) {
	redisURL := "redis://" + redistest.Start(t).Addr()
	args := []string{"--config", "config", "--redis-url", redisURL}
	old := []*sluice{startSluice(t, args...), startSluice(t, args...)}
	for _, s := range old {
		waitReady(t, s)
	}
	ctx, stop := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	var sent atomic.Int64
	for i, s := range old {
		for w := range 16 {
			bg.Add(1)
			go func() {
				defer bg.Done()
				for n := 0; ctx.Err() == nil; n++ {
					s.Client.ShouldRateLimit(ctx, request("edge", []string{"api_key", fmt.Sprintf("bg-%d-%d-%d", i, w, n%500)}))
					sent.Add(1)
					time.Sleep(12 * time.Millisecond) // about 2,000 decisions/s in all
				}
			}()
		}
	}
	defer func() { stop(); bg.Wait() }()
	// The load under way: a second's worth of it sent.
	if !eventually(10*time.Second, 10*time.Millisecond, func() bool { return sent.Load() >= 2000 }) {
		t.Fatalf("the background load sent %d decisions in 10 s, want 2,000", sent.Load())
	}
	began, before := time.Now(), sent.Load()

	steady := errorShare(old[0], 1000, "steady")
	fresh := startSluice(t, args...)
	waitReady(t, fresh)
	first := errorShare(fresh, 1000, "fresh")
	rate := float64(sent.Load()-before) / time.Since(began).Seconds()
	t.Logf("under %.0f decisions/s from two instances, error share of 1,000 decisions: steady state %.1f%%, a new instance's first after ready %.1f%%",
		rate, 100*steady, 100*first)
	if first > steady+0.01 {
		t.Errorf("a new instance's first 1,000 decisions after ready: %.1f%% errors, want the steady state's %.1f%% (+1 point)\n%s", 100*first, 100*steady, fresh.Log())
	}
}

// waitReady polls /readyz until it answers 200.
func waitReady(t *testing.T, s *sluice) {
	t.Helper()
	if eventually(10*time.Second, time.Millisecond, func() bool {
		r, err := http.Get("http://" + s.HTTPAddr + "/readyz")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 200
	}) {
		return
	}
	t.Fatalf("not ready within 10s:\n%s", s.Log())
}

// errorShare sends n decisions to s from 32 callers at once, as Envoy's
// workers do, and returns the share that failed.
func errorShare(s *sluice, n int, tag string) float64 {
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if _, err := s.Client.ShouldRateLimit(context.Background(), request("edge", []string{"api_key", fmt.Sprintf("%s-%d", tag, i%200)})); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(failed.Load()) / float64(n)
}
