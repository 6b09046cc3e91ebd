package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// The kinds of a script entry (limiter.lua's header).
const (
	kindApply = 1
	kindCheck = 2
	kindUndo  = 3
	// kindFull asks for the full reply of an apply or check (both pairs
	// and the undo tokens), kindLease says a hit asks for a lease.
	kindFull  = 16
	kindLease = 32

	// markerAlgorithm is the algorithm byte of a marker key.
	markerAlgorithm = 255

	// The flags of a hit.
	flagRefund   = 1
	flagShadow   = 2
	flagExceeds  = 4 // the key's growth is over the Limit's Capacity
	flagQuota    = 8
	flagOverdraw = 16

	specSize     = 10 // '<BdB' per key
	hitSize      = 35 // '<HdddBd' per hit
	tokenSize    = 18 // '<Hdd' per undo token
	hitReplySize = 41 // '<Bddddd' per hit
	keyReplySize = 24 // '<ddd' per key

	// maxBatchKeys bounds the keys of one script call (its key indexes are
	// 16 bits) and maxBatchEntries its entries.
	maxBatchKeys    = 1 << 15
	maxBatchEntries = 256

	// maxEntryCount bounds an entry's hits, keys and undo tokens: its
	// count and its key indexes are 16 bits. An entry over it is refused
	// alone (check), before any call.
	maxEntryCount = math.MaxUint16
)

// entry is what one script call decides for one request in one slot: an
// apply or check of its hits, or an undo. Several entries of one slot share
// a call (a batch).
type entry struct {
	kind  byte
	full  bool      // an apply or check that needs the full reply (a request over several slots)
	lease bool      // a hit asks for a lease
	keys  []string  // its counters in the order of their first hit; an undo's marker last
	specs []keySpec // per key
	hits  []hitArg  // apply and check
	undo  []float64 // undo: u1, u2 per counter key
	ttl   float64   // undo: the marker's TTL in ms; 0 without a marker

	// The reply.
	now      float64 // the script's clock, Unix ms
	admitted bool
	hr       []hitReply
	kr       []keyReply
	changed  float64 // undo: counters changed, -1 if it already ran
	failed   string  // the script's error for this entry alone, "" for none
}

// check returns an error when e does not fit the script's layout (its
// counts and key indexes are 16 bits): such an entry is never sent, and
// only its own decision fails.
func (e *entry) check() error {
	if len(e.keys) > maxEntryCount || len(e.hits) > maxEntryCount || len(e.undo)/2 > maxEntryCount {
		return fmt.Errorf("%w: a decision of %d hits on %d counters is more than one limiter script entry holds (%d)",
			limiter.ErrStoreUnavailable, len(e.hits), len(e.keys), maxEntryCount)
	}
	return nil
}

// request is a copy of e's request without its reply, for a run of its own
// while a call that outlasted its deadline may still write e's reply (the
// request fields are never written once e is submitted).
func (e *entry) request() *entry {
	return &entry{kind: e.kind, full: e.full, lease: e.lease, keys: e.keys, specs: e.specs, hits: e.hits,
		undo: e.undo, ttl: e.ttl}
}

// keySpec is a counter's identity beside its key: what the script needs to
// read it.
type keySpec struct {
	alg    byte
	window float64 // ms
	subs   byte
}

// hitArg is one hit of an entry. The numbers are the doubles the script
// computes with (a uint64 converts to the nearest, as tonumber did with the
// decimal text).
type hitArg struct {
	key                   int // into entry.keys
	requests, burst, hits float64
	flags                 byte
	lease                 float64
}

// hitReply is the script's answer for one hit (see limiter.lua).
type hitReply struct {
	allowed, exceeds bool
	retry            float64
	remDenied        float64
	resetDenied      float64
	remAdmitted      float64
	resetAdmitted    float64
}

// keyReply is the script's undo token for one key of an entry, and the
// permits it leased.
type keyReply struct {
	u1, u2, leased float64
}

func specOf(l limiter.Limit) keySpec {
	return keySpec{alg: byte(l.Algorithm), window: float64(l.Window.Milliseconds()), subs: byte(l.SubWindowCount())}
}

// encode appends the KEYS, the key specs (ARGV[2]) and the entries
// (ARGV[3]) of one script call deciding es, which share a slot.
func encode(es []*entry) (keys []string, specs, prog []byte) {
	n, size := 0, 0
	for _, e := range es {
		n += len(e.keys)
		size += 3 + hitSize*len(e.hits) + 10 + tokenSize*len(e.undo)/2
	}
	keys = make([]string, 0, n)
	specs = make([]byte, 0, specSize*n)
	prog = make([]byte, 0, size)
	var index map[string]int
	if n > 16 {
		index = make(map[string]int, n)
	}
	idx := make([]uint16, 0, 8)
	for _, e := range es {
		idx = idx[:0]
		for i, k := range e.keys {
			j := -1
			if index != nil {
				if v, ok := index[k]; ok {
					j = v
				}
			} else {
				j = slices.Index(keys, k)
			}
			if j < 0 {
				j = len(keys)
				keys = append(keys, k)
				specs = appendSpec(specs, e.specs[i])
				if index != nil {
					index[k] = j
				}
			}
			idx = append(idx, uint16(j+1))
		}
		prog = e.appendTo(prog, idx)
	}
	return keys, specs, prog
}

func appendSpec(b []byte, s keySpec) []byte {
	b = append(b, s.alg)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.window))
	return append(b, s.subs)
}

func appendF(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

// appendTo appends e's program, with idx the 1-based KEYS index of each of
// its keys.
func (e *entry) appendTo(b []byte, idx []uint16) []byte {
	if e.kind == kindUndo {
		nk := len(e.undo) / 2
		b = append(b, kindUndo)
		b = binary.LittleEndian.AppendUint16(b, uint16(nk))
		marker := uint16(0)
		if e.ttl > 0 {
			marker = idx[len(idx)-1]
		}
		b = binary.LittleEndian.AppendUint16(b, marker)
		b = appendF(b, e.ttl)
		for k := range nk {
			b = binary.LittleEndian.AppendUint16(b, idx[k])
			b = appendF(b, e.undo[2*k])
			b = appendF(b, e.undo[2*k+1])
		}
		return b
	}
	kind := e.kind
	if e.full {
		kind |= kindFull
	}
	if e.lease {
		kind |= kindLease
	}
	b = append(b, kind)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(e.hits)))
	for _, h := range e.hits {
		b = binary.LittleEndian.AppendUint16(b, idx[h.key])
		b = appendF(b, h.requests)
		b = appendF(b, h.burst)
		b = appendF(b, h.hits)
		b = append(b, h.flags)
		b = appendF(b, h.lease)
	}
	return b
}

// reader reads a reply's little-endian values.
type reader struct {
	s   string
	off int
	err error
}

func (r *reader) f64() float64 {
	if r.off+8 > len(r.s) {
		r.err = errShortReply
		return 0
	}
	s := r.s[r.off : r.off+8]
	r.off += 8
	return math.Float64frombits(uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56)
}

func (r *reader) u8() byte {
	if r.off >= len(r.s) {
		r.err = errShortReply
		return 0
	}
	r.off++
	return r.s[r.off-1]
}

// str reads a '<H' length and that many bytes.
func (r *reader) str() string {
	n := int(r.u8()) | int(r.u8())<<8
	if r.err != nil || r.off+n > len(r.s) {
		r.err = errShortReply
		return ""
	}
	r.off += n
	return r.s[r.off-n : r.off]
}

var errShortReply = errors.New("redis: limiter script reply too short")

// failedEntry is the marker of the reply of an entry that raised an error
// in the script: its first byte (an apply or check), or its count of
// counters changed (an undo).
const (
	failedEntry     = 255
	failedUndoEntry = -2
)

// decode reads the reply of the call that decided es into each entry.
func decode(reply any, es []*entry) error {
	s, ok := reply.(string)
	if !ok {
		return fmt.Errorf("redis: limiter script reply is a %T, want a string", reply)
	}
	r := reader{s: s}
	now := r.f64()
	for _, e := range es {
		e.now, e.failed = now, ""
		if e.kind == kindUndo {
			if e.changed = r.f64(); e.changed == failedUndoEntry {
				e.failed = r.str()
			}
			continue
		}
		b := r.u8()
		if b == failedEntry {
			e.failed = r.str()
			continue
		}
		e.admitted = b == 1
		e.hr = slices.Grow(e.hr[:0], len(e.hits))[:len(e.hits)]
		for i := range e.hits {
			bits := r.u8()
			v := hitReply{allowed: bits&1 != 0, exceeds: bits&2 != 0, retry: r.f64(), remDenied: r.f64(), resetDenied: r.f64()}
			if e.full {
				v.remAdmitted, v.resetAdmitted = r.f64(), r.f64()
			} else {
				// The short reply's pair is the outcome's.
				v.remAdmitted, v.resetAdmitted = v.remDenied, v.resetDenied
			}
			e.hr[i] = v
		}
		if !e.full && !e.lease {
			continue
		}
		nk := len(e.keys)
		e.kr = slices.Grow(e.kr[:0], nk)[:nk]
		for k := range nk {
			if e.full {
				e.kr[k] = keyReply{u1: r.f64(), u2: r.f64(), leased: r.f64()}
			} else {
				e.kr[k] = keyReply{u1: r.f64(), leased: r.f64()}
			}
		}
	}
	if r.err == nil && r.off != len(s) {
		r.err = fmt.Errorf("redis: limiter script reply has %d bytes, read %d", len(s), r.off)
	}
	return r.err
}

// node is one Redis node the Store sends script calls to: its client, its
// gate (gate.go) and the decisions waiting to share a call. Decisions that
// wait at the same moment are sent together: while maxFlying calls are in
// flight, new ones queue, and when a call returns, everything queued goes in
// the next, one script call per slot, all of them in one pipeline. With no
// call in flight a decision goes at once, alone: batching adds no wait, it
// only takes what the round trip would have made wait anyway.
type node struct {
	c      scriptClient
	gate   *gate
	caller *caller
	probes *sync.WaitGroup
	now    func() time.Time // the test clock, or nil
	flying int              // the most calls in flight

	mu     sync.Mutex
	queue  []*pending
	active int // calls in flight
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
	var batch []*pending
	if n.active < n.flying {
		n.active++
		batch = n.take()
	}
	n.mu.Unlock()
	if batch != nil {
		go n.flush(batch)
	}
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

// flush sends batch, then every batch queued meanwhile, until the queue is
// empty.
func (n *node) flush(batch []*pending) {
	for len(batch) > 0 {
		n.send(batch)
		n.mu.Lock()
		batch = n.take()
		if len(batch) == 0 {
			n.active--
		}
		n.mu.Unlock()
	}
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
// entry that does not fit the script's layout, or that the script failed
// alone, fails alone: the others of its call keep their replies. A call
// that may have run is never sent again: only one that the server refused
// unrun (its function or script missing) is, once loaded.
func runEntries(ctx context.Context, c scriptClient, k *caller, now string, ps []*pending) []error {
	type call struct {
		order []int // indices into ps, in ps's order within the slot
		es    []*entry
		keys  []string
		args  []any
		cmd   *goredis.Cmd
	}
	errs := make([]error, len(ps))
	order := make([]int, 0, len(ps))
	for i, p := range ps {
		if errs[i] = p.e.check(); errs[i] == nil {
			order = append(order, i)
		}
	}
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
	switch {
	case len(calls) == 0:
		return errs
	case len(calls) == 1:
		calls[0].cmd = k.run(ctx, c, calls[0].keys, calls[0].args)
	default:
		if k.mode.Load() == modeUnknown {
			if err := k.load(ctx, c); err != nil {
				err = fmt.Errorf("%w: load limiter script: %w", limiter.ErrStoreUnavailable, err)
				for i := range errs {
					errs[i] = err
				}
				return errs
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
			if err == nil && cl.es[x].failed != "" {
				errs[i] = fmt.Errorf("%w: limiter script failed this decision alone: %s",
					limiter.ErrStoreUnavailable, cl.es[x].failed)
			}
		}
	}
	return errs
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
