package rlqs

import (
	"math"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

type action = rlqsv3.RateLimitQuotaResponse_BucketAction

// respond builds one action per bucket of the report, in report order (a
// bucket id repeated in one report is answered once): an AbandonAction for
// a bucket idle for IdleAfter or evicted to make room for a new one, else a
// QuotaAssignmentAction whose strategy is the bucket's: its part of the
// stream's shares as a token bucket (a part of 0 denies all; a bucket past
// a bound gets its part of its rule's overflow groups), ALLOW_ALL or
// DENY_ALL by its rule, Unmatched without one; and, when the store failed,
// the domain's failure mode: ALLOW_ALL (allow), DENY_ALL (deny) or no
// action (error: Envoy keeps its assignment until it expires, then applies
// its own expired_assignment_behavior).
func (s *Service) respond(dom *descriptors.Domain, usages []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage,
	seen []*bucket, storeErr error, now time.Time) *rlqsv3.RateLimitQuotaResponse {
	resp := &rlqsv3.RateLimitQuotaResponse{BucketAction: make([]*action, 0, len(usages))}
	add := func(a *action) {
		if a != nil {
			resp.BucketAction = append(resp.BucketAction, a)
			s.opts.Metrics.observeAction(a)
		}
	}
	answered := make(map[*bucket]bool, len(seen))
	for i, b := range seen {
		id := usages[i].GetBucketId()
		switch {
		case answered[b]:
		case b.abandon || !b.idleSince.IsZero() && now.Sub(b.idleSince) >= s.opts.IdleAfter:
			b.abandon = true
			add(&action{BucketId: id, BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
				AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}})
		case b.policy == policyShare && storeErr != nil:
			add(s.failureAction(dom, id))
		default:
			add(s.assign(id, s.strategy(b, now)))
		}
		answered[b] = true
	}
	return resp
}

// strategy is the rate limit strategy b is assigned. For a bucket whose
// rule has several limits, Envoy enforces one token bucket: the rate of the
// slowest of its parts and the smallest capacity, so that no limit's bound
// is exceeded (a part of 0 denies all).
func (s *Service) strategy(b *bucket, now time.Time) *typev3.RateLimitStrategy {
	switch b.policy {
	case policyUnmatched:
		return blanket(s.opts.Unmatched)
	case policyAllow:
		return blanket(AllowAll)
	case policyDeny:
		return blanket(DenyAll)
	}
	parts := make([]uint64, len(b.groups))
	deny := false
	for i, g := range b.groups {
		if b.over && g.perValue {
			parts[i] = g.share // each counts on its own counter
		} else {
			parts[i] = min(g.part(b, now), g.free(b, now))
		}
		deny = deny || parts[i] == 0
	}
	expires := now.Add(s.opts.AssignmentTTL).UnixNano()
	if len(b.held) != len(b.groups) {
		b.held = make([]heldPart, len(b.groups))
	}
	for i, g := range b.groups {
		if deny {
			parts[i] = 0
		}
		if b.over {
			g.hand(parts[i], g.claimed, expires)
		} else {
			b.held[i] = heldPart{fill: parts[i], report: g.claimed, expires: expires}
		}
	}
	if deny {
		return blanket(DenyAll)
	}
	var fill, tokens uint64
	var interval time.Duration
	slowest := math.Inf(1)
	for i, g := range b.groups {
		part := parts[i]
		if r := float64(part) / g.claim.Window.Seconds(); r < slowest {
			slowest, fill, interval = r, part, g.claim.Window
		}
		c := g.capacity(part, s.opts.Burst)
		if tokens == 0 || c < tokens {
			tokens = c
		}
	}
	return tokenBucket(fill, interval, tokens)
}

// part is b's fair part of g's share: all of it for the group's only
// bucket; else the buckets (tracked, and past a bound in the report) split
// it by their demand, equally when none has any. What b is assigned is
// also bounded by free.
func (g *group) part(b *bucket, now time.Time) uint64 {
	n := g.buckets + g.overN
	switch {
	case n <= 1:
		return g.share
	case g.rate > 0:
		return min(uint64(math.Floor(float64(g.share)*b.demandRate(now)/g.rate)), g.share)
	}
	return g.share / uint64(n)
}

// free is what g's share leaves b once the other buckets' live assignments
// are counted: an assignment Envoy holds admits its part until it expires,
// whichever bucket is reported next, so a bucket reported alone (as Envoy
// reports a new one) gets only what the others leave. A bucket of the
// report being answered that is not answered yet does not count: the same
// response replaces its assignment. What buckets past a bound were handed
// counts whole, theirs in earlier reports too (g.handed keeps no bucket
// ids), so they get less than their part until those expire.
func (g *group) free(b *bucket, now time.Time) uint64 {
	held := g.handedLive(now.UnixNano(), 0)
	for _, o := range g.members {
		if p := o.heldIn(g); o != b && p.expires > now.UnixNano() && (o.report != g.claimed || p.report == g.claimed) {
			held += p.fill
		}
	}
	if held >= g.share {
		return 0
	}
	return g.share - held
}

// kept is what the live assignments of g's buckets not in report still
// admit, those handed to buckets past a bound in earlier reports included:
// the share the stream keeps reserved in the store until they expire
// (limiter.Claim.Keep).
func (g *group) kept(report uint64, now time.Time) uint64 {
	held := g.handedLive(now.UnixNano(), report)
	for _, o := range g.members {
		if p := o.heldIn(g); o.report != report && p.expires > now.UnixNano() {
			held += p.fill
		}
	}
	return held
}

// heldIn is b's last assigned part of g's share; zero if none.
func (b *bucket) heldIn(g *group) heldPart {
	for i, bg := range b.groups {
		if bg == g {
			return b.held[i]
		}
	}
	return heldPart{}
}

// capacity is the token bucket capacity of a part of g's limit: for a
// token_bucket limit, the same part of its burst; else part x burst /
// window (burst: Options.Burst), at most part. At least 1.
func (g *group) capacity(part uint64, burst time.Duration) uint64 {
	var c float64
	if g.burst > 0 && g.claim.Limit > 0 {
		c = math.Ceil(float64(g.burst) * float64(part) / float64(g.claim.Limit))
	} else {
		c = min(math.Ceil(float64(part)*burst.Seconds()/g.claim.Window.Seconds()), float64(part))
	}
	return uint64(max(c, 1))
}

// failureAction is the domain's failure mode's action for a bucket whose
// share is unknown.
func (s *Service) failureAction(dom *descriptors.Domain, id *rlqsv3.BucketId) *action {
	switch s.failureMode(dom) {
	case descriptors.FailureModeAllow:
		return s.assign(id, blanket(AllowAll))
	case descriptors.FailureModeDeny:
		return s.assign(id, blanket(DenyAll))
	}
	return nil
}

// assign is a QuotaAssignmentAction of strategy for id, for AssignmentTTL.
func (s *Service) assign(id *rlqsv3.BucketId, strategy *typev3.RateLimitStrategy) *action {
	return &action{BucketId: id, BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
		QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(s.opts.AssignmentTTL),
			RateLimitStrategy:    strategy,
		}}}
}

func blanket(b Blanket) *typev3.RateLimitStrategy {
	rule := typev3.RateLimitStrategy_ALLOW_ALL
	if b == DenyAll {
		rule = typev3.RateLimitStrategy_DENY_ALL
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}
}

// tokenBucket is the strategy that admits fill requests per interval: a
// token bucket refilled with fill tokens per interval (Envoy refills it
// continuously, at fill/interval per second; the interval is whole seconds,
// as Envoy reads fill_interval) holding tokens, each at least 1 and at most
// 2^32-1. Envoy implements no requests_per_time_unit strategy, so none is
// sent.
func tokenBucket(fill uint64, interval time.Duration, tokens uint64) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens:     uint32(min(max(tokens, 1), math.MaxUint32)),
		TokensPerFill: wrapperspb.UInt32(uint32(min(max(fill, 1), math.MaxUint32))),
		FillInterval:  durationpb.New(interval),
	}}}
}
