package main

import (
	"errors"
	"fmt"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// resources converts every domain of cfg into a RateLimitConfig named
// after the domain, in domain order. A rule using a Sluice addition that
// the proto cannot carry is an error ("file:line:col: rule: ..."); every
// such rule is reported, joined.
func resources(cfg *descriptors.Config) ([]*rlsconfv3.RateLimitConfig, error) {
	var (
		out  []*rlsconfv3.RateLimitConfig
		errs []error
	)
	for _, d := range cfg.Domains() {
		if d.FailureMode != descriptors.FailureModeUnset {
			errs = append(errs, fmt.Errorf("%s: failure_mode: %s", d.File, noField))
		}
		ds, derrs := rules(d.Rules)
		errs = append(errs, derrs...)
		out = append(out, &rlsconfv3.RateLimitConfig{Name: d.Name, Domain: d.Name, Descriptors: ds})
	}
	return out, errors.Join(errs...)
}

// noField ends the error of a field the proto lacks.
const noField = "a Sluice addition that the RateLimitConfig proto has no field for, so Envoy Gateway cannot send it; remove it to try this config over xDS"

// rules converts a list of rules and their children.
func rules(rs []*descriptors.Rule) ([]*rlsconfv3.RateLimitDescriptor, []error) {
	var (
		out  []*rlsconfv3.RateLimitDescriptor
		errs []error
	)
	for _, r := range rs {
		d := &rlsconfv3.RateLimitDescriptor{Key: r.Key, Value: r.Value, ShadowMode: r.ShadowMode, DetailedMetric: r.DetailedMetric}
		for _, f := range additions(r) {
			errs = append(errs, fmt.Errorf("%s:%d:%d: %s: %s: %s", r.File, r.Line, r.Column, r.FullKey, f, noField))
		}
		switch {
		case r.Unlimited:
			d.RateLimit = &rlsconfv3.RateLimitPolicy{Unlimited: true}
		case r.Limit != nil:
			p, err := policy(r.Limit)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s:%d:%d: %s: %w", r.File, r.Line, r.Column, r.FullKey, err))
			}
			d.RateLimit = p
		}
		children, cerrs := rules(r.Children)
		d.Descriptors, errs = children, append(errs, cerrs...)
		out = append(out, d)
	}
	return out, errs
}

// policy converts a rule's limit.
func policy(l *descriptors.Limit) (*rlsconfv3.RateLimitPolicy, error) {
	unit, ok := rlsconfv3.RateLimitUnit_value[strings.ToUpper(l.Unit.String())]
	if !ok {
		return nil, fmt.Errorf("unit %s: the RateLimitConfig proto has no such unit", l.Unit)
	}
	p := &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit(unit), RequestsPerUnit: l.RequestsPerUnit, Name: l.Name}
	for _, n := range l.Replaces {
		p.Replaces = append(p.Replaces, &rlsconfv3.RateLimitReplace{Name: n})
	}
	return p, nil
}

// additions lists the Sluice additions r uses, by their YAML keys.
func additions(r *descriptors.Rule) []string {
	var out []string
	add := func(set bool, key string) {
		if set {
			out = append(out, key)
		}
	}
	add(len(r.Limits) > 1, "rate_limits")
	if l := r.Limit; l != nil {
		add(l.UnitMultiplier > 1, "rate_limit.unit_multiplier")
		add(l.Algorithm != limiter.SlidingWindow, "rate_limit.algorithm")
		add(l.Burst != 0, "rate_limit.burst")
		add(l.SubWindows != 0 && l.SubWindows != limiter.DefaultSubWindows, "rate_limit.sub_windows")
		add(l.Overdraw != nil, "rate_limit.overdraw")
	}
	add(r.QuotaMode, "quota_mode")
	add(r.ValueToMetric, "value_to_metric")
	add(r.ShareThreshold, "share_threshold")
	add(r.Metadata != nil, "metadata")
	add(r.Pool != nil, "classes")
	return out
}
