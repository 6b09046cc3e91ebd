package rlqs

import (
	"testing"
	"time"
)

// TestTokenBucket pins the token bucket of a share: share tokens per window,
// holding share x burst / window rounded up, between 1 and share.
func TestTokenBucket(t *testing.T) {
	for _, tc := range []struct {
		share         uint64
		window, burst time.Duration
		max           uint32 // 0: DENY_ALL
	}{
		{100, time.Minute, time.Second, 2},           // 1.67 rounded up
		{60, time.Minute, time.Second, 1},            // exactly 1
		{1, time.Hour, time.Second, 1},               // at least 1
		{20, time.Second, time.Second, 20},           // the whole share in a 1 s window
		{20, time.Second, 5 * time.Second, 20},       // never more than the share
		{24, time.Second, 200 * time.Millisecond, 5}, // 4.8 rounded up
		{0, time.Second, time.Second, 0},
	} {
		st := tokenBucket(tc.share, tc.window, tc.burst)
		tb := st.GetTokenBucket()
		switch {
		case tc.max == 0 && st.GetBlanketRule().String() != "DENY_ALL":
			t.Errorf("share 0: %v, want DENY_ALL", st)
		case tc.max == 0:
		case tb.GetMaxTokens() != tc.max || uint64(tb.GetTokensPerFill().GetValue()) != tc.share || tb.GetFillInterval().AsDuration() != tc.window:
			t.Errorf("tokenBucket(%d, %v, %v) = %v, want max %d, %d per %v", tc.share, tc.window, tc.burst, tb, tc.max, tc.share, tc.window)
		}
		if err := st.ValidateAll(); err != nil {
			t.Errorf("tokenBucket(%d, ...) does not validate: %v", tc.share, err)
		}
	}
}
