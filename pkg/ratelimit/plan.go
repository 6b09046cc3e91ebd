package ratelimit

import (
	"slices"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// plan is the second stage of Decide: one limiter.Hit per limit of each
// counted descriptor, in descriptor and then config order; the limits of
// one descriptor share its key and hits, and the store tells their counters
// apart by window and algorithm. It records in sc.idx, per Status, the index
// of its first hit (-1 when not counted; the others follow it) and returns
// the hits (sc.hits).
func plan(d *Decision, req *Request, sc *scratch, overdrawDefault bool) []limiter.Hit {
	hits := sc.hits[:0]
	sc.idx = slices.Grow(sc.idx[:0], len(d.Statuses))[:len(d.Statuses)]
	for i := range d.Statuses {
		st := &d.Statuses[i]
		sc.idx[i] = -1
		if st.Limit == nil {
			continue
		}
		rd := &req.Descriptors[i]
		sc.idx[i] = len(hits)
		h := limiter.Hit{
			Key:    counterKey(d.Domain.Name, rd.Entries, st.Rule, st.Override),
			Hits:   hitsAddend(req, rd),
			Refund: rd.IsNegativeHits,
			Shadow: st.Shadow,
			Quota:  st.Quota,
		}
		for _, ls := range st.Limits {
			h.Limit = ls.Limit.Store()
			h.Limit.Overdraw = overdraw(ls.Limit, overdrawDefault)
			hits = append(hits, h)
		}
	}
	return hits
}

// overdraw is l's overdraw: its config's, else the service's default for
// the algorithms that can overdraw (limiter.Traits.Overdraw).
func overdraw(l *descriptors.Limit, def bool) bool {
	if l.Overdraw != nil {
		return *l.Overdraw
	}
	return def && l.Algorithm.Traits().Overdraw
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
