package ratelimit

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// resolve is the first stage of Decide: it sets every Status's Rule and the
// limit it counts (Limit, Name, Override, Shadow, Quota), then drops the
// limits that another matched limit replaces. It returns an error wrapping
// ErrInvalidRequest for an override that cannot be honoured.
func resolve(d *Decision, req *Request) error {
	var replaced map[string]struct{}
	for i := range req.Descriptors {
		rd, st := &req.Descriptors[i], &d.Statuses[i]
		st.Rule = d.Config.Match(d.Domain.Name, rd.Entries)
		switch r := st.Rule; {
		case rd.Override != nil:
			l, err := overrideLimit(rd.Override)
			if err != nil {
				return fmt.Errorf("%w: descriptors[%d].limit.%w", ErrInvalidRequest, i, err)
			}
			st.Limit, st.Name, st.Override = l, overrideName(l), true
		case r != nil && r.Limit != nil && !r.Unlimited:
			st.Limit, st.Name = r.Limit, limitName(d.Domain.Name, r)
			st.Shadow, st.Quota = r.ShadowMode, r.QuotaMode
			for _, name := range r.Limit.Replaces {
				if replaced == nil {
					replaced = make(map[string]struct{})
				}
				replaced[name] = struct{}{}
			}
		}
	}
	if replaced == nil {
		return nil
	}
	for i := range d.Statuses {
		st := &d.Statuses[i]
		if st.Limit == nil || st.Override || st.Limit.Name == "" {
			continue
		}
		if _, ok := replaced[st.Limit.Name]; ok {
			st.Limit, st.Name, st.Shadow, st.Quota = nil, "", false, false
		}
	}
	return nil
}

// overrideLimit turns a descriptor's limit override into a Limit, or returns
// an error naming the override's field (unit or unit_multiplier) when its
// window is not usable.
func overrideLimit(o *Override) (*descriptors.Limit, error) {
	u := o.Unit.Duration()
	if u == 0 {
		return nil, fmt.Errorf("unit: unit %v cannot be used (want SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR)", o.Unit)
	}
	m := max(o.UnitMultiplier, 1)
	if time.Duration(m) > descriptors.MaxWindow/u {
		return nil, fmt.Errorf("unit_multiplier: %d x %s is longer than the longest window, %v", m, o.Unit, descriptors.MaxWindow)
	}
	return &descriptors.Limit{RequestsPerUnit: o.RequestsPerUnit, Unit: o.Unit, UnitMultiplier: m}, nil
}

// limitName is the name a configured limit shows in headers: its name, else
// the rule's FullKey without the domain (stable across reloads).
func limitName(domain string, r *descriptors.Rule) string {
	if r.Limit.Name != "" {
		return r.Limit.Name
	}
	return strings.TrimPrefix(r.FullKey, domain+".")
}

// overrideName names a descriptor limit override: "override_10_per_minute",
// "override_10_per_5_minute".
func overrideName(l *descriptors.Limit) string {
	if l.UnitMultiplier > 1 {
		return fmt.Sprintf("override_%d_per_%d_%s", l.RequestsPerUnit, l.UnitMultiplier, l.Unit)
	}
	return fmt.Sprintf("override_%d_per_%s", l.RequestsPerUnit, l.Unit)
}
