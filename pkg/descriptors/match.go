package descriptors

import "strings"

// index is the lookup structure for one level of a descriptor tree (the
// children of one node, or a domain's top-level rules), by key. It is built
// once at load time so that Match does not allocate; keying by the key and
// then the value keeps both lookups on Go's fast path for string keys.
type index map[string]*level

// level holds the rules of one level that share a key.
type level struct {
	exact    map[string]*Rule // by literal value
	wildcard []*Rule          // in config order
	keyOnly  *Rule            // the rule without a value
}

func newIndex(rules []*Rule) index {
	if len(rules) == 0 {
		return nil
	}
	x := make(index)
	for _, r := range rules {
		l := x[r.Key]
		if l == nil {
			l = &level{}
			x[r.Key] = l
		}
		switch {
		case r.Value == "":
			l.keyOnly = r
		case r.Wildcard:
			l.wildcard = append(l.wildcard, r)
		default:
			if l.exact == nil {
				l.exact = make(map[string]*Rule)
			}
			l.exact[r.Value] = r
		}
		r.index = newIndex(r.Children)
		if r.Pool != nil {
			r.index = r.index.withClasses(r.Pool)
		}
	}
	return x
}

// withClasses returns x with the level of p's class entry: each class's
// rule by its value, and the lowest class's for any other value.
func (x index) withClasses(p *Pool) index {
	if x == nil {
		x = make(index)
	}
	l := &level{exact: make(map[string]*Rule, len(p.Classes)), keyOnly: p.Lowest.Rule}
	for _, c := range p.Classes {
		l.exact[c.Value] = c.Rule
	}
	x[p.Key] = l
	return x
}

// lookup returns the rule at this level that e selects: the one with the
// same key and value, else the first wildcard rule in config order whose
// pattern matches, else the key-only rule; nil if there is none.
func (x index) lookup(e Entry) *Rule {
	l := x[e.Key]
	if l == nil {
		return nil
	}
	if r := l.exact[e.Value]; r != nil {
		return r
	}
	for _, r := range l.wildcard {
		if matchSegments(r.segments, e.Value) {
			return r
		}
	}
	return l.keyOnly
}

// Match returns the rule that a request descriptor with these entries
// selects in domain, following envoyproxy/ratelimit: starting at the
// domain's top-level rules, entry i selects among the children of the rule
// that entry i-1 selected; at each level a rule with the same key and value
// wins, then the first wildcard rule in config order whose pattern matches,
// then the rule with that key and no value. The result is the rule reached
// by the last entry, so a request must be exactly as deep as the rule: a
// parent's limit is never a fallback.
//
// A rule with classes (a pool) is matched as one of its classes: by the
// entry after the pool's, whose key is the class key, if it is the last
// (its value naming the class, any other value the lowest), and as the
// lowest class when the entries end at the pool. The Rule returned is then
// the class's (Rule.Class).
//
// Match returns nil for an unknown domain, for no entries, and when some
// entry selects nothing. It may return a rule with a nil Limit (a
// whitelist, or Unlimited). Match does not allocate and is safe for
// concurrent use.
func (c *Config) Match(domain string, entries []Entry) *Rule {
	if c == nil || len(entries) == 0 {
		return nil
	}
	d := c.domains[domain]
	if d == nil {
		return nil
	}
	x := d.index
	var r *Rule
	for _, e := range entries {
		if r = x.lookup(e); r == nil {
			return nil
		}
		x = r.index
	}
	if r.Pool != nil {
		// No class entry: the lowest class.
		return r.Pool.Lowest.Rule
	}
	return r
}

// matchSegments reports whether s matches the pattern whose parts between
// '*' are segs (len(segs) >= 2): s starts with the first part, ends with the
// last, and holds the others in order in between. Taking the leftmost
// occurrence of each middle part is enough, since '*' is the only
// metacharacter.
func matchSegments(segs []string, s string) bool {
	first, last := segs[0], segs[len(segs)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	s = s[len(first) : len(s)-len(last)]
	for _, seg := range segs[1 : len(segs)-1] {
		i := strings.Index(s, seg)
		if i < 0 {
			return false
		}
		s = s[i+len(seg):]
	}
	return true
}
