package main

import (
	"errors"
	"fmt"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/sluicehq/sluice/pkg/descriptors"
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
		for _, key := range d.WithoutXDS() {
			errs = append(errs, fmt.Errorf("%s: %s: %s", d.File, key, noField))
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
		for _, f := range r.WithoutXDS() {
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
