package redis

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// DefaultLeaseRate is the lease rate a server passes as Options.LeaseRate
// unless told otherwise (--redis-lease-rate's default): a counter that took
// at least this many decisions on one Store in the last whole second is
// hot, and the Store leases permits for it. Options.LeaseRate 0 turns leases
// off, as --redis-lease-rate 0 does.
const DefaultLeaseRate = 200

// DefaultLeaseSpan is Options.LeaseSpan when it is zero.
const DefaultLeaseSpan = 50 * time.Millisecond

// heatSlots is how many decision counters the hot-key detector keeps; keys
// that share a slot add up (a key can look hotter than it is, never
// colder).
const heatSlots = 4096

// leases is the hot-key tier of a Store (the seeds' local + global tier): for
// a counter that is hot on this instance, the script grants a block of
// permits from the shared budget at once (lua/run/run.lua's leases: counted in
// Redis at once, in the current window or sub-window), and the Store spends
// them in memory until they run out or that (sub-)window ends, so the fleet
// total never exceeds the limit. What it costs is fairness: permits this
// instance holds and does not spend are lost to the others until they are
// given back, at the first whole second after a whole second in which none
// was spent (idleAfter) or after their (sub-)window ended, whatever comes
// first, or at Close (at most about span's worth of this instance's
// traffic on the key per lease, and never more than half of what
// remained). Permits given back before their window ends still count in
// it only until the undo lands, so a window of an hour holds them for
// about a second, as a sub-window of a second does. Heat is
// counted in heatSlots hashed slots, so a quiet key that shares a slot with
// a hot one is leased as if it were as hot.
//
// Only a request of one hit is served from a lease or asks for one, and
// only when the hit can be leased (leasable). It is safe for concurrent
// use.
type leases struct {
	rate  uint32        // decisions in the last second from which a key is hot
	span  time.Duration // a lease asks for span's worth of the key's last second
	clock func() time.Time
	seed  maphash.Seed

	sec  atomic.Int64 // the Unix second heat counts
	heat [heatSlots]atomic.Uint32
	last [heatSlots]atomic.Uint32 // heat of the second before

	mu sync.Mutex
	m  map[string]*lease
	n  atomic.Int32 // len(m)

	// back gives back the unspent permits of expired leases, in the
	// background (giveBackLater; tests replace it).
	back func([]*entry)

	run    func(ctx context.Context, es []*entry) []error // leaseOptions.run
	log    *zap.Logger
	giving sync.WaitGroup // permits given back in the background, and the sweep
	stop   chan struct{}  // ends sweep
}

// lease is one counter's permits on this instance.
type lease struct {
	mu      sync.Mutex
	limit   limiter.Limit
	spec    keySpec
	asking  bool          // a request is asking the script for permits
	asked   limiter.Limit // the limit it asks under
	permits uint64        // unspent
	until   time.Time     // the end of the (sub-)window that counted them, on clock
	used    time.Time     // when a permit was last spent or granted, on clock
	token   float64       // the (sub-)window's index: the undo token's u1
	rem     uint64        // Remaining for the next hit spent here
	reset   time.Time     // when the counter is back to its capacity, on clock
}

// hitDecider is the layer leases decorate: it decides hits on their
// counters keys in Redis, with ask permits more for a lease on a single
// hit, and returns their Results and the entry of the first slot (its reply
// holds the lease's grant).
type hitDecider interface {
	applyHits(ctx context.Context, hits []limiter.Hit, keys []string, ask uint64) ([]limiter.Result, *entry, error)
}

// leaseOptions configures newLeases.
type leaseOptions struct {
	rate  float64       // Options.LeaseRate
	span  time.Duration // Options.LeaseSpan
	clock func() time.Time
	// run sends undo entries at once, bypassing the nodes' queues (the
	// decider's runDirect), to give permits back.
	run func(ctx context.Context, es []*entry) []error
	log *zap.Logger
}

// newLeases returns the lease tier, nil when o.rate is 0 or less (off).
// Its sweep runs until close.
func newLeases(o leaseOptions) *leases {
	rate, span := o.rate, o.span
	if span <= 0 {
		span = DefaultLeaseSpan
	}
	if rate <= 0 {
		return nil
	}
	ls := &leases{rate: uint32(max(rate, 1)), span: span, clock: o.clock, seed: maphash.MakeSeed(),
		m: make(map[string]*lease), run: o.run, log: o.log, stop: make(chan struct{})}
	ls.back = ls.giveBackLater
	ls.giving.Go(func() { ls.sweep(ls.stop) })
	return ls
}

// leasable reports whether h can be served from a lease: an enforced
// increment (not shadow, refund, quota, overdraw, count-denied or a pool's
// class, whose meanings need Redis: a denied hit that counts must reach the
// counter, and a class's ceiling is of the pool's count at the decision,
// which other classes move) of an algorithm that leases
// (limiter.Traits.Lease: the fixed and sliding windows; not on a calendar,
// whose periods the lease's window cannot name), whose hits fit the limit.
// A hit of a cached limit (limiter.Limit.Cache) is not leased: it reaches
// the store only near its limit, where the limiter cache wants the store's
// exact answer.
func leasable(h limiter.Hit) bool {
	return !h.Refund && !h.Shadow && !h.Quota && !h.Limit.Overdraw && !h.Limit.CountDenied && !h.Limit.Cache && h.Limit.Ceiling == 0 &&
		h.Hits > 0 && h.Hits <= h.Limit.Requests && h.Limit.Algorithm.Traits().Lease && h.Limit.Calendar.Unit == limiter.CalendarNone &&
		!h.Limit.Penalty.On() // a block is kept in Redis, which a leased hit does not ask
}

// take counts a decision on key and, when key holds permits for h's hits,
// spends them and returns the Result. Otherwise it returns how many permits
// the request should ask the script for (0: none; then the caller must call
// granted or abandon with the lease it got, if not nil).
func (ls *leases) take(key string, h limiter.Hit) (r limiter.Result, spent bool, ask uint64, l *lease) {
	now := ls.clock()
	hot := ls.count(key, now)
	if hot == 0 && ls.n.Load() == 0 {
		return r, false, 0, nil
	}
	var back *entry
	defer func() {
		if back != nil && ls.back != nil {
			ls.back([]*entry{back})
		}
	}()
	// l is locked before ls.mu is released: roll, which drops leases under
	// both, must not drop one that this request is about to ask for (its
	// permits would be granted to a lease no longer in the map, and never
	// given back).
	ls.mu.Lock()
	l = ls.m[key]
	if l == nil && hot > 0 {
		l = &lease{limit: h.Limit, spec: specOf(h.Limit)}
		ls.m[key] = l
		ls.n.Add(1)
	}
	if l == nil {
		ls.mu.Unlock()
		return r, false, 0, nil
	}
	l.mu.Lock()
	ls.mu.Unlock()
	defer l.mu.Unlock()
	if l.permits > 0 && (l.limit != h.Limit || !now.Before(l.until)) {
		// Expired, or granted under a limit a reload changed: give them
		// back before a new lease replaces them.
		back = l.undo(key)
	}
	l.limit, l.spec = h.Limit, specOf(h.Limit)
	if l.permits >= h.Hits {
		l.permits -= h.Hits
		l.used = now
		l.rem -= min(l.rem, h.Hits)
		return limiter.Result{Allowed: true, Remaining: l.rem, ResetAfter: max(l.reset.Sub(now), 0).Truncate(time.Millisecond)},
			true, 0, nil
	}
	if l.asking || hot == 0 {
		return r, false, 0, nil
	}
	l.asking, l.asked = true, h.Limit
	return r, false, max(uint64(float64(hot)*ls.span.Seconds()), 1), l
}

// sweep rolls the second every second until stop closes, so that a
// Store that went quiet still gives back its expired permits.
func (ls *leases) sweep(stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			sec := ls.clock().Unix()
			if old := ls.sec.Load(); old != sec && ls.sec.CompareAndSwap(old, sec) {
				ls.roll(sec - old)
			}
		}
	}
}

// held is the unspent permits of every lease.
func (ls *leases) held() uint64 {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var n uint64
	for _, l := range ls.m {
		l.mu.Lock()
		n += l.permits
		l.mu.Unlock()
	}
	return n
}

// count counts a decision on key at now and returns the key's decisions in
// the last whole second if that makes it hot, else 0.
func (ls *leases) count(key string, now time.Time) uint32 {
	sec := now.Unix()
	if old := ls.sec.Load(); old != sec && ls.sec.CompareAndSwap(old, sec) {
		ls.roll(sec - old)
	}
	i := maphash.String(ls.seed, key) % heatSlots
	ls.heat[i].Add(1)
	if n := ls.last[i].Load(); n >= ls.rate {
		return n
	}
	return 0
}

// idleAfter is how long a lease's permits may go unspent before roll gives
// them back: the instance stopped using them (its traffic on the key moved
// or ended), and on a long window nothing else would return them for as
// long as the window lasts.
const idleAfter = time.Second

// roll starts a new second, gone seconds after the last one: heat becomes
// last (or zero, when more than a second passed), the leases whose permits
// expired or went unspent for idleAfter are dropped, and their unspent
// permits given back (they still count in their window, which is at least
// as long as the (sub-)window in which they could be spent).
func (ls *leases) roll(gone int64) {
	for i := range ls.heat {
		n := ls.heat[i].Swap(0)
		if gone != 1 {
			n = 0
		}
		ls.last[i].Store(n)
	}
	now := ls.clock()
	var back []*entry
	ls.mu.Lock()
	for k, l := range ls.m {
		l.mu.Lock()
		if !l.asking && (!now.Before(l.until) || now.Sub(l.used) >= idleAfter) {
			if l.permits > 0 {
				back = append(back, l.undo(k))
			}
			delete(ls.m, k)
			ls.n.Add(-1)
		}
		l.mu.Unlock()
	}
	ls.mu.Unlock()
	if len(back) > 0 && ls.back != nil {
		ls.back(back)
	}
}

// undo returns the undo entry that gives back l's unspent permits (of key),
// and leaves it none. l.mu is held.
func (l *lease) undo(key string) *entry {
	e := &entry{kind: kindUndo, keys: []string{key}, specs: []keySpec{l.spec}, undo: []float64{l.token, float64(l.permits)}}
	l.permits = 0
	return e
}

// granted records the script's answer to l's ask: permits more in the
// (sub-)window token of e's clock, for hit r's Remaining and ResetAfter
// after the request that asked. sent is the local time the call was made.
func (ls *leases) granted(l *lease, e *entry, r limiter.Result, sent time.Time) {
	var back *entry
	defer func() {
		if back != nil && ls.back != nil {
			ls.back([]*entry{back})
		}
	}()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asking = false
	kr := e.kr[0]
	if kr.leased <= 0 {
		return
	}
	if l.limit != l.asked {
		// A reload changed the limit while the ask was in flight: the
		// permits were granted under the old one; give them back.
		back = &entry{kind: kindUndo, keys: []string{e.keys[0]}, specs: []keySpec{specOf(l.asked)},
			undo: []float64{kr.u1, kr.leased}}
		return
	}
	sub := l.spec.window
	if l.spec.subs > 0 {
		sub /= float64(l.spec.subs) // an algorithm of sub-windows (limiter.Traits.SubWindows)
	}
	// The permits may be spent until the (sub-)window that counted them
	// ends, measured from when the call was sent (Redis's clock read it
	// later: the permits expire early, never late).
	left := time.Duration((kr.u1+1)*sub-e.now) * time.Millisecond
	if l.permits > 0 {
		// Permits too few for the hit that asked (hits_addend > 1) are
		// still here: in the same (sub-)window they join the new ones,
		// else they go back.
		if kr.u1 == l.token {
			l.permits += uint64(kr.leased)
			l.used = ls.clock()
			l.rem, l.reset = r.Remaining, sent.Add(r.ResetAfter)
			return
		}
		back = l.undo(e.keys[0])
	}
	l.permits, l.token, l.until, l.used = uint64(kr.leased), kr.u1, sent.Add(left), ls.clock()
	l.rem, l.reset = r.Remaining, sent.Add(r.ResetAfter)
}

// abandon ends l's ask without permits (the call failed or denied).
func (ls *leases) abandon(l *lease) {
	l.mu.Lock()
	l.asking = false
	l.mu.Unlock()
}

// unspent takes every lease's unspent permits and returns the undo entries
// that give them back.
func (ls *leases) unspent() []*entry {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var es []*entry
	for k, l := range ls.m {
		l.mu.Lock()
		if l.permits > 0 {
			es = append(es, l.undo(k))
		}
		l.mu.Unlock()
	}
	return es
}

// apply decides hits, one leasable hit on the counter keys[0]: from the
// counter's lease when that holds the permits, else by below (in Redis),
// asking for a lease when the counter is hot and no other request is
// asking.
func (ls *leases) apply(ctx context.Context, hits []limiter.Hit, keys []string, below hitDecider) ([]limiter.Result, error) {
	r, spent, ask, l := ls.take(keys[0], hits[0])
	if spent {
		return []limiter.Result{r}, nil
	}
	if l == nil {
		results, _, err := below.applyHits(ctx, hits, keys, 0)
		return results, err
	}
	sent := ls.clock()
	results, e, err := below.applyHits(ctx, hits, keys, ask)
	if err != nil || !results[0].Allowed {
		ls.abandon(l)
		return results, err
	}
	ls.granted(l, e, results[0], sent)
	return results, nil
}

// giveBackLater gives back es, unspent permits, in the background, within
// closeRefundTimeout. One that fails leaves its permits counted until their
// window passes: fewer admitted, never more.
func (ls *leases) giveBackLater(es []*entry) {
	ls.giving.Go(func() { ls.sendBack(es, closeRefundTimeout) })
}

// sendBack sends es, the undo entries of unspent permits, within timeout,
// and logs those that failed (their permits stay counted until their window
// passes).
func (ls *leases) sendBack(es []*entry, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for i, err := range ls.run(ctx, es) {
		if err != nil {
			ls.log.Warn("unspent leased permits not given back; they count until their window passes",
				zap.String("key", es[i].keys[0]), zap.Float64("permits", es[i].undo[1]), zap.Error(err))
		}
	}
}

// close stops the sweep and returns the unspent permits of every lease
// (Store.Close), waiting at most timeout, after those given back in the
// background. A nil ls (leases off) does nothing.
func (ls *leases) close(timeout time.Duration) {
	if ls == nil {
		return
	}
	close(ls.stop)
	ls.giving.Wait()
	if es := ls.unspent(); len(es) > 0 {
		ls.sendBack(es, timeout)
	}
}
