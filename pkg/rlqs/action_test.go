package rlqs

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestCapacity pins a part's token bucket capacity: part x burst / window
// rounded up, from 1 to the part; for a token_bucket limit, the same part of
// its burst.
func TestCapacity(t *testing.T) {
	for _, tc := range []struct {
		part, limit, tbBurst uint64
		window, burst        time.Duration
		want                 uint64
	}{
		{100, 100, 0, time.Minute, time.Second, 2},           // 1.67 rounded up
		{60, 100, 0, time.Minute, time.Second, 1},            // exactly 1
		{1, 1, 0, time.Hour, time.Second, 1},                 // at least 1
		{20, 20, 0, time.Second, time.Second, 20},            // the whole part in a 1 s window
		{20, 20, 0, time.Second, 5 * time.Second, 20},        // never more than the part
		{24, 100, 0, time.Second, 200 * time.Millisecond, 5}, // 4.8 rounded up
		{10, 100, 50, time.Second, time.Second, 5},           // token_bucket: a tenth of burst 50
		{1, 100, 50, time.Second, time.Second, 1},            // 0.5 rounded up
	} {
		g := &group{claim: limiter.Claim{Limit: tc.limit, Window: tc.window}, burst: tc.tbBurst}
		if got := g.capacity(tc.part, tc.burst); got != tc.want {
			t.Errorf("capacity of %d of %d per %v (token bucket burst %d, --rlqs-burst %v) = %d, want %d",
				tc.part, tc.limit, tc.window, tc.tbBurst, tc.burst, got, tc.want)
		}
	}
}

// TestStrategySeveralLimits: a rule with several limits (rate_limits) is one
// token bucket at the slowest part's rate with the smallest capacity; any
// part of 0 denies all.
func TestStrategySeveralLimits(t *testing.T) {
	s := &Service{opts: Options{Burst: time.Second}}
	perSecond := &group{claim: limiter.Claim{Limit: 10, Window: time.Second}, buckets: 1, share: 10}
	perHour := &group{claim: limiter.Claim{Limit: 1000, Window: time.Hour}, buckets: 1, share: 1000}
	b := &bucket{policy: policyShare, groups: []*group{perSecond, perHour}}
	tb := s.strategy(b, time.Time{}).GetTokenBucket()
	if tb.GetTokensPerFill().GetValue() != 1000 || tb.GetFillInterval().AsDuration() != time.Hour || tb.GetMaxTokens() != 1 {
		t.Errorf("10/s and 1000/h: %v, want 1000 per 1h, 1 token (the hour's second)", tb)
	}
	if err := s.strategy(b, time.Time{}).ValidateAll(); err != nil {
		t.Error(err)
	}
	perHour.burst = 1000 // a token_bucket limit with burst 1000: the second's 10 bound
	if tb := s.strategy(b, time.Time{}).GetTokenBucket(); tb.GetMaxTokens() != 10 {
		t.Errorf("10/s and a token bucket of 1000/h: %v, want 10 tokens", tb)
	}
	perSecond.share = 0
	if st := s.strategy(b, time.Time{}); st.GetBlanketRule().String() != "DENY_ALL" {
		t.Errorf("a part of 0: %v, want DENY_ALL", st)
	}
}
