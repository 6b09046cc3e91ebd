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

//go:embed sliding_window.lua
var slidingWindowSrc string

// slidingWindow is the sliding window counter script; Script.Run sends
// EVALSHA and falls back to EVAL on NOSCRIPT, so a flushed script cache or a
// restarted Redis needs no restart of ours.
var slidingWindow = goredis.NewScript(slidingWindowSrc)

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
	if err := slidingWindow.Load(ctx, s.c).Err(); err != nil {
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
	args []any // the "a" ARGV; args[0] is the mode

	reply    []any // the "a" or "c" reply
	admitted bool
}

// call is one script call: its keys and ARGV, and where its reply goes.
type call struct {
	keys  []string
	args  []any
	reply *[]any
}

// Apply implements limiter.Store: it evaluates every hit and consumes them
// only if every enforced hit is admitted. It returns one Result per hit in
// input order. Apply is safe for concurrent use.
//
// On a standalone or Sentinel Redis, and on a Cluster when every counter of
// the request shares a slot, Apply is one script call: atomic, one round trip.
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

	groups := s.split(hits, now)
	admitted := true
	for j, g := range groups {
		if err := s.run(ctx, []call{{g.keys, g.args, &g.reply}}); err != nil {
			s.undo(ctx, hits, groups[:j], now)
			return nil, err
		}
		var err error
		if g.admitted, err = parseAdmitted(g.reply); err != nil {
			s.undo(ctx, hits, groups[:j], now)
			return nil, fmt.Errorf("%w: %w", limiter.ErrStoreUnavailable, err)
		}
		if !g.admitted {
			admitted = false
			if err := s.finishDenied(ctx, hits, groups, j, now); err != nil {
				return nil, err
			}
			break
		}
	}

	results := make([]limiter.Result, len(hits))
	for _, g := range groups {
		if err := fill(results, g, admitted); err != nil {
			return nil, fmt.Errorf("%w: %w", limiter.ErrStoreUnavailable, err)
		}
	}
	for i, h := range hits {
		results[i].OverLimit = !h.Refund && !h.Shadow && !h.Quota && !results[i].Allowed
	}
	return results, nil
}

// finishDenied handles a Cluster request that groups[j] denied: in one
// pipeline it refunds groups[:j] and evaluates groups[j+1:] in check mode.
func (s *Store) finishDenied(ctx context.Context, hits []limiter.Hit, groups []*group, j int, now string) error {
	calls := s.undoCalls(hits, groups[:j], now)
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
func (s *Store) split(hits []limiter.Hit, now string) []*group {
	var groups []*group
	keyIndex := make(map[string]int, len(hits)) // key -> 1-based index in its group
	keys := make([]string, len(hits))
	inc := make(map[string]uint64, len(hits)) // key -> largest non-refund Hits: what the counter grows by
	for i, h := range hits {
		keys[i] = counterKey(s.prefix, h)
		if !h.Refund {
			inc[keys[i]] = max(inc[keys[i]], h.Hits)
		}
	}
	for i, h := range hits {
		key := keys[i]
		sl := 0
		if s.cluster {
			sl = slot(key)
		}
		var g *group
		for _, x := range groups {
			if x.slot == sl {
				g = x
				break
			}
		}
		if g == nil {
			g = &group{slot: sl, args: make([]any, 0, 2+5*len(hits))}
			g.args = append(g.args, "a", now)
			groups = append(groups, g)
		}
		k, ok := keyIndex[key]
		if !ok {
			g.keys = append(g.keys, key)
			k = len(g.keys)
			keyIndex[key] = k
		}
		flags := 0
		if h.Refund {
			flags |= 1
		}
		if h.Shadow {
			flags |= 2
		}
		if !h.Refund && inc[key] > h.Limit.Requests {
			flags |= 4
		}
		g.hits = append(g.hits, i)
		g.args = append(g.args, k, h.Limit.Requests, h.Limit.Window.Milliseconds(), h.Hits, flags)
	}
	slices.SortFunc(groups, func(a, b *group) int { return a.slot - b.slot })
	return groups
}

// run sends the calls and stores each reply. One call is one Script.Run
// (EVALSHA, then EVAL on NOSCRIPT); several share a pipeline, which a
// ClusterClient splits per node, and a NOSCRIPT answer is retried with
// Script.Run. It returns the first error, wrapped.
func (s *Store) run(ctx context.Context, calls []call) error {
	if len(calls) == 1 {
		c := calls[0]
		r, err := slidingWindow.Run(ctx, s.c, c.keys, c.args...).Slice()
		if err != nil {
			return fmt.Errorf("%w: run sliding window script on %d keys: %w", limiter.ErrStoreUnavailable, len(c.keys), err)
		}
		*c.reply = r
		return nil
	}
	pipe := s.c.Pipeline()
	cmds := make([]*goredis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = pipe.EvalSha(ctx, slidingWindow.Hash(), c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are per command, below
	var first error
	for i, c := range calls {
		r, err := cmds[i].Slice()
		if goredis.HasErrorPrefix(err, "NOSCRIPT") {
			r, err = slidingWindow.Run(ctx, s.c, c.keys, c.args...).Slice()
		}
		if err != nil {
			if first == nil {
				first = fmt.Errorf("%w: run sliding window script on %d keys (%d calls): %w",
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
func (s *Store) undo(ctx context.Context, hits []limiter.Hit, groups []*group, now string) {
	calls := s.undoCalls(hits, groups, now)
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
func (s *Store) undoCalls(hits []limiter.Hit, groups []*group, now string) []call {
	var calls []call
	for _, g := range groups {
		if !g.admitted || g.reply == nil {
			continue
		}
		if a := undoArgs(g, hits, now); a != nil {
			var discard []any
			calls = append(calls, call{g.keys, a, &discard})
		}
	}
	return calls
}

// undoArgs returns the "u" ARGV taking back what g's "a" call consumed, or
// nil when it consumed nothing (or its reply is malformed).
func undoArgs(g *group, hits []limiter.Hit, now string) []any {
	nh := len(g.hits)
	if len(g.reply) != 2+7*nh+2*len(g.keys) {
		return nil
	}
	tail := g.reply[2+7*nh:]
	window := make([]int64, len(g.keys))
	for j, i := range g.hits {
		window[g.args[2+5*j].(int)-1] = hits[i].Limit.Window.Milliseconds()
	}
	args := []any{"u", now}
	changed := false
	for k := range g.keys {
		idx, ok1 := tail[2*k].(int64)
		delta, ok2 := tail[2*k+1].(int64)
		if !ok1 || !ok2 {
			return nil
		}
		changed = changed || delta != 0
		args = append(args, idx, delta, window[k])
	}
	if !changed {
		return nil
	}
	return args
}

func parseAdmitted(r []any) (bool, error) {
	if len(r) < 2 {
		return false, errors.New("redis: sliding window reply too short")
	}
	a, ok := r[0].(int64)
	if !ok {
		return false, errors.New("redis: sliding window reply: admitted is not an integer")
	}
	return a == 1, nil
}

// fill writes the Results of g's hits, picking the counters' state after
// consumption when the whole request was admitted and before it otherwise.
func fill(results []limiter.Result, g *group, admitted bool) error {
	r := g.reply
	if len(r) != 2+7*len(g.hits)+2*len(g.keys) {
		return fmt.Errorf("redis: sliding window reply has %d values, want %d", len(r), 2+7*len(g.hits)+2*len(g.keys))
	}
	for j, i := range g.hits {
		v := r[2+7*j : 2+7*j+7]
		allowed, ok1 := v[0].(int64)
		exceeds, ok2 := v[1].(int64)
		retry, ok3 := v[2].(int64)
		rem, reset := v[3], v[4]
		if admitted {
			rem, reset = v[5], v[6]
		}
		resetMs, ok5 := reset.(int64)
		if !ok1 || !ok2 || !ok3 || !ok5 {
			return fmt.Errorf("redis: sliding window reply for hit %d has unexpected types %T", i, v)
		}
		var remaining uint64
		switch r := rem.(type) {
		case int64:
			remaining = uint64(r)
		case string:
			// From 2^63 on the script prints the whole double; convert it
			// as limiter.Evaluate converts its float64.
			f, err := strconv.ParseFloat(r, 64)
			if err != nil {
				return fmt.Errorf("redis: sliding window reply for hit %d: remaining: %w", i, err)
			}
			remaining = uint64(f)
		default:
			return fmt.Errorf("redis: sliding window reply for hit %d: remaining is a %T", i, rem)
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
