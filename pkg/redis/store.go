package redis

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// DefaultCallTimeout is the deadline of one Apply when Options.CallTimeout
// and Settings.CallTimeout are zero: under Envoy's 20 ms default rate limit
// filter timeout, so that Sluice answers before Envoy gives up.
const DefaultCallTimeout = 15 * time.Millisecond

// Client is the part of a go-redis client the Store uses. *goredis.Client,
// *goredis.ClusterClient and the UniversalClient that Open builds satisfy
// it. A *goredis.ClusterClient makes the Store group hits by Cluster slot
// and send each slot's script calls to its master's own client.
type Client interface {
	goredis.Scripter
	FCall(ctx context.Context, function string, keys []string, args ...any) *goredis.Cmd
	FunctionLoad(ctx context.Context, code string) *goredis.StringCmd
	Pipeline() goredis.Pipeliner
	Ping(ctx context.Context) *goredis.StatusCmd
	Close() error
}

// DefaultCallsInFlight is Options.CallsInFlight when it is zero: one call
// at a time per node, every decision that arrives meanwhile in the next.
// Against 2 (bench/before-after.sh, loopback Redis, 2 vCPUs) it made batches
// of about 11 decisions instead of 7 at 64 callers, and at 16 and 64 callers
// cut Redis CPU per decision by about a fifth and raised decisions/s by 5 to
// 35% with a lower p99. A Redis whose round trip is much longer than a
// script call (another zone) may want more.
const DefaultCallsInFlight = 1

// Options configures New. The zero value is usable.
type Options struct {
	// Prefix starts every key the Store writes. Default DefaultPrefix
	// ("sluice:"). Braces in it are percent-escaped, since they would move
	// the Cluster hash tag.
	Prefix string
	// CallTimeout bounds each Apply, all its Redis round trips included, on
	// top of the caller's context. Default DefaultCallTimeout (15 ms).
	CallTimeout time.Duration
	// CallsInFlight is the most script calls the Store keeps in flight to
	// one Redis node; decisions that arrive meanwhile wait and share the
	// next call (see Store). Default DefaultCallsInFlight; it is at most the
	// node's connection pool size.
	CallsInFlight int
	// Now, when set, is the clock the script uses instead of Redis TIME. For
	// tests only: in production every instance must share Redis's clock.
	Now func() time.Time
	// LeaseRate is the decisions per second (in the last whole second, on
	// this Store) from which a counter is hot: the Store then leases
	// permits for it and spends them in memory (see Store). Default
	// DefaultLeaseRate; negative turns leases off.
	LeaseRate float64
	// LeaseSpan is how much of a hot counter's traffic on this Store one
	// lease asks for: its last second's decisions times LeaseSpan (the
	// script grants at most half of what remains). Default
	// DefaultLeaseSpan (50 ms).
	LeaseSpan time.Duration
	// Logger receives warnings the Store cannot return (refunds after a
	// cross-slot denial that failed, at most one line per 10 s). Default
	// zap.NewNop().
	Logger *zap.Logger
}

// Store is a limiter.Store on Redis: standalone, Sentinel or Cluster. It is
// safe for concurrent use.
//
// Concurrent decisions share script calls: at most Options.CallsInFlight
// calls are in flight per Redis node, and the decisions that arrive
// meanwhile wait and go together in the next one, one script call per
// Cluster slot deciding each of them, one after another, each all or
// nothing on its own (limiter.lua), the calls to one node in one pipeline.
// A decision with no call in flight goes at once. So the script's fixed
// cost and the round trip are paid once per call, not per decision, and a
// counter that several decisions of a call share is read and written once.
// A script call that may have run is never sent again (a retried call
// would count its hits twice); each decision keeps its own deadline, and
// leaves a call that has not been sent when it passes (it is then never
// sent); a slow node holds up only the decisions on it.
//
// A hot counter (Options.LeaseRate) is leased: a request of one enforced
// fixed or sliding window hit asks the script for a block of permits with
// its own decision; the permits are counted in Redis at once and spent here
// without a round trip until they run out or their window (sub-window) ends,
// so the fleet never admits more than the limit. A lease's Result reports
// Remaining as of its grant, less what this Store spent since. Permits not
// spent are lost to the other instances until they are given back: one to
// two seconds after this Store last spent one (whatever the window's
// length) or after their (sub-)window ends, or at Close; a lease whose
// call failed after Redis ran it (a deadline passed) leaves its permits
// counted until their window passes: fewer admitted, never more.
//
// It sheds load before Redis (see gate): a decision that cannot be sent in
// time, or that would go to a node that stopped answering, is not sent:
// Apply returns an error wrapping limiter.ErrStoreUnavailable at once, so
// the failure mode answers. What it cannot undo: a call already sent when
// its node stalls may still run once the node resumes, after its decisions
// were answered by the failure mode (at most CallsInFlight calls per node).
type Store struct {
	c       Client
	cluster *goredis.ClusterClient // nil unless on a Cluster
	prefix  string
	timeout time.Duration
	now     func() time.Time
	log     *zap.Logger
	flying  int
	// settleTimeout bounds the round trip that refunds a denied Cluster
	// request, CallTimeout unless a test shortens it (to make refunds miss
	// it and be retried).
	settleTimeout time.Duration
	caller        caller
	node          *node    // standalone and Sentinel: the one node
	nodes         sync.Map // Cluster: master address -> *node
	probes        sync.WaitGroup
	refunds       *refunder
	leases        *leases        // nil when off
	giving        sync.WaitGroup // permits given back in the background, and the sweep
	stopSweep     chan struct{}  // ends leases.sweep
}

var _ limiter.Store = (*Store)(nil)

// New returns a Store deciding on c, which it owns from then on: Close closes
// it. When c is a *goredis.ClusterClient, hits are grouped by slot. For the
// CallTimeout to bound network reads, c should be built with
// ContextTimeoutEnabled and, for a script call never to be sent twice,
// MaxRetries -1 (Open does both).
func New(c Client, o Options) *Store {
	s := &Store{
		c:       c,
		prefix:  cleanPrefix(o.Prefix),
		timeout: o.CallTimeout,
		now:     o.Now,
		log:     o.Logger,
		flying:  o.CallsInFlight,
	}
	s.cluster, _ = c.(*goredis.ClusterClient)
	if s.timeout <= 0 {
		s.timeout = DefaultCallTimeout
	}
	s.settleTimeout = s.timeout
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if s.flying <= 0 {
		s.flying = DefaultCallsInFlight
	}
	if s.cluster == nil {
		poolSize := 10 * runtime.GOMAXPROCS(0) // go-redis's default
		if sc, ok := c.(*goredis.Client); ok {
			poolSize = sc.Options().PoolSize
		}
		s.node = s.newNode(c, poolSize, func(ctx context.Context) error { return c.Ping(ctx).Err() })
	}
	s.refunds = newRefunder(s.runDirect, s.log)
	clock := time.Now
	if s.now != nil {
		clock = s.now
	}
	s.leases = newLeases(o.LeaseRate, o.LeaseSpan, clock)
	if s.leases != nil {
		s.leases.back = s.giveBackLater
		s.stopSweep = make(chan struct{})
		s.giving.Go(func() { s.leases.sweep(s.stopSweep) })
	}
	return s
}

func (s *Store) newNode(c scriptClient, poolSize int, ping func(ctx context.Context) error) *node {
	return &node{c: c, gate: newGate(poolSize, ping), caller: &s.caller, probes: &s.probes, now: s.now,
		flying: max(min(s.flying, poolSize), 1)}
}

// PingTimeout bounds Ping. It is longer than a decision's CallTimeout so a
// busy but healthy Redis does not make readiness flap.
const PingTimeout = time.Second

// Ping checks that Redis answers, for readiness probes. Its error wraps
// limiter.ErrStoreUnavailable.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	if err := s.c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("%w: ping redis: %w", limiter.ErrStoreUnavailable, err)
	}
	return nil
}

// Warm opens a connection and loads the limiter function library (or, on
// a Redis without functions, the script) on every master, so the first
// decision does not spend its CallTimeout on a dial and a load. It is an
// optimisation: a call loads what is missing itself. Its error wraps
// limiter.ErrStoreUnavailable.
func (s *Store) Warm(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	var err error
	if s.cluster != nil {
		err = s.cluster.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
			return s.caller.load(ctx, n)
		})
	} else {
		err = s.caller.load(ctx, s.c)
	}
	if err != nil {
		return fmt.Errorf("%w: load limiter script: %w", limiter.ErrStoreUnavailable, err)
	}
	return nil
}

// closeRefundTimeout bounds how long Close waits for refunds still pending.
const closeRefundTimeout = time.Second

// Close gives back the unspent permits of its leases and sends the refunds
// still pending (waiting at most a second each; refunds it could not send are
// logged), then closes the client. Apply must not be
// called after Close.
func (s *Store) Close() error {
	s.giveBack(closeRefundTimeout)
	s.refunds.close(closeRefundTimeout)
	err := s.c.Close()
	s.probes.Wait()
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
}

// Apply implements limiter.Store: it evaluates every hit, each by its
// Limit's algorithm, and consumes them only if the request is admitted (see
// limiter.MarkOverLimit, which sets the Results' OverLimit). It returns one
// Result per hit in input order. Apply is safe for concurrent use.
//
// On a standalone or Sentinel Redis, and on a Cluster when every counter of
// the request shares a slot, Apply is one entry of one script call: atomic,
// quota group included (the call may decide other requests too, each on its
// own; see Store).
//
// On a Cluster, counters in different slots cannot be in one script, so the
// slots are decided one after another in ascending slot order, one round
// trip each, stopping at the first slot that denies. Then the remaining
// slots are evaluated without consuming (for their Results), in one round
// trip under ctx, and the slots that admitted are refunded exactly what they
// consumed, in the background: a refund is idempotent (a marker key names
// it), so it is retried until Redis answers it, for up to RefundHorizon, and
// never applied twice (see limiter.lua's undo). Between a slot's consumption
// and its refund other requests see the consumption and may be denied by it;
// deciding the slots in one fixed order keeps that rare, since a slot only
// ever sees requests that every earlier slot admitted.
//
// A denial that is known is the answer: when a slot has denied, a later
// slot that cannot be read (an unreachable node, a passed deadline) does
// not make the request an error, and when a slot fails, a later slot that
// denies (read without consuming, if ctx leaves time) answers it. The
// Results of the hits of a slot that could not be read say nothing: Allowed,
// with Remaining, ResetAfter and RetryAfter zero (they did not decide).
//
// A quota group whose enforced hits are in more than one slot cannot be
// decided by any one script: each slot then counts them as if they could not
// deny (as shadow hits), and once every slot has admitted, Apply decides the
// group from their Allowed; if it denies, every slot is refunded as above
// and the Results describe the counters as they were. A quota group within
// one slot is decided by that slot's script, atomically.
//
// Apply returns an error wrapping limiter.ErrStoreUnavailable when Redis fails
// or the deadline (ctx or CallTimeout) passes, or when the call is shed (see
// Store), and a plain error naming the hit when a Limit does not Validate.
// After an error no Result is returned.
func (s *Store) Apply(ctx context.Context, hits []limiter.Hit) ([]limiter.Result, error) {
	if len(hits) == 0 {
		return []limiter.Result{}, nil
	}
	for i, h := range hits {
		if err := h.Limit.Validate(); err != nil {
			return nil, fmt.Errorf("redis: hit %d: %w", i, err)
		}
	}
	keys := s.keysOf(hits)
	if s.leases != nil && len(hits) == 1 && leasable(hits[0]) {
		return s.applyLeased(ctx, hits, keys)
	}
	results, _, err := s.applyHits(ctx, hits, keys, 0)
	return results, err
}

// applyLeased decides hits, one leasable hit on the counter keys[0]: from
// the counter's lease when that holds the permits, else in Redis, asking
// for a lease when the counter is hot and no other request is asking.
func (s *Store) applyLeased(ctx context.Context, hits []limiter.Hit, keys []string) ([]limiter.Result, error) {
	r, spent, ask, l := s.leases.take(keys[0], hits[0])
	if spent {
		return []limiter.Result{r}, nil
	}
	if l == nil {
		results, _, err := s.applyHits(ctx, hits, keys, 0)
		return results, err
	}
	sent := s.leases.clock()
	results, groups, err := s.applyHits(ctx, hits, keys, ask)
	if err != nil || !results[0].Allowed {
		s.leases.abandon(l)
		return results, err
	}
	s.leases.granted(l, groups[0].e, results[0], sent)
	return results, nil
}

// applyHits decides hits, on the counters keys, in Redis (see Apply) and
// returns their Results and the groups that decided them. With ask > 0,
// hits is one hit that asks for ask permits more (limiter.lua's leases).
func (s *Store) applyHits(ctx context.Context, hits []limiter.Hit, keys []string, ask uint64) ([]limiter.Result, []*group, error) {
	dl := time.Now().Add(s.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	groups, quotaSplit := s.splitKeys(hits, keys)
	if ask > 0 {
		groups[0].e.lease, groups[0].e.hits[0].lease = true, float64(ask)
	}
	admitted, err := s.decide(ctx, dl, groups)
	if err != nil {
		return nil, nil, err
	}
	results := make([]limiter.Result, len(hits))
	fillAll(results, groups, admitted)
	if admitted && quotaSplit && !limiter.MarkOverLimit(hits, results) {
		// The quota group, spread over slots that each admitted it, denies:
		// take back what every slot consumed.
		s.settle(ctx, dl, groups, nil, true)
		admitted = false
		fillAll(results, groups, false)
	}
	limiter.MarkOverLimit(hits, results)
	return results, groups, nil
}

// decide runs the groups' apply entries one after another, in order, until
// dl, and reports whether all of them admitted. When one denies, it settles
// the request (refunds the earlier groups, reads the later ones) under a
// fresh CallTimeout; when one fails, it settles it until dl and returns the
// failure, unless a later group denies.
func (s *Store) decide(ctx context.Context, dl time.Time, groups []*group) (bool, error) {
	for j, g := range groups {
		if err := s.apply(ctx, dl, g); err != nil {
			if s.settle(ctx, dl, groups[:j], groups[j+1:], false) {
				return false, nil // a known denial is the answer
			}
			return false, err
		}
		if !g.admitted {
			s.settle(ctx, dl, groups[:j], groups[j+1:], true)
			return false, nil
		}
	}
	return true, nil
}

// apply decides g's apply entry on its node, until dl, and records the
// reply. A call that a Cluster node refused because the slot moved did not
// run: it is sent once more, to the slot's new master.
func (s *Store) apply(ctx context.Context, dl time.Time, g *group) error {
	err := s.run(ctx, dl, g.slot, g.e)
	if errors.Is(err, errMoved) && s.cluster != nil {
		s.cluster.ReloadState(ctx)
		err = s.run(ctx, dl, g.slot, g.e)
	}
	if err != nil {
		return err
	}
	g.replied, g.admitted = true, g.e.admitted
	return nil
}

// run decides e (of slot) on the node that serves it and waits for it
// until dl.
func (s *Store) run(ctx context.Context, dl time.Time, slot int, e *entry) error {
	n, err := s.nodeFor(ctx, dl, e.keys[0])
	if err != nil {
		return err
	}
	return n.submit(dl, e, slot).wait(ctx, dl)
}

// settle finishes a Cluster request that will not be admitted: in one
// round trip it refunds what the groups in refund consumed and reads the
// groups in checks without consuming (kind check, for their Results), and
// reports whether one of checks denies. It runs under a fresh CallTimeout
// when fresh (a denial: the Results are the answer, and the refunds should
// land before it), else until dl if time is left (a failure: the answer is
// the failure mode's, now). A refund that is not answered, or that goes to
// a stalled node, is left to the refunder, which retries it until answered;
// a group that is not read keeps no reply, so its Results say nothing (see
// fillAll).
func (s *Store) settle(ctx context.Context, dl time.Time, refund, checks []*group, fresh bool) (denies bool) {
	rctx := ctx
	if fresh {
		rctx, dl = context.WithoutCancel(ctx), time.Now().Add(s.settleTimeout)
	}
	over := func() bool { return rctx.Err() != nil || !time.Now().Before(dl) }
	type sent struct {
		p *pending
		g *group // a check's group; nil for a refund
		e *entry
	}
	var all []sent
	for _, g := range refund {
		u, ok := s.undoEntry(g)
		if !ok {
			continue
		}
		n, err := s.nodeFor(rctx, dl, u.keys[0])
		if err != nil || over() || n.gate.stalled.Load() {
			s.refunds.add(ctx, u)
			continue
		}
		all = append(all, sent{p: n.submit(dl, u, g.slot), e: u})
	}
	for _, g := range checks {
		n, err := s.nodeFor(rctx, dl, g.e.keys[0])
		if err != nil || over() || n.gate.stalled.Load() {
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
			s.refunds.retried.Add(1)
			s.refunds.add(ctx, x.e.request())
		case x.g != nil && err == nil:
			x.g.e.hr, x.g.e.kr, x.g.e.admitted = x.e.hr, x.e.kr, x.e.admitted
			x.g.replied = true
			denies = denies || !x.e.admitted
		}
	}
	return denies
}

// nodeFor returns the node that serves key: the one node on a standalone or
// Sentinel Redis, the slot's master on a Cluster (which may ask a node for
// the Cluster's slots, until dl unless it is zero).
func (s *Store) nodeFor(ctx context.Context, dl time.Time, key string) (*node, error) {
	if s.cluster == nil {
		return s.node, nil
	}
	if !dl.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl)
		defer cancel()
	}
	c, err := s.cluster.MasterForKey(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%w: find the master of a slot: %w", limiter.ErrStoreUnavailable, err)
	}
	addr := c.Options().Addr
	if n, ok := s.nodes.Load(addr); ok && n.(*node).c == scriptClient(c) {
		return n.(*node), nil
	}
	n := s.newNode(c, c.Options().PoolSize, func(ctx context.Context) error { return c.Ping(ctx).Err() })
	if old, loaded := s.nodes.LoadOrStore(addr, n); loaded && old.(*node).c == scriptClient(c) {
		return old.(*node), nil
	}
	s.nodes.Store(addr, n) // a new client for the address (the cluster reconnected)
	return n, nil
}

// runDirect decides es now, bypassing the nodes' queues and gates (the
// refunder's path): grouped by node, one pipeline per node, in parallel.
// It returns each entry's error.
func (s *Store) runDirect(ctx context.Context, es []*entry) []error {
	errs := make([]error, len(es))
	byNode := map[*node][]int{}
	for i, e := range es {
		n, err := s.nodeFor(ctx, time.Time{}, e.keys[0])
		if err != nil {
			errs[i] = err
			continue
		}
		byNode[n] = append(byNode[n], i)
	}
	var wg sync.WaitGroup
	for n, idx := range byNode {
		wg.Go(func() {
			ps := make([]*pending, len(idx))
			for j, i := range idx {
				ps[j] = &pending{e: es[i], slot: s.slotOf(es[i].keys[0])}
			}
			for j, err := range runEntries(ctx, n.c, n.caller, n.clock(), ps) {
				errs[idx[j]] = err
			}
		})
	}
	wg.Wait()
	return errs
}

// slotOf is key's Cluster slot, 0 on a standalone Redis.
func (s *Store) slotOf(key string) int {
	if s.cluster == nil {
		return 0
	}
	return slot(key)
}

// split builds one group per slot (one group in all on a standalone Redis),
// each with its apply entry, in ascending slot order. quotaSplit reports
// that the enforced quota hits are in more than one group; their flags then
// say shadow instead of quota (see Apply).
func (s *Store) split(hits []limiter.Hit) (groups []*group, quotaSplit bool) {
	return s.splitKeys(hits, s.keysOf(hits))
}

// keysOf returns the counter key of each hit.
func (s *Store) keysOf(hits []limiter.Hit) []string {
	keys := make([]string, len(hits))
	for i, h := range hits {
		keys[i] = counterKey(s.prefix, h)
	}
	return keys
}

// splitKeys is split with the hits' counter keys (keysOf) already made.
func (s *Store) splitKeys(hits []limiter.Hit, keys []string) (groups []*group, quotaSplit bool) {
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
		g := s.groupOf(&groups, keys[i], n)
		if first[i] == i {
			kidx[i] = len(g.e.keys)
			g.e.keys = append(g.e.keys, keys[i])
			g.e.specs = append(g.e.specs, specOf(h.Limit))
		}
		g.hits = append(g.hits, i)
		if h.Quota && !h.Shadow && !h.Refund {
			quotaSplit = quotaSplit || quotaGroup >= 0 && quotaGroup != g.slot
			quotaGroup = g.slot
		}
	}
	for _, g := range groups {
		g.e.full = len(groups) > 1
		g.e.hits = make([]hitArg, len(g.hits))
		for j, i := range g.hits {
			h := hits[i]
			g.e.hits[j] = hitArg{key: kidx[first[i]], requests: float64(h.Limit.Requests), burst: float64(h.Limit.Burst),
				hits: float64(h.Hits), flags: flags(h, inc[first[i]], quotaSplit)}
		}
	}
	slices.SortFunc(groups, func(a, b *group) int { return a.slot - b.slot })
	return groups, quotaSplit
}

// groupOf returns the group of key's slot from *groups, adding it if new.
func (s *Store) groupOf(groups *[]*group, key string, hits int) *group {
	sl := s.slotOf(key)
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
	if h.Quota {
		f |= flagQuota
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
func (s *Store) undoEntry(g *group) (*entry, bool) {
	if !g.admitted || !g.replied {
		return nil, false
	}
	e := g.e
	u := &entry{kind: kindUndo, ttl: float64(RefundMarkerTTL.Milliseconds()),
		keys:  append(slices.Clip(e.keys), e.keys[0]+":u:"+s.refunds.ids.next()),
		specs: append(slices.Clip(e.specs), keySpec{alg: markerAlgorithm}), undo: make([]float64, 0, 2*len(e.keys))}
	changed := false
	for _, t := range e.kr {
		changed = changed || t.u2 != 0
		u.undo = append(u.undo, t.u1, t.u2)
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
		}
	}
}
