package redis

import (
	"context"
	"time"
)

// budget is the time a decision's Redis calls must end by: its caller's
// deadline (ctx's: the gRPC caller's, which the rate-limit service shortens
// by a margin to answer when a failure mode would answer), or, when the
// caller set none, timeout (Options.CallTimeout) from now.
func budget(ctx context.Context, now time.Time, timeout time.Duration) time.Time {
	if cd, ok := ctx.Deadline(); ok {
		return cd
	}
	return now.Add(timeout)
}
