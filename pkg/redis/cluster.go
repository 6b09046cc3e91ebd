package redis

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// decider is the Store's layer between a request and the nodes: it groups
// a request's hits by Cluster slot (one group in all on a standalone or
// Sentinel Redis), decides the groups one after another on their nodes,
// settles a request that one slot denied (refunds the slots that admitted,
// idempotently, through the refunder; reads the rest) and fills the
// Results. Its way down is its nodes (forKey) and a node's submit, wait,
// stalled and runNow; the Store and the leases reach it by applyHits,
// splitKeys, runDirect, warm and close. It is safe for concurrent use.
type decider struct {
	c       Client
	ns      *nodes
	timeout time.Duration
	// settleTimeout bounds the round trip that refunds a denied Cluster
	// request whose caller set no deadline, CallTimeout unless a test
	// shortens it (to make refunds miss it and be retried).
	settleTimeout time.Duration
	refunds       *refunder
}

// deciderOptions configures newDecider: the Store's Options with their
// defaults applied.
type deciderOptions struct {
	timeout      time.Duration    // Options.CallTimeout
	now          func() time.Time // Options.Now
	flying, most int              // Options.CallsInFlight, MaxCallsInFlight
	log          *zap.Logger
}

// newDecider returns the decider of a Store on c.
func newDecider(c Client, o deciderOptions) *decider {
	d := &decider{c: c, ns: newNodes(c, o.now, o.flying, o.most), timeout: o.timeout, settleTimeout: o.timeout}
	d.refunds = newRefunder(d.runDirect, o.log)
	return d
}

// warm loads the limiter function library (or the script) on every master.
func (d *decider) warm(ctx context.Context) error { return d.ns.load(ctx, d.c) }

// pendingRefunds is the refunds queued or in flight.
func (d *decider) pendingRefunds() int { return d.refunds.pending() }

// close sends the refunds still pending (waiting at most timeout), closes
// the client and waits for the nodes' probes.
func (d *decider) close(timeout time.Duration) error {
	d.refunds.close(timeout)
	err := d.c.Close()
	d.ns.wait()
	return err
}

// group is the part of one request that one script entry decides: hits
// whose counters share a Cluster slot (on a standalone Redis, all of them).
type group struct {
	slot     int
	hits     []int // indices into the request's hits
	e        *entry
	replied  bool // e holds the reply of an apply or check
	admitted bool
	// penalty says a hit has a limiter.Penalty: its entry takes the
	// script's general path (the full reply), where blocks are decided.
	penalty bool
}

// applyHits decides hits, on the counters keys, in Redis (see Apply) and
// returns their Results and the entry of the first group (its reply holds
// a lease's grant). With ask > 0, hits is one hit that asks for ask permits
// more (lua/run/run.lua's leases).
func (d *decider) applyHits(ctx context.Context, hits []limiter.Hit, keys []string, ask uint64) ([]limiter.Result, *entry, error) {
	dl := budget(ctx, time.Now(), d.timeout)
	groups, quotaSplit := d.splitKeys(hits, keys)
	if ask > 0 {
		groups[0].e.lease, groups[0].e.hits[0].lease = true, float64(ask)
	}
	admitted, err := d.decide(ctx, dl, groups)
	if err != nil {
		return nil, nil, err
	}
	results := make([]limiter.Result, len(hits))
	fillAll(results, groups, admitted)
	if admitted && quotaSplit && !limiter.MarkOverLimit(hits, results) {
		// The quota group, spread over slots that each admitted it, denies:
		// take back what every slot consumed.
		d.settle(ctx, dl, groups, nil, true)
		admitted = false
		fillAll(results, groups, false)
	}
	limiter.MarkOverLimit(hits, results)
	return results, groups[0].e, nil
}

// decide runs the groups' apply entries one after another, in order, until
// dl, and reports whether all of them admitted. When one denies, it settles
// the request (refunds the earlier groups, reads the later ones) under a
// fresh budget; when one fails, it settles it until dl and returns the
// failure, unless a later group denies.
func (d *decider) decide(ctx context.Context, dl time.Time, groups []*group) (bool, error) {
	for j, g := range groups {
		if err := d.apply(ctx, dl, g); err != nil {
			if d.settle(ctx, dl, groups[:j], groups[j+1:], false) {
				return false, nil // a known denial is the answer
			}
			return false, err
		}
		if !g.admitted {
			d.settle(ctx, dl, groups[:j], groups[j+1:], true)
			return false, nil
		}
	}
	return true, nil
}

// apply decides g's apply entry on its node, until dl, and records the
// reply. A call that a Cluster node refused because the slot moved did not
// run: it is sent once more, to the slot's new master.
func (d *decider) apply(ctx context.Context, dl time.Time, g *group) error {
	err := d.run(ctx, dl, g.slot, g.e)
	if errors.Is(err, errMoved) && d.ns.reload(ctx) {
		err = d.run(ctx, dl, g.slot, g.e)
	}
	if err != nil {
		return err
	}
	g.replied, g.admitted = true, g.e.admitted
	return nil
}

// run decides e (of slot) on the node that serves it and waits for it
// until dl.
func (d *decider) run(ctx context.Context, dl time.Time, slot int, e *entry) error {
	n, err := d.ns.forKey(ctx, dl, e.keys[0])
	if err != nil {
		return err
	}
	return n.submit(dl, e, slot).wait(ctx, dl)
}

// settle finishes a Cluster request that will not be admitted: in one
// round trip it refunds what the groups in refund consumed and reads the
// groups in checks without consuming (kind check, for their Results), and
// reports whether one of checks denies. It runs under a fresh budget when
// fresh (a denial: the Results are the answer, and the refunds should land
// before it): the caller's deadline, or, when the caller set none,
// settleTimeout from now; else until dl if time is left (a failure: the
// answer is the failure mode's, now). A refund that is not answered, or that goes to
// a stalled node, is left to the refunder, which retries it until answered;
// a group that is not read keeps no reply, so its Results say nothing (see
// fillAll).
func (d *decider) settle(ctx context.Context, dl time.Time, refund, checks []*group, fresh bool) (denies bool) {
	rctx := ctx
	if fresh {
		rctx, dl = context.WithoutCancel(ctx), budget(ctx, time.Now(), d.settleTimeout)
	}
	over := func() bool { return rctx.Err() != nil || !time.Now().Before(dl) }
	type sent struct {
		p *pending
		g *group // a check's group; nil for a refund
		e *entry
	}
	var all []sent
	for _, g := range refund {
		u, ok := d.undoEntry(g)
		if !ok {
			continue
		}
		n, err := d.ns.forKey(rctx, dl, u.keys[0])
		if err != nil || over() || n.stalled() {
			d.refunds.add(ctx, u)
			continue
		}
		all = append(all, sent{p: n.submit(dl, u, g.slot), e: u})
	}
	for _, g := range checks {
		n, err := d.ns.forKey(rctx, dl, g.e.keys[0])
		if err != nil || over() || n.stalled() {
			continue
		}
		c := *g.e
		c.kind, c.hr, c.kr = kindCheck, nil, nil
		all = append(all, sent{p: n.submit(dl, &c, g.slot), g: g, e: &c})
	}
	for _, x := range all {
		err := x.p.wait(rctx, dl)
		switch {
		case x.g == nil && err != nil:
			// A call that outlasted the deadline may still write x.e's
			// reply: the refunder gets the request alone. The marker makes
			// the two runs one.
			d.refunds.retried.Add(1)
			d.refunds.add(ctx, x.e.request())
		case x.g != nil && err == nil:
			x.g.e.hr, x.g.e.kr, x.g.e.admitted = x.e.hr, x.e.kr, x.e.admitted
			x.g.replied = true
			denies = denies || !x.e.admitted
		}
	}
	return denies
}

// runDirect decides es now, bypassing the nodes' queues and gates (the
// refunder's path): grouped by node, one pipeline per node, in parallel.
// It returns each entry's error.
func (d *decider) runDirect(ctx context.Context, es []*entry) []error {
	errs := make([]error, len(es))
	byNode := map[*node][]int{}
	for i, e := range es {
		n, err := d.ns.forKey(ctx, time.Time{}, e.keys[0])
		if err != nil {
			errs[i] = err
			continue
		}
		byNode[n] = append(byNode[n], i)
	}
	var wg sync.WaitGroup
	for n, idx := range byNode {
		wg.Go(func() {
			mine, slots := make([]*entry, len(idx)), make([]int, len(idx))
			for j, i := range idx {
				mine[j], slots[j] = es[i], d.ns.slotOf(es[i].keys[0])
			}
			for j, err := range n.runNow(ctx, mine, slots) {
				errs[idx[j]] = err
			}
		})
	}
	wg.Wait()
	return errs
}

// slotOf is key's Cluster slot, 0 on a standalone or Sentinel Redis.
func (d *decider) slotOf(key string) int { return d.ns.slotOf(key) }

// splitKeys is split with the hits' counter keys (keysOf) already made.
func (d *decider) splitKeys(hits []limiter.Hit, keys []string) (groups []*group, quotaSplit bool) {
	n := len(hits)
	// first[i]: the first hit on hits[i]'s key; by first hit: inc, the
	// largest non-refund Hits on the key (what it grows by), and kidx, the
	// key's index in its group's entry.
	ints := make([]int, 2*n)
	first, kidx := firstOfKey(keys, ints[:n]), ints[n:]
	inc := make([]uint64, n)
	quotaGroup := -1
	for i, h := range hits {
		if !h.Refund {
			inc[first[i]] = max(inc[first[i]], h.Hits)
		}
		g := d.groupOf(&groups, keys[i], n)
		if first[i] == i {
			kidx[i] = len(g.e.keys)
			g.e.keys = append(g.e.keys, keys[i])
			g.e.specs = append(g.e.specs, specOf(h.Limit))
		}
		g.hits = append(g.hits, i)
		g.penalty = g.penalty || h.Limit.Penalty.On()
		if h.Quota && !h.Shadow && !h.Refund {
			quotaSplit = quotaSplit || quotaGroup >= 0 && quotaGroup != g.slot
			quotaGroup = g.slot
		}
	}
	for _, g := range groups {
		g.e.full = len(groups) > 1 || g.penalty
		g.e.hits = make([]hitArg, len(g.hits))
		for j, i := range g.hits {
			h := hits[i]
			g.e.hits[j] = hitArg{key: kidx[first[i]], requests: float64(h.Limit.Requests), burst: float64(h.Limit.Burst),
				hits: float64(h.Hits), flags: flags(h, inc[first[i]], quotaSplit)}
			if g.e.hits[j].flags&flagCeiling != 0 {
				g.e.hits[j].ceiling = float64(h.Limit.Capacity()) // computed here in integers, so the twins agree exactly
			}
			if g.e.hits[j].flags&flagSlot != 0 {
				g.e.hits[j].token = float64(h.SlotToken)
			}
		}
	}
	slices.SortFunc(groups, func(a, b *group) int { return a.slot - b.slot })
	return groups, quotaSplit
}

// groupOf returns the group of key's slot from *groups, adding it if new.
func (d *decider) groupOf(groups *[]*group, key string, hits int) *group {
	sl := d.ns.slotOf(key)
	for _, g := range *groups {
		if g.slot == sl {
			return g
		}
	}
	g := &group{slot: sl, hits: make([]int, 0, hits),
		e: &entry{kind: kindApply, keys: make([]string, 0, hits), specs: make([]keySpec, 0, hits)}}
	*groups = append(*groups, g)
	return g
}

// flags returns the script's flags for h, whose key grows by inc.
func flags(h limiter.Hit, inc uint64, quotaSplit bool) byte {
	var f byte
	if h.Refund {
		f |= flagRefund
	}
	if h.Shadow || h.Quota && quotaSplit {
		f |= flagShadow
	}
	if !h.Refund && !h.Limit.Overdraw && inc > h.Limit.Capacity() {
		f |= flagExceeds
	}
	if h.Limit.Overdraw {
		f |= flagOverdraw
	}
	if h.Limit.CountDenied {
		f |= flagCountDenied
	}
	if h.SlotToken != 0 && h.Limit.Algorithm.Traits().InFlight {
		f |= flagSlot
	}
	if h.Quota {
		f |= flagQuota
	}
	if c := h.Limit.Ceiling; c != 0 && c < limiter.MaxCeiling {
		f |= flagCeiling
	}
	return f
}

// firstOfKey writes into first (len(keys)) the index of the first key equal
// to each key, and returns it.
func firstOfKey(keys []string, first []int) []int {
	if len(keys) <= 16 {
		for i, k := range keys {
			first[i] = i
			for j := range i {
				if keys[j] == k {
					first[i] = j
					break
				}
			}
		}
		return first
	}
	seen := make(map[string]int, len(keys))
	for i, k := range keys {
		if j, ok := seen[k]; ok {
			first[i] = j
		} else {
			seen[k] = i
			first[i] = i
		}
	}
	return first
}

// undoEntry returns the undo entry that takes back what g's apply
// consumed, under a marker of its own, and false when there is nothing to
// take back (g did not admit, or its tokens say it changed nothing).
func (d *decider) undoEntry(g *group) (*entry, bool) {
	if !g.admitted || !g.replied {
		return nil, false
	}
	e := g.e
	u := &entry{kind: kindUndo, ttl: float64(RefundMarkerTTL.Milliseconds()),
		keys:  append(slices.Clip(e.keys), e.keys[0]+":u:"+d.refunds.ids.next()),
		specs: append(slices.Clip(e.specs), keySpec{alg: markerAlgorithm}), undo: make([]float64, 0, 2*len(e.keys))}
	changed := false
	for k, t := range e.kr {
		changed = changed || t.u2 != 0
		u.undo = append(u.undo, t.u1, t.u2)
		if t.more != nil && u.undoKey == nil {
			u.undoKey = make([]int, k, len(e.kr)+len(t.more)/2)
			for j := range k {
				u.undoKey[j] = j
			}
		}
		if u.undoKey != nil {
			u.undoKey = append(u.undoKey, k)
		}
		for j := 0; j < len(t.more); j += 2 {
			changed = changed || t.more[j+1] != 0
			u.undo = append(u.undo, t.more[j], t.more[j+1])
			u.undoKey = append(u.undoKey, k)
		}
	}
	return u, changed
}

// fillAll fills the Results of every group, as fill does. The Results of a
// group without a reply (a denied Cluster request's slot that could not be
// read) say nothing: Allowed, the rest zero.
func fillAll(results []limiter.Result, groups []*group, admitted bool) {
	for _, g := range groups {
		if !g.replied {
			for _, i := range g.hits {
				results[i] = limiter.Result{Allowed: true}
			}
			continue
		}
		fill(results, g, admitted)
	}
}

// fill writes the Results of g's hits (OverLimit aside), picking the
// counters' state after consumption when the whole request was admitted and
// before it otherwise. A remaining converts from its double as
// limiter.Evaluate converts its float64.
func fill(results []limiter.Result, g *group, admitted bool) {
	for j, i := range g.hits {
		v := g.e.hr[j]
		rem, reset := v.remDenied, v.resetDenied
		if admitted {
			rem, reset = v.remAdmitted, v.resetAdmitted
		}
		results[i] = limiter.Result{
			Allowed:      v.allowed,
			ExceedsLimit: v.exceeds,
			Remaining:    uint64(rem),
			ResetAfter:   time.Duration(reset) * time.Millisecond,
			RetryAfter:   time.Duration(v.retry) * time.Millisecond,
			Blocked:      v.blocked,
		}
	}
}

// request is a copy of e's request without its reply, for a run of its own
// while a call that outlasted its deadline may still write e's reply (the
// request fields are never written once e is submitted).
func (e *entry) request() *entry {
	return &entry{kind: e.kind, full: e.full, lease: e.lease, keys: e.keys, specs: e.specs, hits: e.hits,
		undo: e.undo, undoKey: e.undoKey, ttl: e.ttl}
}
