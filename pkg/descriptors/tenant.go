package descriptors

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// TenantRow is one row of a tenant table (tenants_from): the plan its value
// is on, or limits of its own. Its text is the plan's name ("pro"), or one
// or more limits separated by commas, each N/unit with an optional whole
// multiplier before the unit ("50000/minute", "300/30second,1000000/month").
// A TenantRow is immutable once parsed and safe for concurrent use.
type TenantRow struct {
	// Plan is the plan's name; "" when the row gives Limits.
	Plan string
	// Limits are the row's own limits, in the order written; nil when the
	// row names a Plan.
	Limits []RowLimit

	built atomic.Pointer[rowLimits] // the limits last built, for one rule
}

// RowLimit is one limit of a TenantRow: RequestsPerUnit hits per
// UnitMultiplier units.
type RowLimit struct {
	RequestsPerUnit uint32
	Unit            Unit
	UnitMultiplier  uint32
}

// Window is the limit's window: Unit times UnitMultiplier.
func (l RowLimit) Window() time.Duration {
	return l.Unit.Duration() * time.Duration(max(l.UnitMultiplier, 1))
}

// rowLimits are the limits a row counts at rule.
type rowLimits struct {
	rule      *Rule
	limits    []*Limit
	unlimited bool
}

// ParseTenantRow parses a row's text. The error names what is wrong: an
// empty row, a limit without a unit, an unknown unit, a count that is not a
// whole number, a window longer than MaxWindow, two limits with one window.
func ParseTenantRow(s string) (*TenantRow, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty row (want a plan's name, or limits like 100/minute)")
	}
	if planName.MatchString(s) {
		return &TenantRow{Plan: s}, nil
	}
	t := &TenantRow{}
	seen := make(map[time.Duration]bool)
	for _, part := range strings.Split(s, ",") {
		l, err := parseRowLimit(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		if seen[l.Window()] {
			return nil, fmt.Errorf("limit %s: a second limit with window %v (one counter each, so combine them)", quote(part), l.Window())
		}
		seen[l.Window()] = true
		t.Limits = append(t.Limits, l)
	}
	return t, nil
}

func parseRowLimit(s string) (RowLimit, error) {
	n, per, ok := strings.Cut(s, "/")
	if !ok || per == "" {
		return RowLimit{}, fmt.Errorf("limit %s has no unit (want N/unit, like 100/minute, or a plan's name)", quote(s))
	}
	rpu, err := strconv.ParseUint(n, 10, 32)
	if err != nil {
		return RowLimit{}, fmt.Errorf("limit %s: requests %s is not a whole number from 0 to 4294967295", quote(s), quote(n))
	}
	i := strings.IndexFunc(per, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		return RowLimit{}, fmt.Errorf("limit %s has no unit (want N/unit, like 100/minute)", quote(s))
	}
	l := RowLimit{RequestsPerUnit: uint32(rpu), UnitMultiplier: 1}
	if i > 0 {
		m, err := strconv.ParseUint(per[:i], 10, 32)
		if err != nil || m == 0 {
			return RowLimit{}, fmt.Errorf("limit %s: multiplier %s is not a whole number from 1", quote(s), quote(per[:i]))
		}
		l.UnitMultiplier = uint32(m)
	}
	if l.Unit, ok = ParseUnit(per[i:]); !ok {
		return RowLimit{}, fmt.Errorf("limit %s: unknown unit %s (want %s)", quote(s), quote(per[i:]), unitChoices)
	}
	if time.Duration(l.UnitMultiplier) > MaxWindow/l.Unit.Duration() {
		return RowLimit{}, fmt.Errorf("limit %s: the window is longer than the longest, %v", quote(s), MaxWindow)
	}
	return l, nil
}

// String is the row's text as ParseTenantRow reads it.
func (t *TenantRow) String() string {
	if t.Plan != "" {
		return t.Plan
	}
	parts := make([]string, len(t.Limits))
	for i, l := range t.Limits {
		m := ""
		if l.UnitMultiplier > 1 {
			m = strconv.FormatUint(uint64(l.UnitMultiplier), 10)
		}
		parts[i] = fmt.Sprintf("%d/%s%s", l.RequestsPerUnit, m, l.Unit)
	}
	return strings.Join(parts, ",")
}

// CheckTenantRow returns an error when r cannot count t as written: t
// names a plan r lacks (the error names it and r's plans).
func (r *Rule) CheckTenantRow(t *TenantRow) error {
	if t.Plan == "" || r.Plan(t.Plan) != nil {
		return nil
	}
	names := make([]string, len(r.Plans))
	for i, p := range r.Plans {
		names[i] = p.Name
	}
	if len(names) == 0 {
		return fmt.Errorf("unknown plan %s (the rule at %s:%d has no plans)", quote(t.Plan), r.File, r.Line)
	}
	return fmt.Errorf("unknown plan %s (want %s)", quote(t.Plan), choices(names))
}

// TenantLimits returns what a value whose row is t counts at r, a rule
// with tenants_from: its plan's limits, or its own limits counted by the
// algorithm of r's first limit; r's own Limits (the default plan) when t is
// nil, names a plan r no longer has, or gives limits that algorithm cannot
// count. unlimited reports an unlimited plan (or default). The slices
// returned are shared and must not be modified; building them happens
// once per row and rule.
func (r *Rule) TenantLimits(t *TenantRow) (limits []*Limit, unlimited bool) {
	if t == nil {
		return r.Limits, r.Unlimited
	}
	if b := t.built.Load(); b != nil && b.rule == r {
		return b.limits, b.unlimited
	}
	b := &rowLimits{rule: r, limits: r.Limits, unlimited: r.Unlimited}
	if t.Plan != "" {
		if p := r.Plan(t.Plan); p != nil {
			b.limits, b.unlimited = p.Limits, p.Unlimited
		}
	} else if own, ok := r.ownLimits(t.Limits); ok {
		b.limits, b.unlimited = own, false
	}
	t.built.Store(b)
	return b.limits, b.unlimited
}

// ownLimits builds a row's own limits with the algorithm of r's first
// limit (sliding_window without one). ok is false when that algorithm
// cannot count one of them.
func (r *Rule) ownLimits(rows []RowLimit) ([]*Limit, bool) {
	var alg limiter.Algorithm
	if r.Limit != nil {
		alg = r.Limit.Algorithm
	}
	out := make([]*Limit, len(rows))
	for i, rl := range rows {
		l := &Limit{RequestsPerUnit: rl.RequestsPerUnit, Unit: rl.Unit, UnitMultiplier: max(rl.UnitMultiplier, 1), Algorithm: alg}
		if alg.Traits().SubWindows {
			l.SubWindows = limiter.DefaultSubWindows
			if l.Window().Milliseconds()%int64(l.SubWindows) != 0 {
				l.SubWindows = 1
			}
		}
		if l.Store().Validate() != nil {
			return nil, false
		}
		out[i] = l
	}
	return out, true
}
