package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sluicehq/sluice/pkg/limiter"
)

//go:embed limiter.lua
var scriptSrc string

// script is every algorithm's decision in one Lua script (limiter.lua, whose
// header documents its KEYS, ARGV and reply); Script.Run sends EVALSHA and
// falls back to EVAL on NOSCRIPT, so a flushed script cache or a restarted
// Redis needs no restart of ours.
var script = goredis.NewScript(scriptSrc)

// The layout of the script's arguments and replies (see limiter.lua).
const (
	// argsHead is the count of ARGV before the per-key ones: mode, now.
	argsHead = 2
	// argsPerKey is the count of ARGV per key in modes "a" and "c":
	// algorithm, window ms, sub-windows (limiter.lua's KEY_ARGS).
	argsPerKey = 3
	// argsPerHit is the count of ARGV per hit: key index, requests, burst,
	// hits, flags (HIT_ARGS).
	argsPerHit = 5
	// argsUndoHead is the count of ARGV before the per-key ones in mode
	// "u": mode, now, the marker's TTL.
	argsUndoHead = 3
	// argsPerUndoKey is the count of ARGV per key in mode "u": algorithm,
	// window ms, sub-windows, and the key's undo token (UNDO_ARGS).
	argsPerUndoKey = 5

	// The flags of a hit.
	flagRefund   = 1
	flagShadow   = 2
	flagExceeds  = 4 // the key's growth is over the Limit's Capacity
	flagQuota    = 8
	flagOverdraw = 16

	// replyAdmitted and replyNow index the head of an "a" or "c" reply, of
	// replyHead values.
	replyAdmitted = 0
	replyNow      = 1
	replyHead     = 2
	// replyHit values per hit follow the head, at these offsets
	// (REPLY_HIT).
	replyAllowed           = 0
	replyExceeds           = 1
	replyRetryAfter        = 2
	replyRemainingDenied   = 3
	replyResetDenied       = 4
	replyRemainingAdmitted = 5
	replyResetAdmitted     = 6
	replyHit               = 7
	// replyKey values per key follow the hits: the key's undo token
	// (REPLY_KEY).
	replyKey = 2
)

// replyLen is the length of an "a" or "c" reply for nh hits on nk keys.
func replyLen(nh, nk int) int { return replyHead + replyHit*nh + replyKey*nk }

// DefaultCallTimeout is the deadline of one Apply when Options.CallTimeout
// and Settings.CallTimeout are zero: under Envoy's 20 ms default rate limit
// filter timeout, so that Sluice answers before Envoy gives up.
const DefaultCallTimeout = 15 * time.Millisecond

// Client is the part of a go-redis client the Store uses. *goredis.Client,
// *goredis.ClusterClient and the UniversalClient that Open builds satisfy
// it. A *goredis.ClusterClient makes the Store group hits by Cluster slot.
type Client interface {
	goredis.Scripter
	Pipeline() goredis.Pipeliner
	Ping(ctx context.Context) *goredis.StatusCmd
	Close() error
}

// Options configures New. The zero value is usable.
type Options struct {
	// Prefix starts every key the Store writes. Default DefaultPrefix
	// ("sluice:"). Braces in it are percent-escaped, since they would move
	// the Cluster hash tag.
	Prefix string
	// CallTimeout bounds each Apply, all its Redis round trips included, on
	// top of the caller's context. Default DefaultCallTimeout (15 ms).
	CallTimeout time.Duration
	// Now, when set, is the clock the script uses instead of Redis TIME. For
	// tests only: in production every instance must share Redis's clock.
	Now func() time.Time
	// Logger receives warnings the Store cannot return (refunds after a
	// cross-slot denial that failed, at most one line per 10 s). Default
	// zap.NewNop().
	Logger *zap.Logger
}

// Store is a limiter.Store on Redis: standalone, Sentinel or Cluster. It is
// safe for concurrent use; it holds no per-request state. It sheds load
// before Redis (see gate): at most the client's pool size of decisions are
// in flight per node, and a decision that cannot be sent in time, or that
// would go to a node that stopped answering, is not sent: Apply returns an
// error wrapping limiter.ErrStoreUnavailable at once, so the failure mode
// answers. What it cannot undo: a script already sent when its node stalls
// may still run once the node resumes, after its caller was answered by
// the failure mode (at most the pool size of them per node).
type Store struct {
	c        Client
	cluster  bool
	prefix   string
	timeout  time.Duration
	now      func() time.Time
	log      *zap.Logger
	poolSize int
	// settleTimeout bounds the round trip that refunds a denied Cluster
	// request, CallTimeout unless a test shortens it (to make refunds miss
	// it and be retried).
	settleTimeout time.Duration
	gate          *gate    // standalone and Sentinel: the one node's
	gates         sync.Map // Cluster: master address -> *gate
	probes        sync.WaitGroup
	refunds       *refunder
}

var _ limiter.Store = (*Store)(nil)

// New returns a Store deciding on c, which it owns from then on: Close closes
// it. When c is a *goredis.ClusterClient, hits are grouped by slot. For the
// CallTimeout to bound network reads, c should be built with
// ContextTimeoutEnabled (Open does so).
func New(c Client, o Options) *Store {
	s := &Store{
		c:       c,
		prefix:  cleanPrefix(o.Prefix),
		timeout: o.CallTimeout,
		now:     o.Now,
		log:     o.Logger,
	}
	_, s.cluster = c.(*goredis.ClusterClient)
	if s.timeout <= 0 {
		s.timeout = DefaultCallTimeout
	}
	s.settleTimeout = s.timeout
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.poolSize = 10 * runtime.GOMAXPROCS(0) // go-redis's default
	if sc, ok := c.(*goredis.Client); ok {
		s.poolSize = sc.Options().PoolSize
	}
	s.gate = newGate(s.poolSize, func(ctx context.Context) error { return c.Ping(ctx).Err() })
	s.refunds = newRefunder(c, s.log)
	return s
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

// Warm opens a connection and loads the script (on every master of a
// Cluster), so the first decision does not spend its CallTimeout on a dial
// and an EVAL. It is an optimisation: Apply loads the script itself on
// NOSCRIPT. Its error wraps limiter.ErrStoreUnavailable.
func (s *Store) Warm(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	if err := script.Load(ctx, s.c).Err(); err != nil {
		return fmt.Errorf("%w: load script: %w", limiter.ErrStoreUnavailable, err)
	}
	return nil
}

// closeRefundTimeout bounds how long Close waits for refunds still pending.
const closeRefundTimeout = time.Second

// Close sends the refunds still pending (waiting at most a second; those it
// could not send are logged), then closes the client. Apply must not be
// called after Close.
func (s *Store) Close() error {
	s.refunds.close(closeRefundTimeout)
	err := s.c.Close()
	s.probes.Wait()
	return err
}

// group is the part of one request that one script call decides: hits whose
// counters share a Cluster slot (on a standalone Redis, all of them).
type group struct {
	slot int
	keys []string
	hits []int // indices into the request's hits
	args []any // the "a" ARGV; args[0] is the mode, args[1] the clock

	reply    []any // the "a" or "c" reply
	admitted bool
}

// Apply implements limiter.Store: it evaluates every hit, each by its
// Limit's algorithm, and consumes them only if the request is admitted (see
// limiter.MarkOverLimit, which sets the Results' OverLimit). It returns one
// Result per hit in input order. Apply is safe for concurrent use.
//
// On a standalone or Sentinel Redis, and on a Cluster when every counter of
// the request shares a slot, Apply is one script call: atomic, one round
// trip, quota group included.
//
// On a Cluster, counters in different slots cannot be in one script, so the
// slots are decided one after another in ascending slot order, one round
// trip each, stopping at the first slot that denies. Then the remaining
// slots are evaluated without consuming (for their Results), in one
// pipelined round trip under ctx, and the slots that admitted are refunded
// exactly what they consumed, in the background: a refund is idempotent (a
// marker key names it), so it is retried until Redis answers it, for up to
// RefundHorizon, and never applied twice (see limiter.lua's mode "u").
// Between a slot's consumption and its refund other requests see the
// consumption and may be denied by it; deciding the slots in one fixed order
// keeps that rare, since a slot only ever sees requests that every earlier
// slot admitted.
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
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	now := ""
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMilli(), 10)
	}

	groups, quotaSplit := s.split(hits, now)
	admitted, err := s.decide(ctx, groups)
	if err != nil {
		return nil, err
	}
	results := make([]limiter.Result, len(hits))
	if err := fillAll(results, groups, admitted); err != nil {
		return nil, err
	}
	if admitted && quotaSplit && !limiter.MarkOverLimit(hits, results) {
		// The quota group, spread over slots that each admitted it, denies:
		// take back what every slot consumed.
		s.settle(ctx, groups, nil, true)
		admitted = false
		if err := fillAll(results, groups, false); err != nil {
			return nil, err
		}
	}
	limiter.MarkOverLimit(hits, results)
	return results, nil
}

// decide runs the groups' "a" calls one after another, in order, and
// reports whether all of them admitted. When one denies, it settles the
// request (refunds the earlier groups, reads the later ones) under a fresh
// CallTimeout; when one fails, it settles it under ctx and returns the
// failure, unless a later group denies.
func (s *Store) decide(ctx context.Context, groups []*group) (bool, error) {
	for j, g := range groups {
		if err := s.apply(ctx, g); err != nil {
			if s.settle(ctx, groups[:j], groups[j+1:], false) {
				return false, nil // a known denial is the answer
			}
			return false, err
		}
		if !g.admitted {
			s.settle(ctx, groups[:j], groups[j+1:], true)
			return false, nil
		}
	}
	return true, nil
}

// apply runs g's "a" call through its node's gate and records the reply.
func (s *Store) apply(ctx context.Context, g *group) error {
	gt := s.gateFor(ctx, g.keys[0])
	start, err := gt.enter(ctx)
	if err != nil {
		gt.probe(ctx, &s.probes)
		if errors.Is(err, errShed) {
			return err
		}
		return fmt.Errorf("%w: %w", limiter.ErrStoreUnavailable, err)
	}
	r, err := script.Run(ctx, s.c, g.keys, g.args...).Slice()
	gt.leave(start, err)
	if err != nil {
		return fmt.Errorf("%w: run limiter script on %d keys: %w", limiter.ErrStoreUnavailable, len(g.keys), err)
	}
	if g.admitted, err = parseAdmitted(r); err != nil {
		return fmt.Errorf("%w: %w", limiter.ErrStoreUnavailable, err)
	}
	g.reply = r
	return nil
}

// settle finishes a Cluster request that will not be admitted: in one
// pipelined round trip it refunds what the groups in refund consumed and
// reads the groups in checks without consuming (mode "c", for their
// Results), and reports whether one of checks denies. It runs under a fresh
// CallTimeout when fresh (a denial: the Results are the answer, and the
// refunds should land before it), else under ctx if time is left (a
// failure: the answer is the failure mode's, now). A refund that is not
// answered, or that goes to a stalled node, is left to the refunder, which
// retries it until answered; a group that is not read keeps no reply, so its
// Results say nothing (see fillAll).
func (s *Store) settle(ctx context.Context, refund, checks []*group, fresh bool) (denies bool) {
	rctx := ctx
	if fresh {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), s.settleTimeout)
		defer cancel()
	}
	live := func(g *group) bool { return rctx.Err() == nil && !s.gateFor(rctx, g.keys[0]).stalled.Load() }
	var calls []call
	for _, g := range refund {
		if u, ok := s.undoCall(g); !ok {
			continue
		} else if live(g) {
			calls = append(calls, u)
		} else {
			s.refunds.add(ctx, u)
		}
	}
	nu := len(calls)
	var read []*group
	for _, g := range checks {
		if live(g) {
			calls = append(calls, call{g.keys, append([]any{"c"}, g.args[1:]...)})
			read = append(read, g)
		}
	}
	cmds := runScripts(rctx, s.c, calls)
	for i, cmd := range cmds[:nu] {
		// The reply is the count of counters changed (-1: already done).
		if _, err := cmd.Int64(); err != nil {
			s.refunds.retried.Add(1)
			s.refunds.add(ctx, calls[i])
		}
	}
	for i, g := range read {
		r, err := cmds[nu+i].Slice()
		if err != nil {
			continue
		}
		if admitted, err := parseAdmitted(r); err == nil {
			g.reply = r
			denies = denies || !admitted
		}
	}
	return denies
}

// gateFor returns the gate of the node that serves key: the one node's on a
// standalone or Sentinel Redis, the slot's master's on a Cluster.
func (s *Store) gateFor(ctx context.Context, key string) *gate {
	cc, ok := s.c.(*goredis.ClusterClient)
	if !ok {
		return s.gate
	}
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return s.gate // the call fails on its own
	}
	addr := node.Options().Addr
	if g, ok := s.gates.Load(addr); ok {
		return g.(*gate)
	}
	g, _ := s.gates.LoadOrStore(addr, newGate(node.Options().PoolSize, func(ctx context.Context) error { return node.Ping(ctx).Err() }))
	return g.(*gate)
}

// split builds one group per slot (one group in all on a standalone Redis),
// each with its distinct keys and its "a" arguments, in ascending slot order.
// quotaSplit reports that the enforced quota hits are in more than one
// group; their flags then say shadow instead of quota (see Apply).
func (s *Store) split(hits []limiter.Hit, now string) (groups []*group, quotaSplit bool) {
	n := len(hits)
	keys := make([]string, n)
	for i, h := range hits {
		keys[i] = counterKey(s.prefix, h)
	}
	// first[i]: the first hit on hits[i]'s key; by first hit: inc, the
	// largest non-refund Hits on the key (what it grows by), and kidx, the
	// key's 1-based index in its group's KEYS.
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
			g.keys = append(g.keys, keys[i])
			kidx[i] = len(g.keys)
		}
		g.hits = append(g.hits, i)
		if h.Quota && !h.Shadow && !h.Refund {
			quotaSplit = quotaSplit || quotaGroup >= 0 && quotaGroup != g.slot
			quotaGroup = g.slot
		}
	}
	for _, g := range groups {
		g.args = make([]any, 0, argsHead+argsPerKey*len(g.keys)+argsPerHit*len(g.hits))
		g.args = append(g.args, "a", now)
		for _, i := range g.hits {
			if first[i] == i {
				l := hits[i].Limit
				g.args = append(g.args, int(l.Algorithm), l.Window.Milliseconds(), l.SubWindowCount())
			}
		}
		for _, i := range g.hits {
			h := hits[i]
			g.args = append(g.args, kidx[first[i]], h.Limit.Requests, h.Limit.Burst, h.Hits, flags(h, inc[first[i]], quotaSplit))
		}
	}
	slices.SortFunc(groups, func(a, b *group) int { return a.slot - b.slot })
	return groups, quotaSplit
}

// groupOf returns the group of key's slot from *groups, adding it if new.
func (s *Store) groupOf(groups *[]*group, key string, hits int) *group {
	sl := 0
	if s.cluster {
		sl = slot(key)
	}
	for _, g := range *groups {
		if g.slot == sl {
			return g
		}
	}
	g := &group{slot: sl, keys: make([]string, 0, hits), hits: make([]int, 0, hits)}
	*groups = append(*groups, g)
	return g
}

// flags returns the script's flags for h, whose key grows by inc.
func flags(h limiter.Hit, inc uint64, quotaSplit bool) int {
	f := 0
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

// undoCall returns the "u" call that takes back what g's "a" call
// consumed, under a marker of its own, and false when there is nothing to
// take back (g did not admit, or its tokens say it changed nothing).
func (s *Store) undoCall(g *group) (call, bool) {
	if !g.admitted || g.reply == nil {
		return call{}, false
	}
	args := undoArgs(g)
	if args == nil {
		return call{}, false
	}
	return call{append(slices.Clip(g.keys), g.keys[0]+":u:"+s.refunds.ids.next()), args}, true
}

// call is one script call: its KEYS and ARGV.
type call struct {
	keys []string
	args []any
}

// runScripts sends calls under ctx, in one pipeline when there are several
// (a ClusterClient splits it per node), and returns each one's Cmd. A
// NOSCRIPT answer is retried with Script.Run (EVAL).
func runScripts(ctx context.Context, c Client, calls []call) []*goredis.Cmd {
	cmds := make([]*goredis.Cmd, len(calls))
	switch len(calls) {
	case 0:
		return cmds
	case 1:
		cmds[0] = script.Run(ctx, c, calls[0].keys, calls[0].args...)
		return cmds
	}
	pipe := c.Pipeline()
	for i, cl := range calls {
		cmds[i] = pipe.EvalSha(ctx, script.Hash(), cl.keys, cl.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are per command
	for i, cl := range calls {
		if goredis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
			cmds[i] = script.Run(ctx, c, cl.keys, cl.args...)
		}
	}
	return cmds
}

// undoArgs returns the "u" ARGV taking back what g's "a" call consumed, or
// nil when it consumed nothing (every token's u2 is 0) or its reply is
// malformed.
func undoArgs(g *group) []any {
	nh, nk := len(g.hits), len(g.keys)
	if len(g.reply) != replyLen(nh, nk) {
		return nil
	}
	tokens := g.reply[replyHead+replyHit*nh:]
	args := make([]any, 0, argsUndoHead+argsPerUndoKey*nk)
	args = append(args, "u", g.args[1], RefundMarkerTTL.Milliseconds())
	changed := false
	for k := range nk {
		u1, ok1 := tokens[replyKey*k].(int64)
		u2, ok2 := tokens[replyKey*k+1].(int64)
		if !ok1 || !ok2 {
			return nil
		}
		changed = changed || u2 != 0
		key := g.args[argsHead+argsPerKey*k:]
		args = append(args, key[0], key[1], key[2], u1, u2)
	}
	if !changed {
		return nil
	}
	return args
}

func parseAdmitted(r []any) (bool, error) {
	if len(r) < replyHead {
		return false, errors.New("redis: limiter script reply too short")
	}
	a, ok := r[replyAdmitted].(int64)
	if !ok {
		return false, errors.New("redis: limiter script reply: admitted is not an integer")
	}
	return a == 1, nil
}

// fillAll fills the Results of every group, as fill does. The Results of a
// group without a reply (a denied Cluster request's slot that could not be
// read) say nothing: Allowed, the rest zero.
func fillAll(results []limiter.Result, groups []*group, admitted bool) error {
	for _, g := range groups {
		if g.reply == nil {
			for _, i := range g.hits {
				results[i] = limiter.Result{Allowed: true}
			}
			continue
		}
		if err := fill(results, g, admitted); err != nil {
			return fmt.Errorf("%w: %w", limiter.ErrStoreUnavailable, err)
		}
	}
	return nil
}

// fill writes the Results of g's hits (OverLimit aside), picking the
// counters' state after consumption when the whole request was admitted and
// before it otherwise.
func fill(results []limiter.Result, g *group, admitted bool) error {
	r := g.reply
	if want := replyLen(len(g.hits), len(g.keys)); len(r) != want {
		return fmt.Errorf("redis: limiter script reply has %d values, want %d", len(r), want)
	}
	for j, i := range g.hits {
		v := r[replyHead+replyHit*j : replyHead+replyHit*(j+1)]
		allowed, ok1 := v[replyAllowed].(int64)
		exceeds, ok2 := v[replyExceeds].(int64)
		retry, ok3 := v[replyRetryAfter].(int64)
		rem, reset := v[replyRemainingDenied], v[replyResetDenied]
		if admitted {
			rem, reset = v[replyRemainingAdmitted], v[replyResetAdmitted]
		}
		resetMs, ok4 := reset.(int64)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return fmt.Errorf("redis: limiter script reply for hit %d has unexpected types %T", i, v)
		}
		remaining, err := parseRemaining(rem)
		if err != nil {
			return fmt.Errorf("redis: limiter script reply for hit %d: remaining: %w", i, err)
		}
		results[i] = limiter.Result{
			Allowed:      allowed == 1,
			ExceedsLimit: exceeds == 1,
			Remaining:    remaining,
			ResetAfter:   time.Duration(resetMs) * time.Millisecond,
			RetryAfter:   time.Duration(retry) * time.Millisecond,
		}
	}
	return nil
}

// parseRemaining reads a remaining count of the reply: an integer, or from
// 2^63 on a string holding the whole double, which it converts as
// limiter.Evaluate converts its float64.
func parseRemaining(v any) (uint64, error) {
	switch r := v.(type) {
	case int64:
		return uint64(r), nil
	case string:
		f, err := strconv.ParseFloat(r, 64)
		if err != nil {
			return 0, err
		}
		return uint64(f), nil
	}
	return 0, fmt.Errorf("a %T", v)
}
