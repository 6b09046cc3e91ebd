package ratelimit

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// resolve is the first stage of Decide: it sets every Status's Rule and the
// limit it counts (Limit, Name, Override, Shadow, Quota), then drops the
// limits that another matched limit replaces. It returns an error wrapping
// ErrInvalidRequest for an override that cannot be honoured. A rule with
// tenants_from counts what t gives the descriptor's last entry value.
func resolve(ctx context.Context, d *Decision, req *Request, t Tenants) error {
	var replaced map[string]struct{}
	ls := limitStatuses(ctx, d, req, t)
	for i := range req.Descriptors {
		rd, st := &req.Descriptors[i], &d.Statuses[i]
		switch r := st.Rule; {
		case rd.Override != nil:
			l, err := overrideLimit(rd.Override, r)
			if err != nil {
				return fmt.Errorf("%w: descriptors[%d].limit.%w", ErrInvalidRequest, i, err)
			}
			st.Limits, ls = ls[:1:1], ls[1:]
			st.Limits[0] = LimitStatus{Limit: l, Name: overrideName(l)}
			st.Override = true
		case len(st.ruleLimits) > 0:
			n := len(st.ruleLimits)
			st.Limits, ls = ls[:n:n], ls[n:]
			for j, l := range st.ruleLimits {
				st.Limits[j] = LimitStatus{Limit: l, Name: r.LimitNameAmong(d.Domain.Name, l, st.ruleLimits)}
				for _, name := range l.Replaces {
					if replaced == nil {
						replaced = make(map[string]struct{})
					}
					replaced[name] = struct{}{}
				}
			}
			st.Shadow, st.Quota = r.ShadowMode, r.QuotaMode
		}
	}
	for i := range d.Statuses {
		st := &d.Statuses[i]
		if replaced != nil && !st.Override {
			st.Limits = slices.DeleteFunc(st.Limits, func(ls LimitStatus) bool {
				_, ok := replaced[ls.Limit.Name]
				return ok && ls.Limit.Name != ""
			})
		}
		if len(st.Limits) == 0 {
			st.Limits, st.Shadow, st.Quota = nil, false, false
			continue
		}
		st.Limit, st.Name = st.Limits[0].Limit, st.Limits[0].Name
	}
	return nil
}

// limitStatuses matches every descriptor's rule and returns one slice with
// room for the LimitStatus of every limit the descriptors may count, so
// that a request allocates them at once (none when req.LimitBuffer has the
// room).
func limitStatuses(ctx context.Context, d *Decision, req *Request, t Tenants) []LimitStatus {
	n := 0
	for i := range req.Descriptors {
		rd, st := &req.Descriptors[i], &d.Statuses[i]
		entries, _ := descriptorEntries(rd)
		st.Rule = d.Config.Match(d.Domain.Name, entries)
		st.ruleLimits = ruleLimits(ctx, st.Rule, entries, t)
		if rd.Override != nil {
			n++
		} else {
			n += len(st.ruleLimits)
		}
	}
	if n == 0 {
		return nil
	}
	if cap(req.LimitBuffer) >= n {
		ls := req.LimitBuffer[:n]
		clear(ls)
		return ls
	}
	return make([]LimitStatus, n)
}

// ruleLimits returns the limits that a descriptor with these entries counts
// at r, the rule it matched: r's own, or for a rule with tenants_from what
// the table gives the last entry's value (the entry r matched); nil when
// nothing is counted (no rule, no limit, unlimited).
func ruleLimits(ctx context.Context, r *descriptors.Rule, entries []descriptors.Entry, t Tenants) []*descriptors.Limit {
	if r == nil {
		return nil
	}
	limits, unlimited := r.Limits, r.Unlimited
	if r.TenantsFrom != "" && t != nil && len(entries) > 0 {
		limits, unlimited = r.TenantLimits(t.Tenant(ctx, r.TenantsFrom, entries[len(entries)-1].Value))
	}
	if unlimited {
		return nil
	}
	return limits
}

// overrideLimit turns a descriptor's limit override into a Limit, or returns
// an error naming the override's field (unit or unit_multiplier, or
// requests_per_unit when the rule's algorithm cannot count it) when it is
// not usable. The override replaces requests_per_unit and the window; the
// matched rule's algorithm and burst stay (those of its first limit, for
// rate_limits), and so do its sub_windows when they divide the override's
// window (else limiter.DefaultSubWindows, which divides every whole second).
// Without a rule, the default algorithm counts it.
func overrideLimit(o *Override, r *descriptors.Rule) (*descriptors.Limit, error) {
	u := o.Unit.Duration()
	if u == 0 {
		return nil, fmt.Errorf("unit: unit %v cannot be used (want SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR)", o.Unit)
	}
	m := max(o.UnitMultiplier, 1)
	if time.Duration(m) > descriptors.MaxWindow/u {
		return nil, fmt.Errorf("unit_multiplier: %d x %s is longer than the longest window, %v", m, o.Unit, descriptors.MaxWindow)
	}
	l := &descriptors.Limit{RequestsPerUnit: o.RequestsPerUnit, Unit: o.Unit, UnitMultiplier: m, SubWindows: limiter.DefaultSubWindows}
	if r != nil && r.Limit != nil {
		l.Algorithm, l.Burst, l.SubWindows, l.Overdraw = r.Limit.Algorithm, r.Limit.Burst, r.Limit.SubWindows, r.Limit.Overdraw
		l.Cache = r.Limit.Cache
		if n := int64(l.SubWindows); n > 1 && l.Window().Milliseconds()%n != 0 {
			l.SubWindows = limiter.DefaultSubWindows
		}
	}
	if err := l.Store().Validate(); err != nil {
		return nil, fmt.Errorf("requests_per_unit: %d per %v cannot be counted by the rule's algorithm %s: %w",
			o.RequestsPerUnit, l.Window(), l.Algorithm, err)
	}
	return l, nil
}

// overrideName names a descriptor limit override: "override_10_per_minute",
// "override_10_per_5_minute".
func overrideName(l *descriptors.Limit) string {
	if l.UnitMultiplier > 1 {
		return fmt.Sprintf("override_%d_per_%d_%s", l.RequestsPerUnit, l.UnitMultiplier, l.Unit)
	}
	return fmt.Sprintf("override_%d_per_%s", l.RequestsPerUnit, l.Unit)
}
