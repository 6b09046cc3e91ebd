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
// a bucket idle for IdleAfter, else a QuotaAssignmentAction whose strategy
// is the bucket's: its part of the stream's share as a token bucket (a
// share of 0 denies all), ALLOW_ALL or DENY_ALL by its rule, Unmatched
// without one; and, when the store failed or the bucket is past MaxBuckets,
// the domain's failure mode: ALLOW_ALL (allow), DENY_ALL (deny) or no
// action (error: Envoy keeps its assignment until it expires, then applies
// its own expired_assignment_behavior).
func (s *Service) respond(st *stream, dom *descriptors.Domain, usages []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage,
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
		case b == nil:
			add(s.failureAction(dom, id))
		case answered[b]:
		case !b.idleSince.IsZero() && now.Sub(b.idleSince) >= s.opts.IdleAfter:
			b.abandon = true
			add(&action{BucketId: id, BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
				AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}})
		case b.policy == policyShare && storeErr != nil:
			add(s.failureAction(dom, id))
		default:
			add(s.assign(id, s.strategy(st, b, now)))
		}
		if b != nil {
			answered[b] = true
		}
	}
	return resp
}

// strategy is the rate limit strategy b is assigned.
func (s *Service) strategy(st *stream, b *bucket, now time.Time) *typev3.RateLimitStrategy {
	switch b.policy {
	case policyUnmatched:
		return blanket(s.opts.Unmatched)
	case policyAllow:
		return blanket(AllowAll)
	case policyDeny:
		return blanket(DenyAll)
	}
	g := b.group
	part := g.share
	if g.buckets > 1 {
		// The group's buckets split its share by their demand, equally
		// when none has any.
		if g.rate > 0 {
			part = uint64(math.Floor(float64(g.share) * b.demandRate(now) / g.rate))
		} else {
			part = g.share / uint64(g.buckets)
		}
	}
	return tokenBucket(min(part, g.share), g.claim.Window, s.opts.Burst)
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

// tokenBucket is the strategy that admits share requests per window: a
// token bucket refilled with share tokens per window (Envoy refills it
// continuously, at share/window per second; window is whole seconds, as
// Envoy reads fill_interval) holding share x burst / window tokens, at least
// 1 and at most share. A share of 0 is DENY_ALL: Envoy's token bucket needs
// max_tokens of at least 1. (Envoy implements no requests_per_time_unit
// strategy, so none is sent.)
func tokenBucket(share uint64, window, burst time.Duration) *typev3.RateLimitStrategy {
	if share == 0 {
		return blanket(DenyAll)
	}
	share = min(share, math.MaxUint32)
	tokens := math.Ceil(float64(share) * burst.Seconds() / window.Seconds())
	tokens = min(max(tokens, 1), float64(share))
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens:     uint32(tokens),
		TokensPerFill: wrapperspb.UInt32(uint32(share)),
		FillInterval:  durationpb.New(window),
	}}}
}
