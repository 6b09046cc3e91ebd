package redis

import (
	"context"
	"time"
)

// The margin a decision keeps of its caller's deadline to answer: the
// store's calls end that long before it, so that a decision Redis could not
// make in time is still answered, by the failure mode, before the caller
// gives up. It is a tenth of the time left, at least AnswerMargin and at
// most maxAnswerMargin; a caller that leaves less than minMargined gets no
// margin (the failure mode could not answer in time anyway: at the
// deadline the call ends DEADLINE_EXCEEDED, as the caller's).
const (
	AnswerMargin    = 2 * time.Millisecond
	maxAnswerMargin = 5 * time.Millisecond
	minMargined     = 5 * time.Millisecond
)

// budget is the time a decision's Redis calls must end by: its caller's
// deadline (ctx's) less the margin to answer, or, when the caller set
// none, timeout (Options.CallTimeout) from now.
func budget(ctx context.Context, now time.Time, timeout time.Duration) time.Time {
	cd, ok := ctx.Deadline()
	if !ok {
		return now.Add(timeout)
	}
	left := cd.Sub(now)
	if left < minMargined {
		return cd
	}
	return cd.Add(-min(max(left/10, AnswerMargin), maxAnswerMargin))
}
