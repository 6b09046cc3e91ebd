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
// of its first hit (-1 when not counted; the others follow it), gives the
// hits of concurrency limits their slot tokens (sc.acquired: the request's
// own, when it acquires a slot) and returns the hits (sc.hits).
func plan(d *Decision, req *Request, sc *scratch, c counting) []limiter.Hit {
	hits := sc.hits[:0]
	sc.idx = slices.Grow(sc.idx[:0], len(d.Statuses))[:len(d.Statuses)]
	for i := range d.Statuses {
		st := &d.Statuses[i]
		sc.idx[i] = -1
		if st.Limit == nil {
			continue
		}
		rd := &req.Descriptors[i]
		entries, token := descriptorEntries(rd)
		sc.idx[i] = len(hits)
		h := limiter.Hit{
			Key:       counterKey(d.Domain.Name, entries, st.Rule, st.Override),
			Hits:      hitsAddend(req, rd),
			Refund:    rd.IsNegativeHits,
			Shadow:    st.Shadow,
			Quota:     st.Quota,
			SlotToken: token,
		}
		for _, ls := range st.Limits {
			h.Limit = ls.Limit.Store()
			h.Limit.Overdraw, h.Limit.CountDenied = c.of(ls.Limit)
			h.Limit.Cache = c.cached(d.Domain, ls.Limit)
			hits = append(hits, h)
		}
	}
	sc.acquired = slotTokens(hits)
	return hits
}

// counting is how the service counts a limit whose config does not say
// (Options.Overdraw, Options.CountDenied).
type counting struct {
	overdraw, countDenied, cache bool
}

// cached returns whether l, a limit of dom, is decided by the limiter
// cache: its own cache, else the domain's, else the service's
// (Options.Cache); never for an algorithm that counts requests in flight,
// a pool's class nor a penalty, which only the store decides exactly.
func (c counting) cached(dom *descriptors.Domain, l *descriptors.Limit) bool {
	if l.Algorithm.Traits().InFlight || l.Ceiling != 0 || l.Penalty.On() {
		return false
	}
	switch {
	case l.Cache != nil:
		return *l.Cache
	case dom.Cache != nil:
		return *dom.Cache
	}
	return c.cache
}

// of returns l's Overdraw and CountDenied: a limit with its own overdraw
// counts by it (overdraw, or all or nothing); the others overdraw by
// default, else count denied hits by default, each where the algorithm can
// (limiter.Traits). A pool's class (a ceiling) does neither, whatever the
// default: a shed request consumes nothing, and the config refuses a class
// that overdraws.
func (c counting) of(l *descriptors.Limit) (overdraw, countDenied bool) {
	t := l.Algorithm.Traits()
	switch {
	case l.Overdraw != nil:
		return *l.Overdraw, false
	case l.Ceiling != 0:
		return false, false
	case c.overdraw && t.Overdraw:
		return true, false
	}
	return false, c.countDenied && t.CountDenied
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
