package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// Heartbeat says that the instance named id is alive for ttl more, and
// returns how many instances are alive, this one included: one sorted set
// under the Store's prefix holds each instance with the time its heartbeat
// expires (the instance's clock, in Unix milliseconds), and the expired are
// dropped first. The set expires itself twice ttl after the last heartbeat.
// One pipelined round trip; its error wraps limiter.ErrStoreUnavailable.
func (s *Store) Heartbeat(ctx context.Context, id string, ttl time.Duration) (int, error) {
	key := s.prefix + "instances"
	now := time.Now()
	pipe := s.c.Pipeline()
	pipe.ZRemRangeByScore(ctx, key, "-inf", strconv.FormatInt(now.UnixMilli(), 10))
	pipe.ZAdd(ctx, key, goredis.Z{Score: float64(now.Add(ttl).UnixMilli()), Member: id})
	card := pipe.ZCard(ctx, key)
	pipe.PExpire(ctx, key, 2*ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("%w: heartbeat: %w", limiter.ErrStoreUnavailable, err)
	}
	return int(max(card.Val(), 1)), nil
}
