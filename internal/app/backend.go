package app

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	// cache is the limiter cache around a Redis store (nil for memory,
	// where every decision is in process already); local is failure mode
	// local's store; both set by compose.
	cache *limiter.Cache
	local *limiter.Local
	// id names this instance in the heartbeat; live is the instances last
	// counted there (0: never); localInstances is --local-instances.
	id             string
	live           atomic.Int64
	localInstances int
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
	b := &backend{log: log, id: instanceID()}
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
//  3. the limiter cache (Redis only), which decides the hits of cached
//     limits in process from their counters' shared counts (limiter.Cache);
//  4. the opened store.
//
// Beside the chain, failure mode local's store (limiter.Local) decides
// while the opened store fails, each limit divided by the live instances.
//
// Then the decision tells, after its metrics, the status page (its store
// latencies and errors) and tracing (a "store.apply" span), in that order,
// of the call it timed: they observe, wrap nothing, so the call is timed
// once (ratelimit.StoreObserver). A nil status or trace is off.
func (b *backend) compose(set *settings.Settings, reg prometheus.Registerer, wrap func(limiter.Store) limiter.Store,
	status *statuspage.Recorder, trace *tracing) {
	b.localInstances = set.LocalInstances
	b.local = limiter.NewLocal(limiter.LocalOptions{Instances: b.outageInstances, MaxCounters: set.MaxCounters})
	if b.redis != nil {
		b.cache = limiter.NewCache(b.store, limiter.CacheOptions{Period: set.CacheSync, Instances: b.liveInstances})
		b.store = b.cache
		b.registerCache(reg)
		b.registerBacklog(reg)
	}
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

// registerCache registers the limiter cache's and the local store's
// metrics.
func (b *backend) registerCache(reg prometheus.Registerer) {
	c := b.cache
	for _, m := range []struct {
		name, help string
		v          func() int64
	}{
		{"sluice_cache_decisions_total", "Hits of cached limits decided in process by the limiter cache.", func() int64 { return c.Stats().Decided }},
		{"sluice_cache_near_limit_total", "Hits of warm cached limits sent to Redis because they were near the limit.", func() int64 { return c.Stats().Near }},
		{"sluice_cache_syncs_total", "Calls of the limiter cache adding pending hits to Redis and reading the counts back.", func() int64 { return c.Stats().Syncs }},
		{"sluice_cache_synced_hits_total", "Hits the limiter cache added to Redis.", func() int64 { return c.Stats().SyncedHits }},
		{"sluice_local_decisions_total", "Requests decided in process by failure mode local while the store was unavailable.", b.local.Decided},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: m.name, Help: m.help},
			func() float64 { return float64(m.v()) }))
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_live_instances",
		Help: "Instances alive in the Redis heartbeat, this one included, as last counted (0: never counted)."},
		func() float64 { return float64(b.live.Load()) }))
}

// registerBacklog registers the gauges of what the Redis store has left to
// do in the background (redis.Backlog): an operator sees refunds piling up
// behind a node that does not answer, and a test waits for them instead of
// sleeping.
func (b *backend) registerBacklog(reg prometheus.Registerer) {
	st := b.redis
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_redis_refunds_pending",
		Help: "Refunds of denied Cluster requests queued or being retried until Redis answers them."},
		func() float64 { return float64(st.Backlog().Refunds) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_redis_leased_permits",
		Help: "Permits this instance's leases of hot counters hold unspent (counted in Redis already; given back when idle)."},
		func() float64 { return float64(st.Backlog().LeasedPermits) }))
}

// liveInstances is the instances last counted alive, at least 1.
func (b *backend) liveInstances() int { return int(max(b.live.Load(), 1)) }

// outageInstances is what failure mode local divides each limit by:
// --local-instances, else the live instances last counted, else 1.
func (b *backend) outageInstances() int {
	if b.localInstances > 0 {
		return b.localInstances
	}
	return b.liveInstances()
}

// heartbeatTTL is how long an instance counts as alive after its last
// heartbeat; heartbeats are sent every third of it.
const heartbeatTTL = 3 * time.Second

// run syncs the limiter cache and, while needed says so, keeps this
// instance's heartbeat in Redis, until ctx ends; then it flushes the
// cache's pending hits. Nothing for memory.
func (b *backend) run(ctx context.Context, needed func() bool) {
	if b.redis == nil {
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { b.cache.Run(ctx, closeFlushTimeout) })
	t := time.NewTicker(heartbeatTTL / 3)
	defer t.Stop()
	for {
		if needed() {
			hctx, cancel := context.WithTimeout(ctx, heartbeatTTL/3)
			if n, err := b.redis.Heartbeat(hctx, b.id, heartbeatTTL); err == nil {
				b.live.Store(int64(n))
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-t.C:
		}
	}
}

// closeFlushTimeout bounds the flush of the limiter cache's pending hits at
// shutdown.
const closeFlushTimeout = time.Second

// flush adds the limiter cache's pending hits to Redis now (a reload), or
// at least starts to: it waits at most closeFlushTimeout.
func (b *backend) flush(ctx context.Context) {
	if b.cache == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, closeFlushTimeout)
	defer cancel()
	if err := b.cache.Flush(ctx); err != nil {
		b.log.Warn("limiter cache: pending hits not added to redis", zap.Error(err))
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
	b.flush(context.Background())
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

// instanceID names this process in the heartbeat: its host and pid, and a
// random part, so that two processes never share a name.
func instanceID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%x", host, os.Getpid(), rand.Uint64())
}
