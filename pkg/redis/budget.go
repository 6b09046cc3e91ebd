package redis

import (
	"context"
	"time"
)

// AnswerMargin is what a decision keeps of its caller's deadline to
// answer: the store's calls end that long before it (a fifth of the time
// left when that is less), so that a decision Redis could not make in time
// is still answered, by the failure mode, before the caller gives up.
const AnswerMargin = 2 * time.Millisecond

// budget is the time a decision's Redis calls must end by: its caller's
// deadline (ctx's) less AnswerMargin, or, when the caller set none,
// timeout (Options.CallTimeout) from now.
func budget(ctx context.Context, now time.Time, timeout time.Duration) time.Time {
	cd, ok := ctx.Deadline()
	if !ok {
		return now.Add(timeout)
	}
	return cd.Add(-min(AnswerMargin, max(cd.Sub(now), 0)/5))
}
