package app

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sluicehq/sluice/internal/settings"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/redis"
)

// openStore opens the store the settings name: the in-memory store when
// --redis-url is empty.
func (srv *server) openStore() error {
	set := srv.set
	if set.RedisURL != "" || set.RedisSentinel != "" || set.RedisCluster != "" {
		// go-redis logs dial failures and topology events through one
		// process-wide logger, which the command sets: no library may.
		redis.SetClientLogger(srv.log.Named("redis"))
		sentinelUser, sentinelPass, ok := strings.Cut(set.RedisSentAuth, ":")
		if !ok {
			sentinelUser, sentinelPass = "", set.RedisSentAuth
		}
		st, err := redis.Open(redis.Settings{
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
		}, srv.log)
		if err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		srv.store, srv.closer, srv.ping = st, st.Close, st.Ping
		srv.warm = func(ctx context.Context) error {
			if err := st.Ready(ctx); err != nil {
				return err
			}
			// Once, at the first warm: Redis's default policy turns a flood
			// of distinct values into an outage of every decision.
			if nodes := st.NoEviction(ctx); len(nodes) > 0 {
				srv.log.Warn("redis maxmemory-policy is noeviction: once Redis is full every decision fails (OOM command not allowed); "+
					"set maxmemory and maxmemory-policy allkeys-lru (or volatile-lru: every key Sluice writes has a TTL)", zap.Strings("redis_nodes", nodes))
			}
			return nil
		}
		srv.shares = st.Shares(redis.SharesOptions{})
		// Open the connections and load the library now, so that no
		// decision pays for them inside its deadline. Redis may be down:
		// the health checks try again, and readiness waits for it.
		if err := srv.warmStore(context.Background()); err != nil {
			srv.log.Warn("redis not ready at start", zap.Error(err))
		}
		if set.OverLimitCache {
			c := limiter.NewOverLimitCache(st, limiter.OverLimitOptions{})
			srv.store = c
			srv.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_over_limit_cache_hits_total",
				Help: "Calls answered from the over-limit cache, without a store call."}, func() float64 { return float64(c.Hits()) }))
		}
		return nil
	}
	srv.store = limiter.NewMemoryStore(limiter.MemoryOptions{MaxCounters: srv.set.MaxCounters})
	srv.shares = limiter.NewMemoryShares(nil)
	srv.log.Info("store ready", zap.String("store", "memory"), zap.Int("max_counters", srv.set.MaxCounters))
	return nil
}

// warmStore runs warm unless it already succeeded, and returns its error
// (nil once the store is warm).
func (srv *server) warmStore(ctx context.Context) error {
	if srv.warm == nil || srv.warmed.Load() {
		return nil
	}
	if err := srv.warm(ctx); err != nil {
		return err
	}
	srv.warmed.Store(true)
	return nil
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
