package descriptors

import (
	"regexp"

	"gopkg.in/yaml.v3"
)

// This file holds a descriptor's tenant table and plans (tenants_from,
// plans): decoding, building and showing them. The rows of a table are in
// tenant.go.

// Plan is one of a rule's plans: named limits that a tenant table's rows
// name.
type Plan struct {
	// Name is the plan's name, unique among the rule's plans: a letter,
	// then letters, digits, '_', '.' or '-', 64 bytes at most.
	Name string
	// Limits are the plan's limits (its rate_limit, or rate_limits in config
	// order); nil when Unlimited.
	Limits []*Limit
	// Unlimited reports a plan whose rate_limit is {unlimited: true}: its
	// tenants are never limited at this rule.
	Unlimited bool
}

var (
	planKeys = []string{"rate_limit", "rate_limits"}
	// tableName is what a tenants_from may be: it names a Redis key and a
	// file, so nothing that needs quoting there.
	tableName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	// planName is what a plan may be called: starting with a letter, so
	// that a row naming a plan is never taken for a limit (100/minute).
	planName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)
)

// ValidTableName reports whether name can name a tenant table: 1 to 64
// letters, digits, '_', '.' or '-'.
func ValidTableName(name string) bool { return tableName.MatchString(name) }

// plans decodes plans, a mapping of plan names to plan mappings (rate_limit
// or rate_limits); a plan that is not a mapping is a nil entry. ok is false
// (and an error reported) when n is not a mapping.
func (p *decoder) plans(n *yaml.Node, path string, depth int) ([]*PlanNode, bool) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "want a mapping of plan names to {rate_limit: ...} or {rate_limits: [...]}, got %s", describe(n))
		return nil, false
	}
	var out []*PlanNode
	seen := make(map[string]*yaml.Node)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			p.errorf(k, path, "plan name %s is not a string", describeKey(k))
			continue
		}
		ppath := join(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			p.errorf(k, ppath, "duplicate plan %s (first at line %d, column %d)", quote(k.Value), first.Line, first.Column)
			continue
		}
		seen[k.Value] = k
		m, ok := p.mapping(v, ppath, "a plan mapping (rate_limit or rate_limits)", planKeys, depth+1)
		if !ok {
			out = append(out, nil)
			continue
		}
		pn := &PlanNode{Pos: p.posOf(k), Name: k.Value}
		if f, ok := m.fields["rate_limit"]; ok {
			pn.RateLimit = p.rateLimit(f.val, join(ppath, "rate_limit"), depth+1)
		}
		pn.RateLimits = get(p, m, "rate_limits", ppath, func(f field, path string) ([]*RateLimitNode, bool) {
			return p.rateLimits(f.val, path, depth+1)
		})
		out = append(out, pn)
	}
	return out, true
}

// tenantsFrom builds a node's tenants_from onto r.
func (b *builder) tenantsFrom(n *Node, r *Rule, path string) {
	f := n.TenantsFrom
	if state(b, f, path+".tenants_from") != FieldSet {
		return
	}
	switch {
	case !ValidTableName(f.Value):
		b.errorAt(f.Pos, path+".tenants_from", "table name %s: want 1 to 64 letters, digits, '_', '.' or '-'", quote(f.Value))
	case n.Classes != nil:
		b.errorAt(f.KeyPos, path+".tenants_from", "tenants_from with classes (a pool is one limit every class shares; give tenants a node of their own)")
	default:
		r.TenantsFrom = f.Value
	}
}

// plans builds a node's plans onto r: each with a valid, unique name and
// either a rate_limit or rate_limits.
func (b *builder) plans(n *Node, r *Rule, path string) {
	f := n.Plans
	path += ".plans"
	if state(b, f, path) != FieldSet {
		return
	}
	if n.TenantsFrom.State == FieldAbsent {
		b.errorAt(f.KeyPos, path, "plans without tenants_from (the table named by tenants_from maps each value to a plan)")
	}
	for _, pn := range f.Value {
		if pn == nil {
			b.undecoded(f.Pos, path)
			continue
		}
		ppath := join(path, pn.Name)
		if !planName.MatchString(pn.Name) {
			b.errorAt(pn.Pos, ppath, "plan name %s: want a letter, then letters, digits, '_', '.' or '-', 64 bytes at most", quote(pn.Name))
			continue
		}
		if pl := b.plan(pn, ppath); pl != nil {
			r.Plans = append(r.Plans, pl)
		}
	}
}

// plan builds one plan at path, nil when it has no usable limits.
func (b *builder) plan(pn *PlanNode, path string) *Plan {
	pl := &Plan{Name: pn.Name}
	switch {
	case pn.RateLimit != nil && pn.RateLimits.State != FieldAbsent:
		b.errorAt(pn.RateLimits.KeyPos, path+".rate_limits", "rate_limits with rate_limit (put every limit in rate_limits)")
		return nil
	case pn.RateLimit != nil:
		l, unlimited := b.rateLimit(pn.RateLimit, path+".rate_limit")
		if l != nil {
			pl.Limits = []*Limit{l}
		}
		pl.Unlimited = unlimited
	case state(b, pn.RateLimits, path+".rate_limits") == FieldSet:
		pl.Limits = b.rateLimitList(pn.RateLimits, path+".rate_limits")
	default:
		b.errorAt(pn.Pos, path, "plan without limits (want rate_limit or rate_limits)")
		return nil
	}
	if pl.Limits == nil && !pl.Unlimited {
		return nil
	}
	return pl
}

// showPlans shows a rule's plans: each plan's name and its limits (a
// rate_limit, rate_limits, or unlimited).
func showPlans(r *Rule) any {
	if len(r.Plans) == 0 {
		return nil
	}
	out := make([]KeyValue, len(r.Plans))
	for i, p := range r.Plans {
		switch {
		case p.Unlimited:
			out[i] = KeyValue{p.Name, []KeyValue{{"unlimited", true}}}
		case len(p.Limits) == 1:
			out[i] = KeyValue{p.Name, []KeyValue{{"rate_limit", p.Limits[0]}}}
		default:
			out[i] = KeyValue{p.Name, []KeyValue{{"rate_limits", p.Limits}}}
		}
	}
	return out
}

// Plan returns r's plan called name, nil when r has none.
func (r *Rule) Plan(name string) *Plan {
	for _, p := range r.Plans {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// TenantRules returns every rule of c whose tenants_from is table, in
// domain and config order.
func (c *Config) TenantRules(table string) []*Rule {
	if c == nil {
		return nil
	}
	var out []*Rule
	var walk func(rules []*Rule)
	walk = func(rules []*Rule) {
		for _, r := range rules {
			if r.TenantsFrom == table {
				out = append(out, r)
			}
			walk(r.Children)
		}
	}
	for _, d := range c.sorted {
		walk(d.Rules)
	}
	return out
}
