package app

import (
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
		Tenants:        tenantLookup,
	})
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
