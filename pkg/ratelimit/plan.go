package ratelimit

import (
	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// plan is the second stage of Decide: one limiter.Hit per counted
// descriptor, in descriptor order. It records in sc.idx, per Status, the
// index of its hit (-1 when not counted) and returns the hits (sc.hits).
func plan(d *Decision, req *Request, sc *scratch) []limiter.Hit {
	hits := sc.hits[:0]
	sc.idx = grow(sc.idx, len(d.Statuses))
	for i := range d.Statuses {
		st := &d.Statuses[i]
		sc.idx[i] = -1
		if st.Limit == nil {
			continue
		}
		rd := &req.Descriptors[i]
		sc.idx[i] = len(hits)
		hits = append(hits, limiter.Hit{
			Key:    counterKey(d.Domain.Name, rd.Entries, st.Rule, st.Override),
			Limit:  storeLimit(st.Limit),
			Hits:   hitsAddend(req, rd),
			Refund: rd.IsNegativeHits,
			Shadow: st.Shadow,
			Quota:  st.Quota,
		})
	}
	return hits
}

// storeLimit is the limiter.Limit that counts l: its rate, window and
// algorithm.
func storeLimit(l *descriptors.Limit) limiter.Limit {
	return limiter.Limit{Requests: uint64(l.RequestsPerUnit), Window: l.Window(), Algorithm: l.Algorithm}
}

// hitsAddend follows RateLimitDescriptor.hits_addend and
// RateLimitRequest.hits_addend: the descriptor's own value wins, even 0
// (check only); otherwise the request's, where 0 means 1.
func hitsAddend(req *Request, d *Descriptor) uint64 {
	if d.HasHitsAddend {
		return d.HitsAddend
	}
	if req.HitsAddend > 0 {
		return req.HitsAddend
	}
	return 1
}
