package descriptors

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// pool builds the classes of node n, whose rule r has its limits and
// children built, at path (".classes" of the node's path). It returns nil
// when the classes cannot make a pool; the problems are reported.
func (b *builder) pool(n *Node, r *Rule, path string) *Pool {
	c := n.Classes
	switch {
	case n.RateLimits.State != FieldAbsent:
		b.errorAt(c.Pos, path, "classes with rate_limits (a pool is one limit that every class shares: give it one rate_limit)")
		return nil
	case n.RateLimit == nil:
		b.errorAt(c.Pos, path, "classes without rate_limit (a class needs a pool: the limit every class of the node shares)")
		return nil
	case r.Unlimited:
		b.errorAt(c.Pos, path, "classes with unlimited: true (an unlimited limit counts nothing, so it is no pool)")
		return nil
	case n.RateLimit.Overdraw.State == FieldSet && n.RateLimit.Overdraw.Value:
		// A report that cannot be refused would take the pool past the
		// class's ceiling, into the reserve of the classes above it; and
		// counting only up to the ceiling would lose what was reported.
		b.errorAt(n.RateLimit.Overdraw.KeyPos, strings.TrimSuffix(path, ".classes")+".rate_limit.overdraw",
			"overdraw with classes (every report would count, so a low class's reports could take the reserve of the classes "+
				"above it): count usage reported after the response in a rule of its own, without classes")
		return nil
	case n.RateLimit.Cache.State == FieldSet && n.RateLimit.Cache.Value:
		// A class's ceiling is of the pool's count at the decision, which
		// the other classes move on every instance: only the store knows it.
		b.errorAt(n.RateLimit.Cache.KeyPos, strings.TrimSuffix(path, ".classes")+".rate_limit.cache",
			"cache with classes (a class's ceiling is of the pool's count at the decision, which only the store knows): "+
				"a pool is decided exactly")
		return nil
	}
	p := &Pool{}
	switch f := c.Key; state(b, f, path+".key") {
	case FieldAbsent:
		b.errorAt(c.Pos, path+".key", "missing key (the key of the descriptor entry that names a request's class)")
	case FieldSet:
		p.Key = f.Value
		b.classKey(f, r, path+".key")
	}
	p.Classes = b.classes(c, path+".ceilings")
	if p.Key == "" || len(p.Classes) == 0 || r.Limit == nil {
		return nil
	}
	if !b.ceilingsAdmit(c, p.Classes, r.Limit, path+".ceilings") {
		return nil
	}
	for _, cl := range p.Classes {
		if p.Lowest == nil || cl.Ceiling < p.Lowest.Ceiling {
			p.Lowest = cl
		}
		cl.Pool = r
		cl.Rule = classRule(r, p.Key, cl)
	}
	return p
}

// classKey reports a class key that an ancestor of r (or r) has, or that a
// child of r has: a request's entry with that key would then name both a
// class and a descriptor.
func (b *builder) classKey(f Field[string], r *Rule, path string) {
	if f.Value == "" {
		b.errorAt(f.Pos, path, "empty key (want the key of the descriptor entry that names a request's class)")
		return
	}
	for i, a := range r.Lineage {
		if a.Key == f.Value {
			b.errorAt(f.Pos, path, "key %s is the key of this pool's descriptor at depth %d too (the class entry follows the pool's entries: give it a key of its own)",
				quote(f.Value), i+1)
			return
		}
	}
	for _, ch := range r.Children {
		if ch.Key == f.Value {
			b.errorAt(Pos{Line: ch.Line, Column: ch.Column}, path, "key %s is the key of a descriptor under this pool (line %d): an entry with it would name both a class and that descriptor; rename one",
				quote(f.Value), ch.Line)
			return
		}
	}
}

// classes builds classes.ceilings at path: at least one class, each with a
// value of its own and a ceiling.
func (b *builder) classes(c *ClassesNode, path string) []*Class {
	f := c.Ceilings
	switch state(b, f, path) {
	case FieldAbsent:
		b.errorAt(c.Pos, path, "missing ceilings (want a list of {value: ..., ceiling: ...%%}, one per class)")
		return nil
	case FieldInvalid:
		return nil
	}
	if len(f.Value) == 0 {
		b.errorAt(f.Pos, path, "empty ceilings (want at least one {value: ..., ceiling: ...%%})")
		return nil
	}
	var out []*Class
	seen := make(map[string]int)
	ok := true
	for i, item := range f.Value {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		if item == nil {
			b.undecoded(f.Pos, ipath)
			ok = false
			continue
		}
		cl := &Class{}
		switch v := item.Value; state(b, v, ipath+".value") {
		case FieldAbsent:
			b.errorAt(item.Pos, ipath+".value", "missing value (the class entry's value that selects the class)")
			ok = false
		case FieldSet:
			if j, dup := seen[v.Value]; dup {
				b.errorAt(v.Pos, ipath+".value", "class %s is ceilings[%d] too (each class once)", quote(v.Value), j)
				ok = false
			} else if v.Value == "" {
				b.errorAt(v.Pos, ipath+".value", "empty value (want the class entry's value; a missing or unknown value takes the lowest ceiling)")
				ok = false
			}
			seen[v.Value] = i
			cl.Value = v.Value
		default:
			ok = false
		}
		switch cf := item.Ceiling; state(b, cf, ipath+".ceiling") {
		case FieldAbsent:
			b.errorAt(item.Pos, ipath+".ceiling", "missing ceiling (want a percentage of the pool's limit, such as 80%%)")
			ok = false
		case FieldSet:
			pm, msg := ParseCeiling(cf.Value)
			if msg != "" {
				b.errorAt(cf.Pos, ipath+".ceiling", "%s", msg)
				ok = false
			}
			cl.Ceiling = pm
		default:
			ok = false
		}
		out = append(out, cl)
	}
	if !ok {
		return nil
	}
	return out
}

// ParseCeiling returns the permille of a ceiling written as a percentage
// of the pool's limit ("80%", "12.5%", "100%": above 0%, at most 100%, at
// most one decimal), and otherwise a message saying what was found and
// what is allowed.
func ParseCeiling(s string) (permille uint16, msg string) {
	bad := fmt.Sprintf("%s is not a percentage (want one above 0%% and at most 100%%, such as 80%% or 12.5%%)", quote(s))
	num, ok := strings.CutSuffix(strings.TrimSpace(s), "%")
	if !ok {
		return 0, bad
	}
	whole, frac, dot := strings.Cut(strings.TrimSpace(num), ".")
	if whole == "" || len(whole) > 6 || dot && len(frac) != 1 || strings.Trim(whole+frac, "0123456789") != "" {
		if dot && len(frac) > 1 {
			return 0, fmt.Sprintf("%s has more than one decimal (a ceiling is counted in tenths of a percent)", quote(s))
		}
		return 0, bad
	}
	w, _ := strconv.Atoi(whole)
	d := 0
	if dot {
		d = int(frac[0] - '0')
	}
	pm := w*10 + d
	switch {
	case pm > limiter.MaxCeiling:
		return 0, fmt.Sprintf("%s is above 100%% (a class can fill at most the whole pool)", quote(s))
	case pm == 0:
		return 0, fmt.Sprintf("%s admits nothing (want a ceiling above 0%%; at least 0.1%%)", quote(s))
	}
	return uint16(pm), ""
}

// ceilingsAdmit reports a class whose ceiling admits nothing of a pool
// that admits something (a ceiling of 10% on 5 requests: floor(0.5) = 0),
// which is surely a mistake; it returns whether there is none.
func (b *builder) ceilingsAdmit(c *ClassesNode, classes []*Class, l *Limit, path string) bool {
	capacity, of := uint64(l.RequestsPerUnit), "requests_per_unit"
	if l.Algorithm == limiter.TokenBucket && l.Burst != 0 {
		capacity, of = uint64(l.Burst), "burst"
	}
	ok := true
	if l.Penalty.On() {
		b.errorAt(c.Ceilings.KeyPos, path, "classes with a penalty on the pool's limit (a class is shed by its ceiling, not blocked)")
		ok = false
	}
	for i, cl := range classes {
		if capacity > 0 && (limiter.Limit{Ceiling: cl.Ceiling}).CeilingOf(capacity) == 0 {
			cf := c.Ceilings.Value[i].Ceiling
			b.errorAt(cf.Pos, fmt.Sprintf("%s[%d].ceiling", path, i), "%s of %s %d admits nothing (floor(%d x %s) = 0): raise the ceiling or the limit",
				cl.CeilingText(), of, capacity, capacity, cl.CeilingText())
			ok = false
		}
	}
	return ok
}

// classRule makes the rule that requests of class cl of pool rule r match:
// a child of r keyed by the class entry, with r's flags and metadata and
// r's limit at cl's ceiling.
func classRule(r *Rule, key string, cl *Class) *Rule {
	c := *r
	c.Key, c.Value, c.Wildcard, c.segments = key, cl.Value, false, nil
	c.FullKey = r.FullKey + "." + key + "_" + cl.Value
	c.Pool, c.Class, c.Children, c.index = nil, cl, nil, nil
	l := *r.Limit
	l.Ceiling = cl.Ceiling
	c.Limit, c.Limits = &l, []*Limit{&l}
	c.Lineage = append(r.Lineage[:len(r.Lineage):len(r.Lineage)], &c)
	return &c
}

// CeilingText formats a class's ceiling as the config writes it ("80%",
// "12.5%").
func (c *Class) CeilingText() string {
	if c.Ceiling%10 == 0 {
		return strconv.Itoa(int(c.Ceiling/10)) + "%"
	}
	return fmt.Sprintf("%d.%d%%", c.Ceiling/10, c.Ceiling%10)
}
