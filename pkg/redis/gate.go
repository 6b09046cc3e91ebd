package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// minRoundTrip is the least time a script call is expected to take, the
// round trip estimate before any reply has been measured: a call with less
// time left before its deadline is not sent.
const minRoundTrip = 100 * time.Microsecond

// stallQuiet is how long a node must have answered nothing for a call that
// times out in flight to mark it stalled: longer than the scheduling delays
// of a loaded host (during which replies wait unread), short beside a pause.
const stallQuiet = 200 * time.Millisecond

// errShed is wrapped by the error of a decision the Store did not send to
// Redis, because it could not be answered in time (see gate). It wraps
// limiter.ErrStoreUnavailable, so the domain's failure mode answers.
var errShed = fmt.Errorf("%w: not sent to redis", limiter.ErrStoreUnavailable)

// gate admits the script calls of one Redis node, so that load is shed
// before Redis, not after. The node already keeps its calls in flight under
// its connection pool (node.most), so go-redis never queues a call for a
// connection and the gate has no queue of its own; what it adds:
//
//   - Deadline shedding: a call whose deadline leaves less than a round trip
//     (the moving average of measured ones, at least minRoundTrip) is
//     answered at once (errShed), never sent: a call sent too late times out
//     in flight, is answered by the failure mode anyway, and may still run in
//     Redis and count. A call with time left but less than the estimate still
//     goes when no other call is in flight, so that the estimate is measured
//     again.
//   - Stall detection: when a call times out in flight and the node has
//     answered nothing since it was sent, nor for stallQuiet, the node is
//     stalled (paused, hung, partitioned): no decision is sent to it, and
//     each is answered at once, until a PING, at most one at a time, is
//     answered. (What runs late after a stall is bounded anyway: a script
//     goes only on a connection made before it, since a new one waits for
//     the handshake reply (HELLO, with go-redis's default RESP3) first; so at
//     most the node's calls in flight, one script each.)
//
// Refunds and the checks of a denied Cluster request bypass the gate: they
// are retried or read nothing (the script's undo and check entries).
type gate struct {
	flying    atomic.Int32 // calls in flight
	rtt       atomic.Int64 // moving average of round trips, ns; 0 before the first reply
	lastReply atomic.Int64 // Unix ns of the last reply from the node
	stalled   atomic.Bool
	probing   atomic.Bool
	ping      func(ctx context.Context) error
}

func newGate(ping func(ctx context.Context) error) *gate {
	return &gate{ping: ping}
}

// roundTrip is the time a call is expected to take: the moving average of
// measured round trips (weight 1/8, as RFC 6298's smoothed round trip), at
// least minRoundTrip.
func (g *gate) roundTrip() time.Duration {
	return max(time.Duration(g.rtt.Load()), minRoundTrip)
}

// measured folds one round trip into the average, which starts at
// minRoundTrip: the first calls may include a dial and a handshake, and
// must not alone set the estimate. Concurrent calls may lose an update to
// each other, which an average shrugs off.
func (g *gate) measured(rt time.Duration) {
	old := max(time.Duration(g.rtt.Load()), minRoundTrip)
	g.rtt.Store(int64(old + (rt-old)/8))
}

// enter admits one call under ctx. It returns when the call may be sent
// (then leave or release must follow), or an error wrapping errShed when
// it must not be: the node is stalled, or ctx's deadline leaves less than
// a round trip while another call is in flight (with none, a call goes with
// any time left: it is what measures the round trip again, so a high
// estimate cannot shed every call for good).
func (g *gate) enter(ctx context.Context) (time.Time, error) {
	if g.stalled.Load() {
		return time.Time{}, fmt.Errorf("%w: the node answered nothing since a call timed out (a PING is under way)", errShed)
	}
	need := g.roundTrip()
	others := g.flying.Add(1) - 1
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left <= 0 || left < need && others > 0 {
			g.flying.Add(-1)
			err := fmt.Errorf("%w: the deadline leaves %v, less than a round trip (%v)",
				errShed, left.Round(time.Microsecond), need.Round(time.Microsecond))
			if left <= 0 {
				err = fmt.Errorf("%w: %w", err, context.DeadlineExceeded)
			}
			return time.Time{}, err
		}
	}
	return time.Now(), nil
}

// release ends an enter that sent nothing (every waiter left meanwhile),
// measuring nothing.
func (g *gate) release() { g.flying.Add(-1) }

// leave ends the enter of a call sent at start that ended with err, and
// learns from it: a reply (err nil or a Redis error reply) updates the
// round trip estimate and clears a stall; a timeout with no reply from the
// node since start, nor for stallQuiet, marks it stalled.
func (g *gate) leave(start time.Time, err error) {
	g.flying.Add(-1)
	now := time.Now()
	if err == nil || isReply(err) {
		g.replied(now)
		g.measured(now.Sub(start))
		return
	}
	if last := g.lastReply.Load(); isTimeout(err) && last < start.UnixNano() && now.UnixNano()-last >= int64(stallQuiet) {
		g.stalled.Store(true)
	}
}

// replied records a reply from the node at now and clears a stall.
func (g *gate) replied(now time.Time) {
	g.lastReply.Store(now.UnixNano())
	g.stalled.Store(false)
}

// probe sends one PING to a stalled node, unless one is under way, in a
// goroutine that wg tracks, under a PingTimeout deadline derived from ctx
// without its cancellation. A reply clears the stall.
func (g *gate) probe(ctx context.Context, wg *sync.WaitGroup) {
	if !g.stalled.Load() || !g.probing.CompareAndSwap(false, true) {
		return
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), PingTimeout)
	wg.Go(func() {
		defer cancel()
		defer g.probing.Store(false)
		if err := g.ping(pctx); err == nil || isReply(err) {
			g.replied(time.Now())
		}
	})
}

// isReply reports whether err is an error reply from Redis (the node
// answered), as opposed to a network error or a timeout.
func isReply(err error) bool {
	var re goredis.Error
	return errors.As(err, &re) && !isTimeout(err)
}

// isTimeout reports whether err is a deadline or a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
