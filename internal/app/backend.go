package app

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sluicehq/sluice/internal/settings"
	"github.com/sluicehq/sluice/internal/statuspage"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
	"github.com/sluicehq/sluice/pkg/redis"
	"github.com/sluicehq/sluice/pkg/rlqs"
)

// backend is the store the decisions are made on, assembled in one place:
// opened from the settings (Redis, or memory when no Redis is named),
// warmed, composed with its decorators and observers (compose), closed. The
// server reaches the store only through it.
type backend struct {
	kind   string        // "redis" or "memory": what was opened
	store  limiter.Store // what the decision calls: the opened store under its decorators
	shares rlqs.Store    // the store's shared limits, for quota
	redis  *redis.Store  // the opened Redis store, nil for memory
	// observers are told of every store call with the decision's own
	// timing of it (ratelimit.StoreObserver), set by compose.
	observers []ratelimit.StoreObserver
	log       *zap.Logger
	// warmed reports that warm succeeded once. Until then the server is not
	// ready, and /healthcheck fails.
	warmed atomic.Bool
	// up reports that the store answered the last health check's ping.
	up     atomic.Bool
	closed atomic.Bool
}

// openBackend opens the store the settings name: the in-memory store when
// no Redis is named. It tries to warm a Redis store at once, so that no
// decision pays for its connections inside its deadline; Redis may be
// down: the health checks try again, and readiness waits for it.
func openBackend(set *settings.Settings, log *zap.Logger) (*backend, error) {
	b := &backend{log: log}
	if set.RedisURL == "" && set.RedisSentinel == "" && set.RedisCluster == "" {
		b.kind = "memory"
		b.store = limiter.NewMemoryStore(limiter.MemoryOptions{MaxCounters: set.MaxCounters})
		b.shares = limiter.NewMemoryShares(nil)
		log.Info("store ready", zap.String("store", "memory"), zap.Int("max_counters", set.MaxCounters))
		return b, nil
	}
	// go-redis logs dial failures and topology events through one
	// process-wide logger, which the command sets: no library may.
	redis.SetClientLogger(log.Named("redis"))
	st, err := redis.Open(redisSettings(set), log)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	b.kind, b.store, b.redis = "redis", st, st
	b.shares = st.Shares(redis.SharesOptions{})
	if err := b.warm(context.Background()); err != nil {
		log.Warn("redis not ready at start", zap.Error(err))
	}
	return b, nil
}

// redisSettings translates the settings into redis.Open's.
func redisSettings(set *settings.Settings) redis.Settings {
	sentinelUser, sentinelPass, ok := strings.Cut(set.RedisSentAuth, ":")
	if !ok {
		sentinelUser, sentinelPass = "", set.RedisSentAuth
	}
	return redis.Settings{
		URL:                         set.RedisURL,
		MasterName:                  set.RedisSentinel,
		SentinelAddrs:               settings.SplitList(set.RedisSentinels),
		ClusterAddrs:                settings.SplitList(set.RedisCluster),
		PoolSize:                    set.RedisPoolSize,
		DialTimeout:                 set.RedisDial,
		ReadTimeout:                 set.RedisRead,
		WriteTimeout:                set.RedisWrite,
		CallTimeout:                 set.StoreTimeout,
		CallsInFlight:               set.RedisInFlight,
		MaxCallsInFlight:            set.RedisMaxFlight,
		LeaseRate:                   float64(set.RedisLeaseRate),
		LeaseSpan:                   set.RedisLeaseSpan,
		Prefix:                      set.RedisPrefix,
		TLSCAFile:                   set.RedisTLSCA,
		TLSCertFile:                 set.RedisTLSCert,
		TLSKeyFile:                  set.RedisTLSKey,
		TLSSkipHostnameVerification: set.RedisTLSNoHost,
		TLSSetting:                  tlsSetting(set),
		SentinelUsername:            sentinelUser,
		SentinelPassword:            sentinelPass,
	}
}

// compose puts the decorators around the opened store and names its
// observers, in one place and in this order. A decision's store call
// passes, from the decision inward:
//
//  1. wrap, a test's hook (hooks.wrapStore; nil in production), which
//     sees every call the decision makes, as the decision makes it;
//  2. the over-limit cache (--over-limit-cache, Redis only), which answers
//     from memory the hits it knows to be over their limit;
//  3. the opened store.
//
// Then the decision tells, after its metrics, the status page (its store
// latencies and errors) and tracing (a "store.apply" span), in that order,
// of the call it timed: they observe, wrap nothing, so the call is timed
// once (ratelimit.StoreObserver). A nil status or trace is off.
func (b *backend) compose(set *settings.Settings, reg prometheus.Registerer, wrap func(limiter.Store) limiter.Store,
	status *statuspage.Recorder, trace *tracing) {
	if set.OverLimitCache && b.redis != nil {
		c := limiter.NewOverLimitCache(b.store, limiter.OverLimitOptions{})
		b.store = c
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_over_limit_cache_hits_total",
			Help: "Calls answered from the over-limit cache, without a store call."}, func() float64 { return float64(c.Hits()) }))
	}
	if wrap != nil {
		b.store = wrap(b.store)
	}
	if status != nil {
		b.observers = append(b.observers, status)
	}
	if trace != nil {
		b.observers = append(b.observers, trace.storeSpans(b.kind))
	}
}

// fallible reports whether the store can be unreachable: false for memory.
func (b *backend) fallible() bool { return b.redis != nil }

// warm opens a Redis store's connections and loads its library
// (redis.Store.Ready), then warns once if Redis never evicts; it does
// nothing once it succeeded, nor for memory. It returns nil once the store
// is warm.
func (b *backend) warm(ctx context.Context) error {
	if b.redis == nil || b.warmed.Load() {
		return nil
	}
	if err := b.redis.Ready(ctx); err != nil {
		return err
	}
	// Once, at the first warm: Redis's default policy turns a flood of
	// distinct values into an outage of every decision.
	if nodes := b.redis.NoEviction(ctx); len(nodes) > 0 {
		b.log.Warn("redis maxmemory-policy is noeviction: once Redis is full every decision fails (OOM command not allowed); "+
			"set maxmemory and maxmemory-policy allkeys-lru (or volatile-lru: every key Sluice writes has a TTL)", zap.Strings("redis_nodes", nodes))
	}
	b.warmed.Store(true)
	return nil
}

// notWarm reports that the store still has to warm: a Redis store whose
// warm never succeeded.
func (b *backend) notWarm() bool { return b.redis != nil && !b.warmed.Load() }

// ping checks that the store answers: nil for memory, which cannot fail.
func (b *backend) ping(ctx context.Context) error {
	if b.redis == nil {
		return nil
	}
	return b.redis.Ping(ctx)
}

// close closes the store's connections; closing twice does nothing.
func (b *backend) close() error {
	if b.redis == nil || !b.closed.CompareAndSwap(false, true) {
		return nil
	}
	return b.redis.Close()
}

// tlsSetting names the setting whose rediss:// URL turned Redis TLS on,
// for the error of a server that does not speak TLS: REDIS_TLS=true, or
// rediss:// in the flag or variable that gave --redis-url; "" when
// unknown.
func tlsSetting(set *settings.Settings) string {
	for _, in := range set.InForce() {
		switch {
		case in.Name != "redis-url" || !strings.HasPrefix(in.Value, "rediss://"):
		case slices.Contains(in.From, "REDIS_TLS"):
			return "REDIS_TLS=true (envoyproxy/ratelimit's setting)"
		case len(in.From) > 0:
			return "rediss:// in " + in.From[0]
		}
	}
	return ""
}
