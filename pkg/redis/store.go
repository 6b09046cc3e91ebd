package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
	// Logger receives warnings the Store cannot return (a failed refund after
	// a cross-slot denial). Default zap.NewNop().
	Logger *zap.Logger
}

// Store is a limiter.Store on Redis: standalone, Sentinel or Cluster. It is
// safe for concurrent use; it holds no per-request state.
type Store struct {
	c       Client
	cluster bool
	prefix  string
	timeout time.Duration
	now     func() time.Time
	log     *zap.Logger
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
	if s.log == nil {
		s.log = zap.NewNop()
	}
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

// Close closes the client. Apply fails after Close.
func (s *Store) Close() error {
	return s.c.Close()
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

// call is one script call: its keys and ARGV, and where its reply goes.
type call struct {
	keys  []string
	args  []any
	reply *[]any
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
// trip each, stopping at the first slot that denies. Then, in one pipelined
// round trip, the slots that admitted are refunded exactly what they consumed
// and the remaining slots are evaluated without consuming (for their
// Results). Between a slot's consumption and its refund (a few round trips)
// other requests see the consumption and may be denied by it; deciding the
// slots in one fixed order keeps that rare, since a slot only ever sees
// requests that every earlier slot admitted. The refund runs under a fresh
// CallTimeout even when ctx has ended, so that it is not lost; if it fails it
// is logged, not returned, and the counters keep the consumption until their
// windows pass.
//
// A quota group whose enforced hits are in more than one slot cannot be
// decided by any one script: each slot then counts them as if they could not
// deny (as shadow hits), and once every slot has admitted, Apply decides the
// group from their Allowed; if it denies, every slot is refunded as above
// and the Results describe the counters as they were. A quota group within
// one slot is decided by that slot's script, atomically.
//
// Apply returns an error wrapping limiter.ErrStoreUnavailable when Redis fails
// or the deadline (ctx or CallTimeout) passes, and a plain error naming the
// hit when a Limit does not Validate. After an error no Result is returned.
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
	admitted, err := s.decide(ctx, hits, groups)
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
		s.undo(ctx, groups)
		admitted = false
		if err := fillAll(results, groups, false); err != nil {
			return nil, err
		}
	}
	limiter.MarkOverLimit(hits, results)
	return results, nil
}

// decide runs the groups' "a" calls one after another, in order, and
// reports whether all of them admitted. When one denies, it finishes the
// request (finishDenied); when one fails, it refunds the earlier ones.
func (s *Store) decide(ctx context.Context, hits []limiter.Hit, groups []*group) (bool, error) {
	for j, g := range groups {
		if err := s.run(ctx, []call{{g.keys, g.args, &g.reply}}); err != nil {
			s.undo(ctx, groups[:j])
			return false, err
		}
		var err error
		if g.admitted, err = parseAdmitted(g.reply); err != nil {
			s.undo(ctx, groups[:j])
			return false, fmt.Errorf("%w: %w", limiter.ErrStoreUnavailable, err)
		}
		if !g.admitted {
			return false, s.finishDenied(ctx, groups, j)
		}
	}
	return true, nil
}

// finishDenied handles a Cluster request that groups[j] denied: in one
// pipeline it refunds groups[:j] and evaluates groups[j+1:] in check mode.
func (s *Store) finishDenied(ctx context.Context, groups []*group, j int) error {
	calls := undoCalls(groups[:j])
	rest := groups[j+1:]
	for _, g := range rest {
		args := append([]any{"c"}, g.args[1:]...)
		calls = append(calls, call{g.keys, args, &g.reply})
	}
	if len(calls) == 0 {
		return nil
	}
	// A fresh deadline: the refund must be sent even if ctx has ended.
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	err := s.run(uctx, calls)
	if err == nil {
		return nil
	}
	for _, g := range rest {
		if g.reply == nil {
			return err // no Result for g: the caller gets the error
		}
	}
	// Every Result is known; only a refund failed, which the caller cannot act on.
	if ce := s.log.Check(zap.WarnLevel, "refund after cross-slot denial failed"); ce != nil {
		ce.Write(zap.Int("slots", j), zap.Error(err))
	}
	return nil
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

// run sends the calls and stores each reply. One call is one Script.Run
// (EVALSHA, then EVAL on NOSCRIPT); several share a pipeline, which a
// ClusterClient splits per node, and a NOSCRIPT answer is retried with
// Script.Run. It returns the first error, wrapped.
func (s *Store) run(ctx context.Context, calls []call) error {
	if len(calls) == 1 {
		c := calls[0]
		r, err := script.Run(ctx, s.c, c.keys, c.args...).Slice()
		if err != nil {
			return fmt.Errorf("%w: run limiter script on %d keys: %w", limiter.ErrStoreUnavailable, len(c.keys), err)
		}
		*c.reply = r
		return nil
	}
	pipe := s.c.Pipeline()
	cmds := make([]*goredis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = pipe.EvalSha(ctx, script.Hash(), c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are per command, below
	var first error
	for i, c := range calls {
		r, err := cmds[i].Slice()
		if goredis.HasErrorPrefix(err, "NOSCRIPT") {
			r, err = script.Run(ctx, s.c, c.keys, c.args...).Slice()
		}
		if err != nil {
			if first == nil {
				first = fmt.Errorf("%w: run limiter script on %d keys (%d calls): %w",
					limiter.ErrStoreUnavailable, len(c.keys), len(calls), err)
			}
			continue
		}
		*c.reply = r
	}
	return first
}

// undo refunds what groups (which all admitted) consumed, under a fresh
// deadline; a failure is logged.
func (s *Store) undo(ctx context.Context, groups []*group) {
	calls := undoCalls(groups)
	if len(calls) == 0 {
		return
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	if err := s.run(uctx, calls); err != nil {
		if ce := s.log.Check(zap.WarnLevel, "refund after cross-slot failure failed"); ce != nil {
			ce.Write(zap.Int("slots", len(groups)), zap.Error(err))
		}
	}
}

// undoCalls returns the "u" calls that take back what the admitting groups
// consumed; groups that consumed nothing need none.
func undoCalls(groups []*group) []call {
	var calls []call
	for _, g := range groups {
		if !g.admitted || g.reply == nil {
			continue
		}
		if a := undoArgs(g); a != nil {
			var discard []any
			calls = append(calls, call{g.keys, a, &discard})
		}
	}
	return calls
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
	args := make([]any, 0, argsHead+argsPerUndoKey*nk)
	args = append(args, "u", g.args[1])
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

// fillAll fills the Results of every group, as fill does.
func fillAll(results []limiter.Result, groups []*group, admitted bool) error {
	for _, g := range groups {
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
