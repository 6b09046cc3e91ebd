package redis

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/pkg/limiter"
)

//go:embed quota.lua
var quotaSrc string

// quotaScript divides one shared limit (quota.lua, whose header documents
// its KEYS, ARGV and reply).
var quotaScript = goredis.NewScript(quotaSrc)

// DefaultShareTimeout bounds each Shares call when SharesOptions.Timeout is
// zero. Claims come from Envoy's periodic quota reports, never from a
// request waiting on the answer, so it is far longer than a decision's.
const DefaultShareTimeout = time.Second

// Shares keeps shared limits (limiter.Claim) on Redis: one hash per limit,
// one field per holder, each claim decided by one script run (quota.lua,
// the twin of limiter.Divide) under Redis TIME, so that every Sluice instance
// on the Redis shares one view and one clock. It is safe for concurrent use.
//
// Key: <prefix>{rlqs:<window_ms>:k:<escaped key>}, escaped as counter keys
// are (a key over MaxPlainKey bytes escaped becomes "h:" and its SHA-256), so
// the hash tag holds the limit's whole identity and each limit is one
// Cluster slot. "rlqs" is no algorithm code, so a shared limit never shares a
// key with a counter.
type Shares struct {
	c       Client
	prefix  string
	timeout time.Duration
	now     func() time.Time
}

// SharesOptions configures Store.Shares. The zero value is usable.
type SharesOptions struct {
	// Timeout bounds each Share or Release call, all its round trips
	// included, on top of the caller's context. Default DefaultShareTimeout.
	Timeout time.Duration
}

// Shares returns the shared limits on s's client, under s's key prefix (and,
// in tests, its explicit clock). They are closed with s.
func (s *Store) Shares(o SharesOptions) *Shares {
	if o.Timeout <= 0 {
		o.Timeout = DefaultShareTimeout
	}
	return &Shares{c: s.c, prefix: s.prefix, timeout: o.Timeout, now: s.now}
}

// shareKey is the Redis key of the shared limit (key, window).
func shareKey(prefix, key string, window time.Duration) string {
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString("{rlqs:")
	b.WriteString(strconv.FormatInt(window.Milliseconds(), 10))
	if escapedLen(key) > MaxPlainKey {
		b.WriteString(":h:")
		sum := sha256.Sum256([]byte(key))
		b.WriteString(hex.EncodeToString(sum[:]))
	} else {
		b.WriteString(":k:")
		for i := 0; i < len(key); i++ {
			switch c := key[i]; c {
			case '%':
				b.WriteString("%25")
			case '}':
				b.WriteString("%7D")
			default:
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('}')
	return b.String()
}

// Share runs quota.lua for each claim, all in one pipelined round trip per
// Redis node (each claim is one key, so one slot), and returns one Share per
// claim in order. Claims on the same limit are divided in order. It returns
// an error naming the claim, before any call, when a claim does not
// Validate, and an error wrapping limiter.ErrStoreUnavailable when Redis
// fails or the deadline passes: then some claims may have been divided and
// others not (each is atomic on its own; claiming again is harmless).
func (s *Shares) Share(ctx context.Context, claims []limiter.Claim) ([]limiter.Share, error) {
	if len(claims) == 0 {
		return []limiter.Share{}, nil
	}
	for i := range claims {
		if err := claims[i].Validate(); err != nil {
			return nil, fmt.Errorf("redis: claim %d: %w", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	now := ""
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMilli(), 10)
	}
	keys := make([][]string, len(claims))
	args := make([][]any, len(claims))
	for i, c := range claims {
		keys[i] = []string{shareKey(s.prefix, c.Key, c.Window)}
		args[i] = []any{c.Holder, c.Limit, c.Demand, c.Hold.Milliseconds(), now, c.Keep}
	}
	cmds, err := s.run(ctx, keys, args)
	if err != nil {
		return nil, err
	}
	out := make([]limiter.Share, len(claims))
	for i, cmd := range cmds {
		if out[i], err = parseShare(cmd.Val()); err != nil {
			return nil, fmt.Errorf("%w: quota script reply for claim %d: %w", limiter.ErrStoreUnavailable, i, err)
		}
	}
	return out, nil
}

// run sends one EVALSHA per claim in a pipeline and sends again, with EVAL,
// those that Redis answered NOSCRIPT (they did not run, so running them is
// no retry).
func (s *Shares) run(ctx context.Context, keys [][]string, args [][]any) ([]*goredis.Cmd, error) {
	cmds := make([]*goredis.Cmd, len(keys))
	p := s.c.Pipeline()
	for i := range keys {
		cmds[i] = quotaScript.EvalSha(ctx, p, keys[i], args[i]...)
	}
	_, _ = p.Exec(ctx) // each command's error is read below
	var again []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			if !goredis.HasErrorPrefix(err, "NOSCRIPT") {
				return nil, fmt.Errorf("%w: quota script: %w", limiter.ErrStoreUnavailable, err)
			}
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return cmds, nil
	}
	p = s.c.Pipeline()
	for _, i := range again {
		cmds[i] = quotaScript.Eval(ctx, p, keys[i], args[i]...)
	}
	_, _ = p.Exec(ctx)
	for _, i := range again {
		if err := cmds[i].Err(); err != nil {
			return nil, fmt.Errorf("%w: quota script: %w", limiter.ErrStoreUnavailable, err)
		}
	}
	return cmds, nil
}

// parseShare reads quota.lua's reply {share, holders, "total demand"}.
func parseShare(v any) (limiter.Share, error) {
	r, ok := v.([]any)
	if !ok || len(r) != 3 {
		return limiter.Share{}, fmt.Errorf("want 3 values, got %v", v)
	}
	share, ok1 := r[0].(int64)
	n, ok2 := r[1].(int64)
	total, ok3 := r[2].(string)
	d, err := strconv.ParseUint(total, 10, 64)
	if !ok1 || !ok2 || !ok3 || err != nil || share < 0 || n < 1 {
		return limiter.Share{}, fmt.Errorf("malformed %v", v)
	}
	return limiter.Share{Requests: uint64(share), Holders: int(n), Demand: d}, nil
}

// Release deletes each claim's Holder from its limit's hash (HDEL, one
// pipelined round trip per node), so that the others get its share at their
// next claims. Only Key, Window and Holder are read. It returns an error
// wrapping limiter.ErrStoreUnavailable when Redis fails; the holdings it
// could not delete are reclaimed when their Hold passes.
func (s *Shares) Release(ctx context.Context, claims []limiter.Claim) error {
	if len(claims) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	p := s.c.Pipeline()
	for _, c := range claims {
		p.HDel(ctx, shareKey(s.prefix, c.Key, c.Window), c.Holder)
	}
	if _, err := p.Exec(ctx); err != nil {
		return fmt.Errorf("%w: release %d shares: %w", limiter.ErrStoreUnavailable, len(claims), err)
	}
	return nil
}
