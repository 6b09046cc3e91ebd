package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/limiter/limitertest"
)

func TestMemorySharesContract(t *testing.T) {
	limitertest.TestShares(t, func(_ *testing.T, now func() time.Time) limitertest.Shares {
		return limiter.NewMemoryShares(now)
	})
}

// TestMemorySharesForget checks that MemoryShares keeps nothing it no longer
// needs: a released holding at once, and an expired one of a limit nobody
// claims again at the next sweep.
func TestMemorySharesForget(t *testing.T) {
	clock := testclock.New(time.Unix(1_800_000_000, 0))
	s := limiter.NewMemoryShares(clock.Now)
	ctx := context.Background()
	claim := func(key, holder string) limiter.Claim {
		return limiter.Claim{Key: key, Window: time.Minute, Holder: holder, Limit: 10, Demand: 1000, Hold: time.Second}
	}
	if _, err := s.Share(ctx, []limiter.Claim{claim("x", "a"), claim("x", "b"), claim("y", "a")}); err != nil {
		t.Fatal(err)
	}
	if got := s.Len(); got != 3 {
		t.Fatalf("Len = %d after 3 claims, want 3", got)
	}
	if err := s.Release(ctx, []limiter.Claim{claim("x", "a"), claim("x", "b")}); err != nil {
		t.Fatal(err)
	}
	if got := s.Len(); got != 1 {
		t.Fatalf("Len = %d after releasing x's 2 holders, want 1", got)
	}
	// y's holding expires after 1 s; the sweep runs on a claim at most once
	// a minute.
	clock.Advance(time.Minute)
	if _, err := s.Share(ctx, []limiter.Claim{claim("z", "a")}); err != nil {
		t.Fatal(err)
	}
	if got := s.Len(); got != 1 {
		t.Fatalf("Len = %d after the sweep, want 1 (z's only)", got)
	}
}
