package ratelimit

import (
	"go.uber.org/zap"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// result is the last stage of Decide: it copies each counted descriptor's
// Result into its Status, sets the codes, RetryAfter and ExceedsLimit,
// records metrics and debug lines, and picks the binding limit. idx maps
// each Status to its hit (-1 when not counted).
func (s *Service) result(d *Decision, req *Request, idx []int, hits []limiter.Hit, results []limiter.Result) {
	for i := range d.Statuses {
		h := idx[i]
		if h < 0 {
			continue
		}
		st := &d.Statuses[i]
		st.Hits, st.Refund = hits[h].Hits, hits[h].Refund
		for j := range st.Limits {
			r := results[h+j]
			if r.ExceedsLimit {
				// No wait admits these hits, and the store says so with a
				// RetryAfter of one window; report the same wait as the
				// reset (duration_until_reset, RateLimit t) so that every
				// number the client sees says "nothing for one window",
				// never "full again now" beside "retry in 60 s".
				r.ResetAfter = max(r.ResetAfter, r.RetryAfter)
			}
			st.Limits[j].Result = r
			if r.OverLimit {
				st.Code, d.Code = OverLimit, OverLimit
				d.RetryAfter = max(d.RetryAfter, r.RetryAfter)
				// More hits than the limit allows in a whole window: no
				// wait admits them; front ends say so (Retry-After is one
				// window).
				d.ExceedsLimit = d.ExceedsLimit || r.ExceedsLimit
			}
		}
		st.Binding = limitBinding(st.Limits)
		b := &st.Limits[st.Binding]
		st.Limit, st.Name, st.Result = b.Limit, b.Name, b.Result
		r := st.Result
		entries, _ := descriptorEntries(&req.Descriptors[i])
		for _, o := range s.observers {
			o.ObserveDescriptor(d.Domain, st, entries)
		}
		if ce := s.log.Check(zap.DebugLevel, "descriptor decided"); ce != nil {
			ce.Write(zap.String("domain", d.Domain.Name), zap.Int("descriptor", i), zap.String("limit_name", st.Name),
				zap.Bool("allowed", r.Allowed), zap.Bool("over_limit", r.OverLimit), zap.Bool("exceeds_limit", r.ExceedsLimit),
				zap.Uint64("limit_remaining", r.Remaining), zap.Bool("shadow_mode", st.Shadow),
				zap.Uint64("hits_addend", st.Hits), zap.Uint64("requests_per_unit", uint64(st.Limit.CeilingRequests())))
		}
	}
	d.Binding = binding(d)
}

// limitBinding returns the index of the binding limit among one
// descriptor's: the OverLimit one with the longest RetryAfter, else the one
// with the least Remaining (the first on a tie).
func limitBinding(ls []LimitStatus) int {
	b := 0
	for j := 1; j < len(ls); j++ {
		r, c := &ls[j].Result, &ls[b].Result
		switch {
		case r.OverLimit != c.OverLimit:
			if r.OverLimit {
				b = j
			}
		case r.OverLimit:
			if r.RetryAfter > c.RetryAfter {
				b = j
			}
		case r.Remaining < c.Remaining:
			b = j
		}
	}
	return b
}

// binding returns the index of the Status whose limit response headers
// report: on OverLimit the denying limit with the longest RetryAfter, else
// the counted limit with the least remaining; shadow-mode limits never.
// -1 when no Status qualifies.
func binding(d *Decision) int {
	b := -1
	for i := range d.Statuses {
		st := &d.Statuses[i]
		if !st.Counted() || st.Shadow {
			continue
		}
		if b < 0 {
			b = i
			continue
		}
		c := &d.Statuses[b]
		if d.Code == OverLimit {
			if st.Code == OverLimit && (c.Code != OverLimit || st.Result.RetryAfter > c.Result.RetryAfter) {
				b = i
			}
		} else if st.Result.Remaining < c.Result.Remaining {
			b = i
		}
	}
	return b
}
