package redis

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// holdHook holds every FCALL, once on, until a token or its context's end:
// a Redis that answers slowly, call by call, under the test's control.
type holdHook struct {
	on     atomic.Bool
	tokens chan struct{}
}

func (h *holdHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *holdHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if h.on.Load() && strings.EqualFold(cmd.Name(), "fcall") {
			select {
			case <-h.tokens:
			case <-ctx.Done():
				cmd.SetErr(ctx.Err())
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}

func (h *holdHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestDeadlineHeldInABatch: a decision answers at its own deadline even
// when its call, shared with a later decision, runs under that decision's
// later deadline. With one call in flight, A's call is held; B (at 10 ms)
// and C (at 700 ms) queue behind it; A's call is let go at 800 ms, and B
// and C share the next call, which is held until C's deadline (1.7 s). B
// must answer at its own (1.01 s), not at C's.
func TestDeadlineHeldInABatch(t *testing.T) {
	t.Parallel()
	hook := &holdHook{tokens: make(chan struct{})}
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Addr(t), MaxRetries: -1, ContextTimeoutEnabled: true})
	c.AddHook(hook)
	t.Cleanup(func() { _ = c.Close() })
	const timeout = time.Second
	s := New(c, Options{Prefix: redistest.Prefix(t.Name()), CallTimeout: timeout, CallsInFlight: 1, MaxCallsInFlight: 1})
	ctx := context.Background()
	if _, err := s.Apply(ctx, []limiter.Hit{perMinute("warm", 10)}); err != nil {
		t.Fatal(err)
	}
	for !s.node.idle() {
		time.Sleep(time.Millisecond)
	}
	hook.on.Store(true)
	type answer struct {
		err  error
		took time.Duration
	}
	decide := func(key string) chan answer {
		ch := make(chan answer, 1)
		go func() {
			start := time.Now()
			_, err := s.Apply(ctx, []limiter.Hit{perMinute(key, 10)})
			ch <- answer{err, time.Since(start)}
		}()
		return ch
	}
	a := decide("a")
	time.Sleep(10 * time.Millisecond)
	b := decide("b")
	time.Sleep(690 * time.Millisecond)
	cc := decide("c")
	time.Sleep(100 * time.Millisecond)
	hook.tokens <- struct{}{} // A's call goes on
	if got := <-a; got.err != nil {
		t.Fatalf("A, its call let go before its deadline: %v", got.err)
	}
	got := <-b
	if !errors.Is(got.err, limiter.ErrStoreUnavailable) {
		t.Errorf("B = %v, want ErrStoreUnavailable (its call held past its deadline)", got.err)
	}
	if got.took < timeout-50*time.Millisecond || got.took > timeout+400*time.Millisecond {
		t.Errorf("B answered after %v, want about its own deadline, %v (C's is 0.7 s later)", got.took, timeout)
	}
	if got := <-cc; !errors.Is(got.err, limiter.ErrStoreUnavailable) {
		t.Errorf("C = %v, want ErrStoreUnavailable (its call held until its deadline)", got.err)
	}
	// The node, stalled since a call timed out, is back once its PING is.
	hook.on.Store(false)
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, err := s.Apply(ctx, []limiter.Hit{perMinute("after", 10)})
		if err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("decisions did not resume within 5 s of the calls let go: %v", err)
		}
	}
}
