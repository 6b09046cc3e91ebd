package redis

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// DefaultCallTimeout is the budget of one Apply whose caller set no
// deadline, when Options.CallTimeout and Settings.CallTimeout are zero:
// long enough to decide on a loaded host (the peer, envoyproxy/ratelimit,
// waits for Redis), short enough that a hung Redis is answered by the
// failure mode within a second. A caller with a deadline (Envoy sends its
// filter timeout, 20 ms by default) gets that deadline instead (which
// pkg/ratelimit shortens by a margin to answer when a failure mode
// answers). A Redis reply also ends at the client's read timeout.
const DefaultCallTimeout = time.Second

// DefaultCallsInFlight is Options.CallsInFlight when it is zero: one call
// at a time per node, every decision that arrives meanwhile in the next.
// Against 2 (bench/before-after.sh, loopback Redis, 2 vCPUs) it made batches
// of about 11 decisions instead of 7 at 64 callers, and at 16 and 64 callers
// cut Redis CPU per decision by about a fifth and raised decisions/s by 5 to
// 35% with a lower p99. A Redis whose round trip is much longer than a
// script call (another zone) may want more.
const DefaultCallsInFlight = 1

// DefaultMaxCallsInFlight is Options.MaxCallsInFlight when it is zero: up
// to 3 calls more than CallsInFlight's 1 while the oldest is slow.
const DefaultMaxCallsInFlight = 4

// Options configures New. The zero value is usable.
type Options struct {
	// Prefix starts every key the Store writes. Default DefaultPrefix
	// ("sluice:"). Braces in it are percent-escaped, since they would move
	// the Cluster hash tag.
	Prefix string
	// CallTimeout bounds each Apply, all its Redis round trips included,
	// when its context has no deadline; the context's deadline bounds it
	// otherwise, whether longer or shorter. Default
	// DefaultCallTimeout (1 s).
	CallTimeout time.Duration
	// CallsInFlight is the most script calls the Store keeps in flight to
	// one Redis node; decisions that arrive meanwhile wait and share the
	// next call (see Store). Default DefaultCallsInFlight; it is at most the
	// node's connection pool size.
	CallsInFlight int
	// MaxCallsInFlight is the most script calls the Store keeps in flight
	// to one Redis node when the oldest in flight is slow (out longer than
	// slowRounds round trip estimates, at least minSlow): decisions that
	// wait behind it then go in a call of their own, so that one slow call
	// does not make every decision behind it wait past its deadline.
	// Default DefaultMaxCallsInFlight; at least CallsInFlight, and less
	// than the node's connection pool size (the rest serve refunds).
	MaxCallsInFlight int
	// Now, when set, is the clock the script uses instead of Redis TIME. For
	// tests only: in production every instance must share Redis's clock.
	Now func() time.Time
	// LeaseRate is the decisions per second (in the last whole second, on
	// this Store) from which a counter is hot: the Store then leases
	// permits for it and spends them in memory (see Store). 0 (or less)
	// turns leases off: the zero Options decide every hit in Redis. A
	// server passes DefaultLeaseRate unless told otherwise.
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
// calls are in flight per Redis node (up to Options.MaxCallsInFlight while
// the oldest is slow), and the decisions that arrive
// meanwhile wait and go together in the next one, one script call per
// Cluster slot deciding each of them, one after another, each all or
// nothing on its own (lua/run/run.lua), the calls to one node in one pipeline.
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
// were answered by the failure mode (at most MaxCallsInFlight calls per node).
//
// It is composed of layers, each reached by the one above through a few
// methods: the lease tier (leases, lease.go: a decorator on the single-hit
// path), the decider (cluster.go: slot groups, settling and refunds), the
// nodes (node.go, nodes.go: coalesced calls, stall detection, deadline
// shedding) and the wire protocol (protocol.go), around one script (lua/).
type Store struct {
	c      Client
	prefix string
	now    func() time.Time // Options.Now
	d      *decider
	leases *leases // nil when off
}

var (
	_ limiter.Store       = (*Store)(nil)
	_ limiter.Partitioner = (*Store)(nil)
)

// New returns a Store deciding on c, which it owns from then on: Close closes
// it. When c is a *goredis.ClusterClient, hits are grouped by slot. For the
// CallTimeout to bound network reads, c should be built with
// ContextTimeoutEnabled and, for a script call never to be sent twice,
// MaxRetries -1 (Open does both).
func New(c Client, o Options) *Store {
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.CallsInFlight <= 0 {
		o.CallsInFlight = DefaultCallsInFlight
	}
	if o.MaxCallsInFlight <= 0 {
		o.MaxCallsInFlight = DefaultMaxCallsInFlight
	}
	d := newDecider(c, deciderOptions{timeout: o.CallTimeout, now: o.Now, flying: o.CallsInFlight,
		most: o.MaxCallsInFlight, log: log})
	clock := time.Now
	if o.Now != nil {
		clock = o.Now
	}
	return &Store{c: c, prefix: cleanPrefix(o.Prefix), now: o.Now, d: d,
		leases: newLeases(leaseOptions{rate: o.LeaseRate, span: o.LeaseSpan, clock: clock, run: d.runDirect, log: log})}
}

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
	if err := s.d.warm(ctx); err != nil {
		return fmt.Errorf("%w: load limiter script: %w", limiter.ErrStoreUnavailable, err)
	}
	return nil
}

// Backlog is what a Store has left to do in the background, for a gauge
// and for a test that waits for that work to be done.
type Backlog struct {
	// Refunds is the refunds of denied Cluster requests queued or in
	// flight: each is retried until Redis answers it (RefundHorizon).
	Refunds int
	// LeasedPermits is the permits the Store's leases hold unspent (0 with
	// leases off): they count in Redis already, and go back about a second
	// after the Store last spent one, when their (sub-)window ends, or at
	// Close.
	LeasedPermits uint64
}

// Backlog returns what the Store has left to do in the background now. It
// is safe for concurrent use.
func (s *Store) Backlog() Backlog {
	b := Backlog{Refunds: s.d.pendingRefunds()}
	if s.leases != nil {
		b.LeasedPermits = s.leases.held()
	}
	return b
}

// Close gives back the unspent permits of its leases and sends the refunds
// still pending (waiting at most a second each; refunds it could not send are
// logged), then closes the client. Apply must not be
// called after Close.
func (s *Store) Close() error {
	s.leases.close(closeRefundTimeout)
	return s.d.close(closeRefundTimeout)
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
// never applied twice (see lua/run/general.lua's undoEntry). Between a slot's consumption
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
// or the budget (ctx's deadline, else CallTimeout) passes, or when the call
// is shed (see Store), and a plain error naming the hit when a hit does not
// Validate.
// After an error no Result is returned.
func (s *Store) Apply(ctx context.Context, hits []limiter.Hit) ([]limiter.Result, error) {
	if len(hits) == 0 {
		return []limiter.Result{}, nil
	}
	for i, h := range hits {
		if err := h.Validate(); err != nil {
			return nil, fmt.Errorf("redis: hit %d: %w", i, err)
		}
	}
	keys := s.keysOf(hits)
	if s.leases != nil && len(hits) == 1 && leasable(hits[0]) {
		return s.leases.apply(ctx, hits, keys, s.d)
	}
	results, _, err := s.d.applyHits(ctx, hits, keys, 0)
	return results, err
}

// split builds one group per slot (one group in all on a standalone Redis),
// each with its apply entry, in ascending slot order. quotaSplit reports
// that the enforced quota hits are in more than one group; their flags then
// say shadow instead of quota (see Apply).
func (s *Store) split(hits []limiter.Hit) (groups []*group, quotaSplit bool) {
	return s.d.splitKeys(hits, s.keysOf(hits))
}

// keysOf returns the counter key of each hit.
func (s *Store) keysOf(hits []limiter.Hit) []string {
	keys := make([]string, len(hits))
	for i, h := range hits {
		keys[i] = counterKey(s.prefix, h)
	}
	return keys
}

// Partition groups the indexes of hits by the Cluster slot of their
// counters, in ascending order of first appearance: one group on a
// standalone or Sentinel Redis. Hits of one group applied together are one
// script entry; groups applied at once go to each node in one call
// (limiter.Partitioner, for the limiter cache's syncs).
func (s *Store) Partition(hits []limiter.Hit) [][]int {
	at := map[int]int{}
	var groups [][]int
	for i, h := range hits {
		slot := s.d.slotOf(counterKey(s.prefix, h)) // 0 for every key off a Cluster: one group
		g, ok := at[slot]
		if !ok {
			g = len(groups)
			at[slot] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}
