package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// node is one Redis node the Store sends script calls to: its client, its
// gate (gate.go) and the decisions waiting to share a call. Decisions that
// wait at the same moment are sent together: while flying calls are in
// flight, new ones queue, and when a call returns, everything queued goes in
// the next, one script call per slot, all of them in one pipeline. With no
// call in flight a decision goes at once, alone: batching adds no wait, it
// only takes what the round trip would have made wait anyway. When the
// oldest call in flight is slow, what queues behind it goes in a call of its
// own, up to most calls in flight (lanes.go).
type node struct {
	c      scriptClient
	gate   *gate
	caller *caller
	probes *sync.WaitGroup
	now    func() time.Time // the test clock, or nil
	flying int              // the most calls in flight while none is slow
	most   int              // the most calls in flight when the oldest is slow

	mu     sync.Mutex
	queue  []*pending
	active int         // calls in flight: lanes whose out is not zero
	out    []int64     // per lane (most of them), Unix ns its call was sent; 0 when idle
	timer  *time.Timer // armed while entries queue behind calls in flight (lanes.go)
	armed  bool        // timer is armed
}

// pending is one entry waiting for its call.
type pending struct {
	e        *entry
	slot     int
	deadline time.Time    // its waiter's; zero for none
	state    atomic.Int32 // stateQueued, stateTaken, stateSent, stateLeft, stateDone, stateAbandoned
	done     chan struct{}
	err      error
}

const (
	stateQueued    int32 = iota
	stateTaken           // in a batch whose call is not yet sent (the gate may refuse it)
	stateSent            // its call is sent
	stateLeft            // its caller left before it was sent: it never will be
	stateDone            // its call ended (or was refused) and its caller is told
	stateAbandoned       // its caller left while its call was in flight
)

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

// submit queues e (of slot), whose waiter leaves at dl (zero: no
// deadline), for the node's next call and returns its pending, which wait
// ends.
func (n *node) submit(dl time.Time, e *entry, slot int) *pending {
	p := pendingPool.Get().(*pending)
	p.e, p.slot, p.deadline, p.err = e, slot, dl, nil
	p.state.Store(stateQueued)
	n.mu.Lock()
	n.queue = append(n.queue, p)
	n.dispatch(time.Now())
	n.mu.Unlock()
	return p
}

// wait waits for p's call, until dl (p's deadline, zero for none) or until
// ctx ends: a decision that leaves before its call was sent is never sent;
// one that leaves while its call is in flight answers at once (the call,
// which may still count its hits, ends by the batch's latest deadline, and
// finish then recycles p). Otherwise it recycles p. Either way the caller
// must not read p.e's reply after an error: the call may still write it.
func (p *pending) wait(ctx context.Context, dl time.Time) error {
	var expired <-chan time.Time
	if !dl.IsZero() {
		t := startTimer(time.Until(dl))
		defer stopTimer(t)
		expired = t.C
	}
	var err, cause error
	select {
	case <-p.done:
		err = p.err
	case <-ctx.Done():
		cause = ctx.Err()
	case <-expired:
		cause = context.DeadlineExceeded
	}
	if cause != nil {
		if p.state.CompareAndSwap(stateQueued, stateLeft) || p.state.CompareAndSwap(stateTaken, stateLeft) {
			// Never sent; the take or send that meets it drops and
			// recycles it.
			return fmt.Errorf("%w: waited for a call to redis until the deadline: %w", errShed, cause)
		}
		if p.state.CompareAndSwap(stateSent, stateAbandoned) {
			// In flight: finish recycles it.
			return fmt.Errorf("%w: a call to redis outlasted the deadline: %w", limiter.ErrStoreUnavailable, cause)
		}
		<-p.done // its call ended as the deadline passed
		err = p.err
	}
	p.e = nil
	pendingPool.Put(p)
	return err
}

// timers recycles the timers of wait: a decision's deadline is a pooled
// timer, not a context of its own (a timer, a cancel context registered
// with the gRPC call's and a channel, each decision: about 8% of the
// service's CPU at 64 callers).
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// startTimer returns a stopped pooled timer started for d.
func startTimer(d time.Duration) *time.Timer {
	t := timers.Get().(*time.Timer)
	t.Reset(d)
	return t
}

// stopTimer stops t and recycles it. Since Go 1.23 a stopped timer's
// channel holds no stale value, so the next Reset starts it clean.
func stopTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}

// finish ends p (taken or sent) with err, telling its waiter, or recycles
// p if its waiter left.
func (p *pending) finish(err error) {
	p.err = err
	if !p.state.CompareAndSwap(stateSent, stateDone) && !p.state.CompareAndSwap(stateTaken, stateDone) {
		p.e = nil
		pendingPool.Put(p)
		return
	}
	p.done <- struct{}{}
}

// take removes from the queue the entries of the next call (at most
// maxBatchEntries), marks them taken and returns them; it drops those whose
// caller left. n.mu is held.
func (n *node) take() []*pending {
	var batch []*pending
	i := 0
	for ; i < len(n.queue) && len(batch) < maxBatchEntries; i++ {
		p := n.queue[i]
		if p.state.CompareAndSwap(stateQueued, stateTaken) {
			batch = append(batch, p)
		} else {
			// Its waiter left: nobody else holds it.
			p.e = nil
			pendingPool.Put(p)
		}
	}
	rest := copy(n.queue, n.queue[i:])
	clear(n.queue[rest:])
	n.queue = n.queue[:rest]
	return batch
}

// send makes the calls of batch through the gate, under the latest
// deadline among its entries (each waiter keeps its own), and ends every
// entry.
func (n *node) send(batch []*pending) {
	dl, ok := time.Time{}, true
	for _, p := range batch {
		ok = ok && !p.deadline.IsZero()
		if p.deadline.After(dl) {
			dl = p.deadline
		}
	}
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if ok {
		ctx, cancel = context.WithDeadline(ctx, dl)
	}
	defer cancel()
	start, err := n.gate.enter(ctx)
	if err != nil {
		n.gate.probe(ctx, n.probes)
		if !errors.Is(err, errShed) {
			err = fmt.Errorf("%w: %w", limiter.ErrStoreUnavailable, err)
		}
		for _, p := range batch {
			p.finish(err)
		}
		return
	}
	// The entries whose waiters left meanwhile are not sent.
	sent := batch[:0]
	for _, p := range batch {
		if p.state.CompareAndSwap(stateTaken, stateSent) {
			sent = append(sent, p)
		} else {
			p.e = nil
			pendingPool.Put(p)
		}
	}
	if batch = sent; len(batch) == 0 {
		n.gate.release()
		return
	}
	errs := runEntries(ctx, n.c, n.caller, n.clock(), batch)
	var first error
	for i, p := range batch {
		if first == nil && errs[i] != nil {
			first = errs[i]
		}
		p.finish(errs[i])
	}
	n.gate.leave(start, first)
}

// clock is ARGV[1]: the test clock in Unix ms, or "" for Redis TIME.
func (n *node) clock() string {
	if n.now == nil {
		return ""
	}
	return strconv.FormatInt(n.now().UnixMilli(), 10)
}

// runEntries decides ps on c under ctx: one script call per slot (and per
// maxBatchEntries, maxBatchKeys), all in one pipeline, and returns each
// entry's error, in the order of ps (nil: its reply is in its entry). An
// entry that does not fit the layout, or that the script failed alone,
// fails alone: the others of its call keep their replies. A call that may
// have run is never sent again: only one that the server refused unrun
// (its function or script missing) is, once loaded.
func runEntries(ctx context.Context, c scriptClient, k *caller, now string, ps []*pending) []error {
	errs := make([]error, len(ps))
	order := make([]int, 0, len(ps))
	for i, p := range ps {
		if errs[i] = p.e.check(); errs[i] == nil {
			order = append(order, i)
		}
	}
	calls := batchCalls(ps, order, now)
	if err := sendCalls(ctx, c, k, calls); err != nil {
		for _, i := range order {
			errs[i] = err
		}
		return errs
	}
	for _, cl := range calls {
		err := cl.cmd.Err()
		if err == nil {
			err = decode(cl.cmd.Val(), cl.es)
		}
		if err != nil {
			if _, _, moved := movedTo(err); moved {
				err = fmt.Errorf("%w: %w", errMoved, err)
			} else {
				err = fmt.Errorf("%w: run limiter script (%d entries, %d keys): %w",
					limiter.ErrStoreUnavailable, len(cl.es), len(cl.keys), err)
			}
		}
		for x, i := range cl.order {
			errs[i] = err
			if err == nil && cl.es[x].err != nil {
				errs[i] = fmt.Errorf("%w: limiter script failed this decision alone: %w", limiter.ErrStoreUnavailable, cl.es[x].err)
			}
		}
	}
	return errs
}

// call is one script call of runEntries: entries of one slot.
type call struct {
	order []int // indices into runEntries's ps, in ps's order within the slot
	es    []*entry
	keys  []string
	args  []any
	cmd   *goredis.Cmd
}

// batchCalls groups ps[order] (checked entries) into script calls: by slot,
// in slot order, at most maxBatchEntries entries and maxBatchKeys keys a
// call (an entry with more keys goes alone), each encoded with the clock
// now.
func batchCalls(ps []*pending, order []int, now string) []call {
	slices.SortStableFunc(order, func(a, b int) int { return ps[a].slot - ps[b].slot })
	var calls []call
	for i := 0; i < len(order); {
		j, nk := i, 0
		for j < len(order) && ps[order[j]].slot == ps[order[i]].slot && j-i < maxBatchEntries &&
			(j == i || nk+len(ps[order[j]].e.keys) <= maxBatchKeys) {
			nk += len(ps[order[j]].e.keys)
			j++
		}
		es := make([]*entry, j-i)
		for x := range es {
			es[x] = ps[order[i+x]].e
		}
		keys, specs, prog := encode(es)
		calls = append(calls, call{order: order[i:j], es: es, keys: keys, args: []any{now, specs, prog}})
		i = j
	}
	return calls
}

// sendCalls makes calls on c under ctx, several in one pipeline, and leaves
// each call's result in its cmd; a call the server refused unrun (its
// function or script missing) is sent again once loaded. It returns an
// error, and sends nothing, when the script's mode cannot be decided.
func sendCalls(ctx context.Context, c scriptClient, k *caller, calls []call) error {
	switch len(calls) {
	case 0:
		return nil
	case 1:
		calls[0].cmd = k.run(ctx, c, calls[0].keys, calls[0].args)
		return nil
	}
	if k.mode.Load() == modeUnknown {
		if err := k.load(ctx, c); err != nil {
			return fmt.Errorf("%w: load limiter script: %w", limiter.ErrStoreUnavailable, err)
		}
	}
	pipe := c.Pipeline()
	for i := range calls {
		calls[i].cmd = k.queue(ctx, pipe, calls[i].keys, calls[i].args)
	}
	_, _ = pipe.Exec(ctx) // errors are per call
	for i := range calls {
		if notLoaded(calls[i].cmd.Err()) {
			calls[i].cmd = k.run(ctx, c, calls[i].keys, calls[i].args)
		}
	}
	return nil
}

// errMoved wraps the error of a call that a Cluster node refused because
// it does not serve the slot (MOVED, ASK): the call did not run, and may be
// sent to the right node. It wraps limiter.ErrStoreUnavailable.
var errMoved = fmt.Errorf("%w: slot moved", limiter.ErrStoreUnavailable)

// movedTo reports whether err is a MOVED or ASK reply, and its address.
func movedTo(err error) (addr string, ask, ok bool) {
	if !isReply(err) {
		return "", false, false
	}
	s := err.Error()
	switch {
	case strings.HasPrefix(s, "MOVED "):
	case strings.HasPrefix(s, "ASK "):
		ask = true
	default:
		return "", false, false
	}
	f := strings.Fields(s)
	if len(f) < 3 {
		return "", false, false
	}
	return f[2], ask, true
}
