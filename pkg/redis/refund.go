package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// The refunds of a Cluster request that one slot denied after others had
// consumed. Each is one undo entry of the script (lua/run/general.lua's undoEntry), made
// idempotent by a marker key, so it is retried until Redis answers it: a
// refund is never lost to a deadline and never applied twice.
const (
	// RefundAttemptTimeout bounds one attempt at sending refunds. It is
	// longer than a decision's CallTimeout: nobody waits for a refund, and
	// an attempt that times out may still run, so a short one would only
	// add retries.
	RefundAttemptTimeout = time.Second
	// RefundHorizon is how long a refund is retried after its first attempt
	// failed, with a backoff from refundBackoffMin doubling to
	// refundBackoffMax. Past it, the refund is dropped and logged: its node
	// has answered nothing for that long.
	RefundHorizon = 10 * time.Second
	// RefundMarkerTTL is how long Redis keeps the marker of a refund that
	// ran, so that a retry of it changes nothing. It outlasts RefundHorizon
	// and the last attempt's timeout, with a margin for a script that runs
	// late in a Redis that was paused.
	RefundMarkerTTL = time.Minute
	// MaxPendingRefunds bounds the refunds waiting to be sent or retried;
	// past it a new refund is dropped and logged (a Cluster node down for
	// long under heavy denial traffic).
	MaxPendingRefunds = 1 << 14

	refundBatch      = 256
	refundBackoffMin = 10 * time.Millisecond
	refundBackoffMax = time.Second
	// refundLogInterval spaces the warnings about refunds that failed.
	refundLogInterval = 10 * time.Second
)

// refund is one undo entry (its keys: the counters, then the marker) and
// its retry state.
type refund struct {
	e        *entry
	first    time.Time // when it was queued
	due      time.Time // when to send it next
	attempts int
}

// refunder sends refunds in the background: one goroutine, started on the
// first refund, sends every refund due in one pipelined round trip (a
// Cluster client splits it per node), and retries the ones that failed. It
// is safe for concurrent use. Its goroutine ends in close.
type refunder struct {
	run func(ctx context.Context, es []*entry) []error
	log *zap.Logger
	ids *idSource

	start   sync.Once
	running atomic.Bool     // the goroutine was started
	base    context.Context // the first refund's context, without cancellation; set before running
	mu      sync.Mutex
	queue   []*refund // waiting, not in flight
	busy    int       // in flight
	wake    chan struct{}
	stop    chan struct{}
	stopped chan struct{}

	// retried counts the refund attempts that failed (and were retried)
	// since the start, for tests.
	retried atomic.Int64
	// Counts since the last warning, and when it was.
	failed, dropped atomic.Int64
	lastErr         atomic.Pointer[error]
	lastLog         atomic.Int64 // Unix ns
}

func newRefunder(run func(ctx context.Context, es []*entry) []error, log *zap.Logger) *refunder {
	return &refunder{run: run, log: log, ids: newIDSource(), wake: make(chan struct{}, 1),
		stop: make(chan struct{}), stopped: make(chan struct{})}
}

// add queues the undo entry u for sending now. ctx is the request's; the
// refund outlives it.
func (r *refunder) add(ctx context.Context, u *entry) {
	r.start.Do(func() {
		r.base = context.WithoutCancel(ctx)
		r.running.Store(true)
		go r.loop()
	})
	now := time.Now()
	r.mu.Lock()
	full := len(r.queue)+r.busy >= MaxPendingRefunds
	if !full {
		r.queue = append(r.queue, &refund{e: u, first: now, due: now})
	}
	r.mu.Unlock()
	if full {
		r.dropped.Add(1)
		r.warn(fmt.Errorf("more than %d refunds pending", MaxPendingRefunds))
		return
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// loop sends the due refunds until stop.
func (r *refunder) loop() {
	defer close(r.stopped)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		batch, next := r.take(time.Now())
		if len(batch) > 0 {
			r.send(batch)
			continue
		}
		if next > 0 {
			t.Reset(next)
		}
		select {
		case <-r.wake:
		case <-t.C:
		case <-r.stop:
			return
		}
	}
}

// take removes up to refundBatch refunds due at now from the queue and
// marks them in flight; next is the time until the next one is due (0: none
// is queued).
func (r *refunder) take(now time.Time) (batch []*refund, next time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rest := r.queue[:0]
	for _, u := range r.queue {
		switch {
		case !u.due.After(now) && len(batch) < refundBatch:
			batch = append(batch, u)
		default:
			if d := u.due.Sub(now); next == 0 || d < next {
				next = max(d, time.Millisecond)
			}
			rest = append(rest, u)
		}
	}
	clear(r.queue[len(rest):])
	r.queue = rest
	r.busy += len(batch)
	return batch, next
}

// send sends batch in one pipeline under RefundAttemptTimeout and queues
// again, with a backoff, each refund Redis did not answer.
func (r *refunder) send(batch []*refund) {
	ctx, cancel := context.WithTimeout(r.base, RefundAttemptTimeout)
	defer cancel()
	es := make([]*entry, len(batch))
	for i, u := range batch {
		es[i] = u.e
	}
	errs := r.run(ctx, es)
	now := time.Now()
	var retry []*refund
	for i, u := range batch {
		// The reply is the number of counters changed, or -1 when an earlier
		// attempt of this refund already ran: either way it is done.
		err := errs[i]
		if err == nil {
			continue
		}
		r.failed.Add(1)
		r.retried.Add(1)
		r.lastErr.Store(&err)
		u.attempts++
		if now.Sub(u.first) > RefundHorizon {
			r.dropped.Add(1)
			r.warn(err)
			continue
		}
		u.due = now.Add(min(refundBackoffMin<<min(u.attempts-1, 10), refundBackoffMax))
		retry = append(retry, u)
	}
	r.mu.Lock()
	r.busy -= len(batch)
	r.queue = append(r.queue, retry...)
	r.mu.Unlock()
	if len(retry) > 0 {
		r.warn(nil)
	}
}

// warn logs, at most once per refundLogInterval, how many refund attempts
// failed and how many refunds were dropped since the last line, with the
// last error (err when given).
func (r *refunder) warn(err error) {
	now := time.Now().UnixNano()
	last := r.lastLog.Load()
	if now-last < int64(refundLogInterval) || !r.lastLog.CompareAndSwap(last, now) {
		return
	}
	if p := r.lastErr.Load(); err == nil && p != nil {
		err = *p
	}
	r.log.Warn("refund after a cross-slot denial failed; retrying until answered",
		zap.Int64("failed_attempts", r.failed.Swap(0)), zap.Int64("dropped", r.dropped.Swap(0)), zap.Error(err))
}

// pending returns the number of refunds queued or in flight.
func (r *refunder) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queue) + r.busy
}

// flush waits until no refund is queued or in flight, or ctx ends (then it
// returns ctx's error). Refunds due later (retries) are sent at once.
func (r *refunder) flush(ctx context.Context) error {
	for {
		r.mu.Lock()
		n := len(r.queue) + r.busy
		for _, u := range r.queue {
			u.due = time.Time{}
		}
		r.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case r.wake <- struct{}{}:
		default:
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// close flushes the refunds for at most timeout, then stops the goroutine
// and logs those left unsent. add must not be called after close.
func (r *refunder) close(timeout time.Duration) {
	r.start.Do(func() {}) // no goroutine starts after close
	if !r.running.Load() {
		return
	}
	fctx, cancel := context.WithTimeout(r.base, timeout)
	defer cancel()
	if err := r.flush(fctx); err != nil {
		r.dropped.Add(int64(r.pending()))
		r.lastLog.Store(0)
		r.warn(fmt.Errorf("store closed with refunds unsent: %w", err))
	}
	close(r.stop)
	<-r.stopped
}

// idSource names refunds uniquely: a random prefix per Store (so two
// instances never share a marker) and a counter.
type idSource struct {
	prefix string
	n      atomic.Uint64
}

func newIDSource() *idSource {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return &idSource{prefix: hex.EncodeToString(b[:]) + "."}
}

// next returns a new id.
func (s *idSource) next() string {
	return s.prefix + strconv.FormatUint(s.n.Add(1), 36)
}
