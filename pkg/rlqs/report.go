package rlqs

import (
	"context"
	"fmt"
	"math"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// handle answers one usage report of st: it checks the whole report first
// (a bad one changes no state and ends the stream), updates each bucket's
// demand, claims the shares of the limits the report's buckets count in
// (one Store call), and returns one action per bucket of the report. New
// buckets past a bound take the place of idle ones, or are answered from
// their rules' overflow groups (bounds.go, overflow.go). Then it forgets the
// buckets it abandoned and those no longer reported, and releases the
// shares no bucket of the stream counts in any more.
func (s *Service) handle(ctx context.Context, st *stream, r *rlqsv3.RateLimitQuotaUsageReports) (*rlqsv3.RateLimitQuotaResponse, error) {
	cfg, dom, err := s.domainOf(st, r.GetDomain())
	if err != nil {
		return nil, err
	}
	usages := r.GetBucketQuotaUsages()
	keys, err := s.check(usages)
	if err != nil {
		return nil, err
	}
	now := s.opts.Now()
	st.reports++
	s.noteInterval(st, now)
	fresh := newBuckets(st, keys)
	seen := make([]*bucket, len(usages))
	var release []limiter.Claim
	// Buckets the stream tracks first, so that the idle ones among them can
	// make room for the new ones.
	for i, u := range usages {
		if b := st.buckets[keys[i]]; b != nil {
			release = append(release, s.rebind(st, b, cfg, dom, u.GetBucketId().GetBucket())...)
			s.observe(st, b, u, now)
			seen[i] = b
		}
	}
	room := s.roomFor(st, fresh, now)
	over, rel := s.placeNew(st, room, &batch{cfg, dom, usages, keys, seen, now})
	release = append(release, rel...)
	release = append(release, s.giveRoom(st, room)...)
	storeErr := s.share(ctx, st, seen, over, now)
	if storeErr != nil {
		s.opts.Metrics.observeFailure(s.failureMode(dom).String())
		s.degraded("quota store failed, answering by failure mode", dom.Name, storeErr)
	}
	resp := s.respond(dom, usages, seen, storeErr, now)
	release = append(release, s.forget(st, now)...)
	s.release(ctx, st.domain, st.unheld(release))
	return resp, nil
}

// unheld is the claims of release whose limit the stream holds no group of
// any more: a group left empty (by an eviction) and made again in the same
// report (for the bucket that took its place) claimed its share anew.
func (st *stream) unheld(release []limiter.Claim) []limiter.Claim {
	out := release[:0]
	for _, c := range release {
		if st.groups[groupID{c.Key, c.Window}] == nil {
			out = append(out, c)
		}
	}
	return out
}

// batch is the report being handled: the config in force and the stream's
// domain in it, the usages with their bucket keys, the bucket each usage is
// answered as so far (nil: none yet) and the time.
type batch struct {
	cfg    *descriptors.Config
	dom    *descriptors.Domain
	usages []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
	keys   []string
	seen   []*bucket
	now    time.Time
}

// placeNew sets r.seen[i] for each usage of a bucket the stream did not
// track: a tracked bucket when the bounds leave room, if need be in place
// of an evictable one of room, else a bucket past a bound, returned by key
// in over. It returns the claims evictions leave unused.
func (s *Service) placeNew(st *stream, room *room, r *batch) (over map[string]*bucket, release []limiter.Claim) {
	for i, u := range r.usages {
		if r.seen[i] != nil {
			continue
		}
		id, key := u.GetBucketId().GetBucket(), r.keys[i]
		b := st.buckets[key] // a new bucket repeated in the report
		if b == nil && over[key] == nil {
			var rel []limiter.Claim
			b, rel = s.admit(st, room, key, r.now)
			release = append(release, rel...)
		}
		if b == nil {
			if over == nil {
				over = map[string]*bucket{}
			}
			r.seen[i] = s.overBucket(st, over, r.cfg, r.dom, key, id)
			r.seen[i].observeOver(u.GetNumRequestsAllowed()+u.GetNumRequestsDenied(), u.GetTimeElapsed().AsDuration())
			continue
		}
		release = append(release, s.rebind(st, b, r.cfg, r.dom, id)...)
		s.observe(st, b, u, r.now)
		r.seen[i] = b
	}
	return over, release
}

// rebind binds b to cfg when it was bound to another config (or none), and
// returns the claims that leaves unused.
func (s *Service) rebind(st *stream, b *bucket, cfg *descriptors.Config, dom *descriptors.Domain, id map[string]string) []limiter.Claim {
	if b.cfg == cfg {
		return nil
	}
	return s.bind(st, b, cfg, dom, id)
}

// observe adds usage u, held by the stream's report at now, to b's demand.
func (s *Service) observe(st *stream, b *bucket, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, now time.Time) {
	b.report = st.reports
	elapsed := min(u.GetTimeElapsed().AsDuration(), s.opts.IdleAfter)
	b.observe(u.GetNumRequestsAllowed()+u.GetNumRequestsDenied(), elapsed, now)
}

// domainOf returns the config in force and the stream's domain in it, which
// the first report names and later ones repeat or leave empty
// (RateLimitQuotaUsageReports.domain).
func (s *Service) domainOf(st *stream, domain string) (*descriptors.Config, *descriptors.Domain, error) {
	switch {
	case st.domain == "" && domain == "":
		return nil, nil, invalid("domain", "must not be empty in a stream's first report")
	case st.domain == "":
		st.domain = domain
	case domain != "" && domain != st.domain:
		return nil, nil, invalid("domain", "%.64q differs from the stream's domain %.64q: open a new stream for another domain", domain, st.domain)
	}
	cfg := s.opts.Decider.Config()
	if cfg == nil {
		return nil, nil, status.Error(codes.Unavailable, "no config loaded")
	}
	dom := cfg.Domain(st.domain)
	if dom == nil {
		return nil, nil, invalid("domain", "unknown domain %.64q: no config has it", st.domain)
	}
	return cfg, dom, nil
}

// check validates what Envoy's config shapes and what no Envoy can report,
// and returns each usage's bucket key (bucketKey).
func (s *Service) check(usages []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) ([]string, error) {
	keys := make([]string, len(usages))
	for i, u := range usages {
		f := func(field string) string { return fmt.Sprintf("bucket_quota_usages[%d].%s", i, field) }
		id := u.GetBucketId().GetBucket()
		switch {
		case len(id) == 0:
			return nil, invalid(f("bucket_id.bucket"), "must hold at least one key")
		case len(id) > s.opts.MaxEntries:
			return nil, invalid(f("bucket_id.bucket"), "%d keys, more than the maximum %d", len(id), s.opts.MaxEntries)
		case u.GetNumRequestsAllowed() > MaxReportedRequests:
			return nil, invalid(f("num_requests_allowed"), "%d requests in one report, more than %d", u.GetNumRequestsAllowed(), uint64(MaxReportedRequests))
		case u.GetNumRequestsDenied() > MaxReportedRequests:
			return nil, invalid(f("num_requests_denied"), "%d requests in one report, more than %d", u.GetNumRequestsDenied(), uint64(MaxReportedRequests))
		}
		for k := range id {
			if k == "" || len(k) > s.opts.MaxKeyBytes {
				return nil, invalid(f("bucket_id.bucket"), "key %.64q: want 1 to %d bytes, got %d", k, s.opts.MaxKeyBytes, len(k))
			}
		}
		if te := u.GetTimeElapsed(); te != nil && (te.CheckValid() != nil || te.AsDuration() < 0) {
			return nil, invalid(f("time_elapsed"), "%ds %dns is not a valid duration of 0 or more", te.GetSeconds(), te.GetNanos())
		}
		keys[i] = bucketKey(id)
	}
	return keys, nil
}

// noteInterval warns once per stream when reports arrive less often than
// assignments live: each then expires before the next report renews it.
func (s *Service) noteInterval(st *stream, now time.Time) {
	gap := now.Sub(st.lastReport)
	if !st.lastReport.IsZero() && gap > s.opts.AssignmentTTL && !st.warnedGap {
		st.warnedGap = true
		s.log.Warn("envoy reports less often than assignments live: raise --rlqs-assignment-ttl above its reporting_interval",
			zap.String("domain", st.domain), zap.Duration("report_gap", gap), zap.Duration("assignment_ttl", s.opts.AssignmentTTL))
	}
	st.lastReport = now
}

// share claims, in one Store call, the shares of the groups that the
// report's buckets count in, each with the demand of all the stream's
// buckets in it and of the report's buckets past a bound answered from it
// (over), in thousandths of a hit per window, and what the live
// assignments of its buckets not in the report still admit (Keep).
func (s *Service) share(ctx context.Context, st *stream, seen []*bucket, over map[string]*bucket, now time.Time) error {
	var touched []*group
	for _, b := range seen {
		for _, g := range groupsOf(b) {
			if g.claimed != st.reports {
				g.claimed, g.rate, g.overN = st.reports, 0, 0
				touched = append(touched, g)
			}
		}
	}
	if len(touched) == 0 {
		return nil
	}
	for _, b := range st.buckets {
		for _, g := range b.groups {
			if g.claimed == st.reports {
				g.rate += b.demandRate(now)
			}
		}
	}
	for _, b := range over {
		overflowDemand(b, st.reports, now)
	}
	claims := make([]limiter.Claim, len(touched))
	for i, g := range touched {
		g.claim.Demand = uint64(min(math.Round(g.rate*g.claim.Window.Seconds()*1000), limiter.MaxDemand))
		g.claim.Keep = min(g.kept(st.reports, now), g.claim.Limit)
		claims[i] = g.claim
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.StoreTimeout)
	defer cancel()
	shares, err := s.opts.Store.Share(ctx, claims)
	if err == nil && len(shares) != len(claims) {
		err = fmt.Errorf("%w: %d shares for %d claims", limiter.ErrStoreUnavailable, len(shares), len(claims))
	}
	if err != nil {
		return err
	}
	for i, g := range touched {
		g.share = shares[i].Requests
	}
	return nil
}

// forget drops the buckets answered with an AbandonAction and those not
// reported for IdleAfter (Envoy dropped them), and what the overflow groups
// handed out that has expired, and returns the claims no bucket of the
// stream counts in any more.
func (s *Service) forget(st *stream, now time.Time) []limiter.Claim {
	var release []limiter.Claim
	for k, b := range st.buckets {
		if b.abandon || now.Sub(b.seen) >= s.opts.IdleAfter {
			delete(st.buckets, k)
			s.buckets.Add(-1)
			s.opts.Metrics.bucketsAdded(-1)
			release = append(release, st.regroup(b, nil)...)
		}
	}
	return append(release, st.pruneOverflow(now.UnixNano())...)
}

// groupsOf is b's groups, none for nil.
func groupsOf(b *bucket) []*group {
	if b == nil {
		return nil
	}
	return b.groups
}

// release gives up claims, logging a failure: the store reclaims them after
// their hold anyway.
func (s *Service) release(ctx context.Context, domain string, claims []limiter.Claim) {
	if len(claims) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.StoreTimeout)
	defer cancel()
	if err := s.opts.Store.Release(ctx, claims); err != nil {
		s.degraded("releasing unused shares failed; they are reclaimed after the assignment ttl", domain, err)
	}
}

// failureMode is dom's failure mode, else the service's.
func (s *Service) failureMode(dom *descriptors.Domain) descriptors.FailureMode {
	if dom.FailureMode != descriptors.FailureModeUnset {
		return dom.FailureMode
	}
	return s.opts.FailureMode
}
