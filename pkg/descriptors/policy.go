package descriptors

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// This file holds what reaches a config's rules from outside its source:
// process-wide defaults and a policy overlay. A RateLimitConfig served over
// xDS has no field for Sluice's additions, so a Policy sets them on the
// Documents any source gives, before the one builder builds them: every
// rule of the format is checked as if the source had written the field,
// and an error names the overlay's file and line (or the setting) that set
// it.

// Change is what one overlay entry or setting set on a domain or a rule,
// for /config.
type Change struct {
	// By is where the value came from: "overlay.yaml:12" (the entry that
	// selected the rule), or a setting ("--algorithm").
	By string
	// Keys are the keys set, by their Path ("rate_limit.algorithm",
	// "classes", "failure_mode").
	Keys []string
}

// Defaults are process-wide values for the limits that set none of their
// own. Each is a Field whose Pos.File names the setting that gave it
// ("--algorithm"), so that an error about it names the setting; an absent
// Field leaves the format's default.
type Defaults struct {
	// Algorithm is the algorithm of every rate_limit (and item of
	// rate_limits) that sets none.
	Algorithm Field[string]
	// SubWindows is the sub_windows of every limit whose algorithm has
	// sub-windows and that sets none.
	SubWindows Field[uint32]
	// BurstPercent is the burst of every token bucket that sets none, in
	// percent of its requests_per_unit (rounded up, at least 1); 100 is the
	// format's default.
	BurstPercent Field[uint32]
}

// zero reports whether d sets nothing.
func (d Defaults) zero() bool {
	return d.Algorithm.State == FieldAbsent && d.SubWindows.State == FieldAbsent && d.BurstPercent.State == FieldAbsent
}

// Policy is what a Build applies to a source's Documents: the overlay's
// entries first, then the defaults for what is still unset. The zero
// Policy changes nothing. A Policy is immutable and safe for concurrent
// use.
type Policy struct {
	Defaults Defaults
	// Overlay is the policy overlay, nil for none.
	Overlay *Overlay
}

// Zero reports whether p changes nothing.
func (p *Policy) Zero() bool {
	return p == nil || p.Overlay == nil && p.Defaults.zero()
}

// Build builds docs as Build does, with p applied: the Config, whose
// rules' and domains' Changes say what p set, or nil and every error. A
// selector of the overlay that matches nothing is a warning; a field set
// on a rule that cannot take it is an error at the overlay's line (or
// naming the setting). docs are not modified.
func (p *Policy) Build(docs ...*Document) (*Config, error) {
	if p.Zero() {
		return Build(docs...)
	}
	out := make([]*Document, len(docs))
	for i, d := range docs {
		out[i] = cloneDocument(d)
	}
	var r report
	if p.Overlay != nil {
		p.Overlay.apply(out, &r)
	}
	for _, d := range out {
		if d != nil {
			p.Defaults.apply(d)
		}
	}
	cfg, err := build(out, r.errs)
	if err != nil {
		return nil, err
	}
	cfg.sources = docs
	cfg.Warnings = append(cfg.Warnings, asErrors(sortErrors(r.warns))...)
	return cfg, nil
}

// Rebuild builds the Documents c was built from with p applied, keeping
// c's warnings that the new build lacks (a source's own, such as an xDS
// field the proto does not know). c is a Config as its source built it,
// with no Policy.
func (p *Policy) Rebuild(c *Config) (*Config, error) {
	if c == nil {
		return nil, errors.New("no config to apply the policy to")
	}
	out, err := p.Build(c.sources...)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool)
	for _, w := range out.Warnings {
		seen[w.Error()] = true
	}
	for _, w := range c.Warnings {
		if !seen[w.Error()] {
			out.Warnings = append(out.Warnings, w)
		}
	}
	return out, nil
}

// Lean returns c without the Documents it was built from, which only
// Policy.Rebuild reads: for a caller that applies no policy, so that a
// large config's source tree is not kept in memory beside it. c is
// unchanged.
func (c *Config) Lean() *Config {
	if c == nil || c.sources == nil {
		return c
	}
	l := *c
	l.sources = nil
	// Its own version (the same), so that nothing of l refers to c.
	l.version = sync.OnceValue(l.fingerprint)
	return &l
}

// apply sets d's defaults on every limit of doc that sets none.
func (d Defaults) apply(doc *Document) {
	walkNodes(doc.Descriptors, func(n *Node) {
		var keys []string
		by := ""
		for _, rl := range limitsOf(n) {
			if u := rl.Unlimited; u.State == FieldSet && u.Value {
				continue
			}
			for _, k := range d.set(rl) {
				if !slices.Contains(keys, k.key) {
					keys = append(keys, k.key)
				}
				by = joinBy(by, k.by)
			}
		}
		if len(keys) > 0 {
			n.Changes = append(n.Changes, Change{By: by, Keys: keys})
		}
	})
}

// joinBy adds setting to the list by ("--algorithm, --sub-windows").
func joinBy(by, setting string) string {
	switch {
	case by == "":
		return setting
	case slices.Contains(strings.Split(by, ", "), setting):
		return by
	}
	return by + ", " + setting
}

type setKey struct{ key, by string }

// set fills rl's unset algorithm, sub_windows and burst from d, and
// returns the keys it set with the settings that gave them.
func (d Defaults) set(rl *RateLimitNode) []setKey {
	var out []setKey
	if rl.Algorithm.State == FieldAbsent && d.Algorithm.State == FieldSet {
		rl.Algorithm = d.Algorithm
		out = append(out, setKey{"rate_limit.algorithm", d.Algorithm.Pos.File})
	}
	alg := limiter.Algorithm(0)
	if rl.Algorithm.State == FieldSet {
		a, ok := limiter.ParseAlgorithm(rl.Algorithm.Value)
		if !ok {
			return out // the builder reports it
		}
		alg = a
	}
	if rl.SubWindows.State == FieldAbsent && d.SubWindows.State == FieldSet && alg.Traits().SubWindows {
		rl.SubWindows = d.SubWindows
		out = append(out, setKey{"rate_limit.sub_windows", d.SubWindows.Pos.File})
	}
	rpu := rl.RequestsPerUnit
	if rl.Burst.State == FieldAbsent && d.BurstPercent.State == FieldSet && alg.Traits().Burst &&
		rpu.State == FieldSet && rpu.Value > 0 {
		burst := (uint64(rpu.Value)*uint64(d.BurstPercent.Value) + 99) / 100
		rl.Burst = d.BurstPercent
		rl.Burst.Value = uint32(min(max(burst, 1), uint64(^uint32(0))))
		out = append(out, setKey{"rate_limit.burst", d.BurstPercent.Pos.File})
	}
	return out
}

// limitsOf is n's rate_limit, or every item of its rate_limits.
func limitsOf(n *Node) []*RateLimitNode {
	if n.RateLimit != nil {
		return []*RateLimitNode{n.RateLimit}
	}
	var out []*RateLimitNode
	for _, rl := range n.RateLimits.Value {
		if rl != nil {
			out = append(out, rl)
		}
	}
	return out
}

// walkNodes calls f on every node of the tree, parents first.
func walkNodes(nodes []*Node, f func(*Node)) {
	for _, n := range nodes {
		if n != nil {
			f(n)
			walkNodes(n.Descriptors, f)
		}
	}
}

// cloneDocument copies doc's tree down to its limits, so that a Policy may
// set fields on the copy; the values themselves (lists of replaces,
// classes, metadata) are shared.
func cloneDocument(doc *Document) *Document {
	if doc == nil {
		return nil
	}
	c := *doc
	c.Changes = slices.Clone(doc.Changes)
	c.Descriptors = cloneNodes(doc.Descriptors)
	return &c
}

func cloneNodes(nodes []*Node) []*Node {
	if nodes == nil {
		return nil
	}
	out := make([]*Node, len(nodes))
	for i, n := range nodes {
		if n == nil {
			continue
		}
		c := *n
		c.Changes = slices.Clone(n.Changes)
		if n.RateLimit != nil {
			rl := *n.RateLimit
			c.RateLimit = &rl
		}
		if n.RateLimits.Value != nil {
			c.RateLimits.Value = make([]*RateLimitNode, len(n.RateLimits.Value))
			for j, rl := range n.RateLimits.Value {
				if rl != nil {
					cp := *rl
					c.RateLimits.Value[j] = &cp
				}
			}
		}
		c.Descriptors = cloneNodes(n.Descriptors)
		out[i] = &c
	}
	return out
}

// globMatch reports whether s matches pattern, in which each '*' stands
// for any run of characters (none included) and nothing else is special:
// a descriptor value's wildcard, also matching the '/' of Envoy Gateway's
// generated keys ("httproute/default/*/rule/0").
func globMatch(pattern, s string) bool {
	if !strings.Contains(pattern, "*") {
		return pattern == s
	}
	return matchSegments(strings.Split(pattern, "*"), s)
}

// where names an overlay entry at pos for Change.By: "file:line".
func entryAt(pos Pos) string {
	return fmt.Sprintf("%s:%d", pos.File, pos.Line)
}
