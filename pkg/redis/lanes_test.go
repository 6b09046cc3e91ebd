package redis

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// slowHook makes every script call (FCALL, EVALSHA, alone or pipelined)
// answer delay late: a Redis that answers in delay.
type slowHook struct{ delay time.Duration }

func (h slowHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h slowHook) wait(ctx context.Context) error {
	t := time.NewTimer(h.delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h slowHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if isScriptCall(cmd) {
			if err := h.wait(ctx); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func (h slowHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if err := h.wait(ctx); err != nil {
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

func isScriptCall(cmd goredis.Cmder) bool {
	switch strings.ToLower(cmd.Name()) {
	case "fcall", "evalsha", "eval":
		return true
	}
	return false
}

// newHookedStore returns a Store with the production defaults (no
// CallTimeout, CallsInFlight or MaxCallsInFlight set) on a client to the
// shared Redis that runs hook, warmed so that no decision loads the script,
// and that has answered a decision (a node that never answered opens no
// call for a slow one).
func newHookedStore(t *testing.T, hook goredis.Hook) *Store {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Addr(t), MaxRetries: -1, ContextTimeoutEnabled: true})
	c.AddHook(hook)
	s := New(c, Options{Prefix: redistest.Prefix(t.Name())})
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(context.Background(), []limiter.Hit{perMinute("warm", 10)}); err != nil {
		t.Fatal(err)
	}
	return s
}

// wantRemaining fails t unless Apply of hits under ctx admitted every hit
// with remaining left.
func wantRemaining(t *testing.T, s *Store, ctx context.Context, what string, hits []limiter.Hit, remaining uint64) {
	t.Helper()
	rs, err := s.Apply(ctx, hits)
	if err != nil {
		t.Errorf("%s: %v, want decided", what, err)
		return
	}
	for i, r := range rs {
		if !r.Allowed || r.Remaining != remaining {
			t.Errorf("%s: hit %d allowed %v remaining %d, want allowed with %d", what, i, r.Allowed, r.Remaining, remaining)
			return
		}
	}
}

// TestCallerDeadlineIsTheBudget: on a Redis that answers in 50 ms, a
// decision whose caller allows 200 ms is decided (its budget is the
// caller's deadline, not a fixed 15 ms), and so is one
// whose caller sets no deadline (the default CallTimeout, 1 s, is long
// enough to decide).
func TestCallerDeadlineIsTheBudget(t *testing.T) {
	t.Parallel()
	s := newHookedStore(t, slowHook{delay: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	wantRemaining(t, s, ctx, "200 ms deadline, Redis answering in 50 ms", []limiter.Hit{perMinute("deadline", 10)}, 9)
	wantRemaining(t, s, context.Background(), "no deadline, Redis answering in 50 ms", []limiter.Hit{perMinute("none", 10)}, 9)
}

// TestBudget: the budget is the caller's deadline, or CallTimeout from
// now when the caller set none.
func TestBudget(t *testing.T) {
	now := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(20*time.Millisecond))
	defer cancel()
	if got := budget(ctx, now, time.Hour).Sub(now); got != 20*time.Millisecond {
		t.Errorf("deadline in 20ms: budget in %v, want 20ms", got)
	}
	if got := budget(context.Background(), now, 3*time.Second).Sub(now); got != 3*time.Second {
		t.Errorf("no deadline: budget in %v, want CallTimeout (3 s)", got)
	}
}

// holdKeyHook holds the script calls that name a key containing key until
// release is closed (or the call's context ends), telling held as each
// starts to wait: one slow call among fast ones.
type holdKeyHook struct {
	key     string
	held    chan struct{}
	release chan struct{}
}

func (h *holdKeyHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *holdKeyHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if isScriptCall(cmd) && h.names(cmd) {
			h.held <- struct{}{}
			select {
			case <-h.release:
			case <-ctx.Done():
				cmd.SetErr(ctx.Err())
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}

func (h *holdKeyHook) names(cmd goredis.Cmder) bool {
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.Contains(s, h.key) {
			return true
		}
	}
	return false
}

func (h *holdKeyHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestSlowCallHoldsNoOtherDecision: with the default one call in flight
// and no caller deadline, a call that Redis does not answer (held) does
// not hold the decisions that arrive behind it: they go in a call of their
// own once it is slow, and are decided while it is still held; it is then
// decided too, once, when let go.
func TestSlowCallHoldsNoOtherDecision(t *testing.T) {
	t.Parallel()
	hook := &holdKeyHook{key: "slow", held: make(chan struct{}, 1), release: make(chan struct{})}
	s := newHookedStore(t, hook)
	ctx := context.Background()
	slow := make(chan error, 1)
	go func() {
		_, err := s.Apply(ctx, []limiter.Hit{perMinute("slow", 10)})
		slow <- err
	}()
	<-hook.held // the slow call is in flight
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			wantRemaining(t, s, ctx, "a decision behind a held call", []limiter.Hit{perMinute("fast"+strconv.Itoa(i), 10)}, 9)
		})
	}
	wg.Wait()
	close(hook.release)
	if err := <-slow; err != nil {
		t.Fatalf("the held decision, let go: %v", err)
	}
	wantRemaining(t, s, ctx, "the held counter after its call", []limiter.Hit{perMinute("slow", 10)}, 8)
}

// TestManyCountersUnderLoad: a request of 256 counters, among 32 callers
// of one counter each, on a Redis that answers every call in 20 ms, with
// no caller deadline: every request is decided, the big one included.
func TestManyCountersUnderLoad(t *testing.T) {
	t.Parallel()
	s := newHookedStore(t, slowHook{delay: 20 * time.Millisecond})
	ctx := context.Background()
	big := make([]limiter.Hit, 256)
	for i := range big {
		big[i] = perMinute("big"+strconv.Itoa(i), 1000)
	}
	var wg sync.WaitGroup
	for c := range 32 {
		wg.Go(func() {
			for r := range 4 {
				wantRemaining(t, s, ctx, "one counter", []limiter.Hit{perMinute("c"+strconv.Itoa(c), 1000)}, uint64(999-r))
			}
		})
	}
	wg.Go(func() { wantRemaining(t, s, ctx, "256 counters", big, 999) })
	wg.Wait()
}
