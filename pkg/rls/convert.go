package rls

import (
	"slices"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// converter is the working memory that converts one RateLimitRequest into a
// ratelimit.Request, pooled so that a call allocates none of it.
type converter struct {
	req       ratelimit.Request
	descs     []ratelimit.Descriptor
	entries   []descriptors.Entry
	overrides []ratelimit.Override
	statuses  []ratelimit.Status      // the Decision's statuses (Request.StatusBuffer)
	limits    []ratelimit.LimitStatus // their limits (Request.LimitBuffer)
}

// limitsPerDescriptor is the room for limits the converter gives each
// descriptor: a rule's rate_limits may count more, which Decide then
// allocates.
const limitsPerDescriptor = 2

// convert fills r from a validated RateLimitRequest and returns it. The
// Request shares r's memory and the proto's strings: it is valid until reset.
func (r *converter) convert(in *rlsv3.RateLimitRequest) *ratelimit.Request {
	ds := in.GetDescriptors()
	n, no := 0, 0
	for _, d := range ds {
		n += len(d.GetEntries())
		if d.GetLimit() != nil {
			no++
		}
	}
	r.descs = slices.Grow(r.descs[:0], len(ds))[:len(ds)]
	clear(r.descs)
	r.entries = slices.Grow(r.entries[:0], n)
	r.overrides = slices.Grow(r.overrides[:0], no) // never reallocated below: Override pointers stay valid
	for i, d := range ds {
		start := len(r.entries)
		for _, e := range d.GetEntries() {
			r.entries = append(r.entries, descriptors.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		rd := &r.descs[i]
		rd.Entries = r.entries[start:len(r.entries):len(r.entries)]
		rd.IsNegativeHits = d.GetIsNegativeHits()
		if h := d.GetHitsAddend(); h != nil {
			rd.HitsAddend, rd.HasHitsAddend = h.GetValue(), true
		}
		if o := d.GetLimit(); o != nil {
			r.overrides = append(r.overrides, ratelimit.Override{
				RequestsPerUnit: o.GetRequestsPerUnit(),
				Unit:            descriptors.Unit(o.GetUnit()),
				UnitMultiplier:  o.GetUnitMultiplier().GetValue(),
			})
			rd.Override = &r.overrides[len(r.overrides)-1]
		}
	}
	r.statuses = slices.Grow(r.statuses[:0], len(ds))
	r.limits = slices.Grow(r.limits[:0], limitsPerDescriptor*len(ds))
	r.req = ratelimit.Request{Domain: in.GetDomain(), Descriptors: r.descs, HitsAddend: uint64(in.GetHitsAddend()),
		StatusBuffer: r.statuses, LimitBuffer: r.limits}
	return &r.req
}

// reset drops r's references to the request's strings and the decision's
// statuses, so that the pool does not keep them alive.
func (r *converter) reset() {
	clear(r.entries)
	clear(r.descs)
	clear(r.statuses[:cap(r.statuses)])
	clear(r.limits[:cap(r.limits)])
	r.req = ratelimit.Request{}
}
