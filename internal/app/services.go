package app

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/ratelimit"
	"github.com/sluicehq/sluice/pkg/rlqs"
	"github.com/sluicehq/sluice/pkg/rls"
)

// newServices builds the decision core on the store and the Envoy rate
// limit service front end on it, with their metrics.
func (srv *server) newServices() error {
	s := srv.set
	coreMetrics, err := ratelimit.NewMetrics(srv.reg, s.NearLimit())
	if err != nil {
		return err
	}
	rlsMetrics, err := rls.NewMetrics(srv.reg)
	if err != nil {
		return err
	}
	var observers []ratelimit.Observer
	if s.CompatMetrics {
		pm, err := ratelimit.NewPeerMetrics(srv.reg, s.NearLimit())
		if err == nil {
			err = ratelimit.RegisterPeerConfigLoads(srv.reg, srv.configLoads) // dropin.go
		}
		if err != nil {
			return err
		}
		observers = append(observers, pm)
	}
	tenantLookup, err := srv.newTenants() // tenants.go
	if err != nil {
		return err
	}
	srv.core = ratelimit.New(ratelimit.Options{
		Store:       srv.store.store,
		Logger:      srv.log.Named("ratelimit"),
		FailureMode: s.Failure(),
		Metrics:     coreMetrics,
		Observers:   append(observers, srv.observers()...),

		StoreObservers: srv.store.observers,
		ShadowMode:     s.ShadowMode,
		Overdraw:       s.Overdraw,
		CountDenied:    s.CountDenied,
		Cache:          s.Cache && srv.store.cache != nil,
		Local:          srv.store.local,
		Tenants:        tenantLookup,
	})
	srv.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_local_since_seconds",
		Help: "When failure mode local began deciding in process because the store failed (Unix seconds); 0 while the store answers."},
		func() float64 {
			if t := srv.core.LocalSince(); !t.IsZero() {
				return float64(t.UnixNano()) / 1e9
			}
			return 0
		}))
	srv.svc = rls.New(rls.Options{
		Decider:         srv.core,
		Metrics:         rlsMetrics,
		Headers:         s.Headers(),
		CompatNames:     s.CompatHeaderNames(),
		RawBody:         s.RawBody,
		DynamicMetadata: s.DynamicMetadata,
		MaxDescriptors:  s.MaxDescriptors,
		MaxEntries:      s.MaxEntries,
		MaxKeyBytes:     s.MaxKeyBytes,
		// The HTTP port's /json is reached by more than Envoy.
		JSONHitsAddend:        s.JSONHitsAddend,
		JSONHitsAddendSetting: "--json-hits-addend",
		JSONCheckOnly:         s.JSON == "check",
	})
	return srv.newQuota()
}

// newQuota builds the rate limit quota service on the decision core's
// config and the store's shared limits, with its metrics.
func (srv *server) newQuota() error {
	s, r := srv.set, &srv.set.RLQS
	m, err := rlqs.NewMetrics(srv.reg)
	if err != nil {
		return err
	}
	unmatched, _ := rlqs.ParseBlanket(r.Unmatched)
	srv.quota = rlqs.New(rlqs.Options{
		Decider:         srv.core,
		Store:           srv.store.shares,
		Logger:          srv.log.Named("rlqs"),
		Metrics:         m,
		AssignmentTTL:   r.AssignmentTTL,
		Burst:           r.Burst,
		IdleAfter:       r.Idle,
		Unmatched:       unmatched,
		FailureMode:     s.Failure(),
		ShadowMode:      s.ShadowMode,
		MaxBuckets:      r.MaxBuckets,
		MaxTotalBuckets: r.MaxTotalBuckets,
		MaxStreams:      r.MaxStreams,
		MaxEntries:      s.MaxEntries,
		MaxKeyBytes:     s.MaxKeyBytes,

		MaxStreamsPerConnection: r.MaxStreamsPerConnection,
	})
	return nil
}

// reloadSink makes a config the service's, then adds the limiter cache's
// pending hits to Redis, so that the new config's limits start from the
// shared counts.
type reloadSink struct {
	*ratelimit.Service
	store *backend
}

func (r reloadSink) SetConfig(c *descriptors.Config) {
	r.Service.SetConfig(c)
	r.store.flush(context.Background())
}

// heartbeatNeeded reports whether this instance's heartbeat is wanted: a
// failure mode local divides by the live instances (the process default
// or a domain of the config in force), or the limiter cache holds
// counters (it estimates the others' rate from them).
func (srv *server) heartbeatNeeded() bool {
	if srv.set.Failure() == descriptors.FailureModeLocal || srv.store.cache.Len() > 0 {
		return true
	}
	if cfg := srv.core.Config(); cfg != nil {
		for _, d := range cfg.Domains() {
			if d.FailureMode == descriptors.FailureModeLocal {
				return true
			}
		}
	}
	return false
}
