package ratelimit

import (
	"testing"
	"time"
)

// TestAnswerBy: a decision whose failure mode answers keeps a tenth of its
// caller's time left to answer, at least AnswerMargin and at most
// maxAnswerMargin, and none when less than minMargined is left.
func TestAnswerBy(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct{ left, want time.Duration }{
		{20 * time.Millisecond, 18 * time.Millisecond},
		{5 * time.Millisecond, 3 * time.Millisecond},
		{40 * time.Millisecond, 36 * time.Millisecond},
		{time.Second, time.Second - 100*time.Millisecond},
		{500 * time.Millisecond, 450 * time.Millisecond},
		{5 * time.Second, 5*time.Second - 100*time.Millisecond},
		{4 * time.Millisecond, 4 * time.Millisecond},
		{-time.Millisecond, -time.Millisecond},
	} {
		if got := answerBy(now.Add(tc.left), now).Sub(now); got != tc.want {
			t.Errorf("deadline in %v: store call until %v, want %v", tc.left, got, tc.want)
		}
	}
}
