package descriptors

import (
	"errors"
	"fmt"
	"slices"
)

// Overlay is a policy overlay: files in the config format, one domain
// each, whose domain, descriptor keys and values are patterns ('*' for any
// run of characters, '/' included) selecting the domains and rules of the
// config in force, and whose other keys are set on the rules selected. It
// sets only what a RateLimitConfig served over xDS cannot carry (the keys
// of Schema without an XDS field: algorithm and its parameters,
// rate_limits, classes, failure_mode, ...); the limits themselves stay the
// source's. A descriptor without value selects every value; a nested
// descriptor selects among the children of the rules its parent selected.
// An Overlay is immutable.
type Overlay struct {
	// Files are the overlay's files, in load order.
	Files []string
	docs  []*Document
}

// LoadOverlay reads the overlay files at paths (files, or directories
// whose files s selects) and returns the Overlay, or nil and every error
// as "file:line:col: path: message".
func (s Selection) LoadOverlay(paths ...string) (*Overlay, error) {
	return s.Read(paths...).Overlay()
}

// Overlay decodes the files read as a policy overlay and checks what an
// overlay alone can get wrong: a missing domain or key, a key it may not
// set (one the source carries), a rate_limit that sets nothing. Whether a
// selected rule can take what is set is the builder's, when the overlay is
// applied (Policy.Build).
func (fs *FileSet) Overlay() (*Overlay, error) {
	errs := slices.Clone(fs.errs)
	o := &Overlay{}
	for _, f := range fs.Files {
		p := &decoder{report: report{file: f.Name}, stamp: f.Name}
		doc := p.decodeFile(f.Data)
		errs = append(errs, p.errs...)
		if doc == nil {
			continue
		}
		var r report
		checkOverlay(doc, &r)
		errs = append(errs, r.errs...)
		o.docs = append(o.docs, doc)
		o.Files = append(o.Files, f.Name)
	}
	if len(errs) > 0 {
		return nil, errors.Join(asErrors(sortErrors(errs))...)
	}
	return o, nil
}

// overlaySelectors are the keys an overlay selects by or walks, which it
// does not set.
var overlaySelectors = []string{"domain", "key", "value", "descriptors", "rate_limit"}

// settable reports whether an overlay may write k: a key it selects by,
// or one that a RateLimitConfig cannot carry.
func settable(k KeySpec) bool {
	return slices.Contains(overlaySelectors, k.Name) || k.XDS == ""
}

// refuse reports key k given at st, which an overlay may not set.
func refuse(r *report, k KeySpec, st keyState, at Pos, path string) {
	if st.KeyPos.Line > 0 {
		at = st.KeyPos
	}
	r.errorAt(at, join(path, k.Name), "an overlay sets only what a RateLimitConfig cannot carry; %s is the config's own (its source sets it)", k.Path())
}

// checkOverlay reports what doc, an overlay file, gets wrong on its own.
func checkOverlay(doc *Document, r *report) {
	if doc.Domain.State == FieldAbsent || doc.Domain.State == FieldSet && doc.Domain.Value == "" {
		r.errorAt(doc.Pos, "domain", "missing domain (the domains to select, '*' for any run of characters)")
	}
	for _, k := range schema {
		if k.doc.given != nil && !settable(k) {
			if st := k.doc.given(doc); st.State != FieldAbsent {
				refuse(r, k, st, doc.Pos, "")
			}
		}
	}
	checkOverlayNodes(doc.Descriptors, "descriptors", r)
}

func checkOverlayNodes(nodes []*Node, path string, r *report) {
	for i, n := range nodes {
		if n == nil {
			continue
		}
		ipath := fmt.Sprintf("%s[%d]", path, i)
		if n.Key.State == FieldAbsent || n.Key.State == FieldSet && n.Key.Value == "" {
			r.errorAt(n.Pos, ipath+".key", "missing key (the descriptor keys to select, '*' for any run of characters)")
		}
		for _, k := range schema {
			if k.node.given != nil && !settable(k) {
				if st := k.node.given(n); st.State != FieldAbsent {
					refuse(r, k, st, n.Pos, ipath)
				}
			}
		}
		if rl := n.RateLimit; rl != nil {
			checkOverlayLimit(rl, ipath+".rate_limit", r)
			if n.RateLimits.State != FieldAbsent {
				r.errorAt(n.RateLimits.KeyPos, ipath+".rate_limits", "rate_limits with rate_limit (rate_limits replaces the selected rule's limits; rate_limit sets keys on them)")
			}
		}
		checkOverlayNodes(n.Descriptors, ipath+".descriptors", r)
	}
}

// checkOverlayLimit checks an overlay's rate_limit, which sets keys on the
// selected rules' limits: only those a RateLimitConfig cannot carry, and
// at least one.
func checkOverlayLimit(rl *RateLimitNode, path string, r *report) {
	given := 0
	for _, k := range schema {
		if k.rl.given == nil {
			continue
		}
		st := k.rl.given(rl)
		switch {
		case st.State == FieldAbsent:
		case !settable(k):
			refuse(r, k, st, rl.Pos, path)
		default:
			given++
		}
	}
	if given == 0 {
		r.errorAt(rl.Pos, path, "sets nothing (want a key a RateLimitConfig cannot carry, such as algorithm)")
	}
}

// apply sets o's entries on docs, in place: errors (a rate_limit set on a
// rule without one) and warnings (a selector that matches nothing) go to r.
func (o *Overlay) apply(docs []*Document, r *report) {
	hits := make(map[*Node]int)
	for _, od := range o.docs {
		matched := false
		for _, d := range docs {
			if d == nil || d.Domain.State != FieldSet || !globMatch(od.Domain.Value, d.Domain.Value) {
				continue
			}
			matched = true
			var keys []string
			for _, k := range schema {
				if k.doc.copy != nil && k.XDS == "" && k.doc.given(od).State != FieldAbsent {
					k.doc.copy(d, od)
					keys = append(keys, k.Path())
				}
			}
			if len(keys) > 0 {
				d.Changes = append(d.Changes, Change{By: entryAt(od.Domain.Pos), Keys: keys})
			}
			applyNodes(od.Descriptors, d.Descriptors, "descriptors", hits, r)
		}
		if !matched {
			r.warnAt(od.Domain.Pos, "domain", "%s matches no domain of the config in force", quote(od.Domain.Value))
			continue
		}
		unmatched(od.Descriptors, "descriptors", hits, r)
	}
}

// applyNodes sets each overlay node of ons on the nodes of ns it selects,
// and its nested ones on their children, counting its matches in hits.
func applyNodes(ons, ns []*Node, path string, hits map[*Node]int, r *report) {
	for i, on := range ons {
		if on == nil {
			continue
		}
		ipath := fmt.Sprintf("%s[%d]", path, i)
		for _, n := range ns {
			if n == nil || !selects(on, n) {
				continue
			}
			hits[on]++
			setNode(on, n, ipath, r)
			applyNodes(on.Descriptors, n.Descriptors, ipath+".descriptors", hits, r)
		}
	}
}

// selects reports whether overlay node on selects n: its key pattern
// matches n's key, and its value pattern, when it has one, n's value.
func selects(on, n *Node) bool {
	if n.Key.State != FieldSet || !globMatch(on.Key.Value, n.Key.Value) {
		return false
	}
	return on.Value.State != FieldSet || globMatch(on.Value.Value, n.Value.Value)
}

// unmatched warns of each overlay node that selected nothing while its
// parent selected something (its children are not warned of again).
func unmatched(ons []*Node, path string, hits map[*Node]int, r *report) {
	for i, on := range ons {
		if on == nil {
			continue
		}
		ipath := fmt.Sprintf("%s[%d]", path, i)
		if hits[on] == 0 {
			what := "key " + quote(on.Key.Value)
			if on.Value.State == FieldSet {
				what += " value " + quote(on.Value.Value)
			}
			r.warnAt(on.Pos, ipath, "%s selects no descriptor of the config in force", what)
			continue
		}
		unmatched(on.Descriptors, ipath+".descriptors", hits, r)
	}
}

// setNode sets overlay node on's keys on n, the node it selected, and
// records the change. rate_limits replaces n's limits; rate_limit's keys
// are set on n's limit (each of its rate_limits), an error when n has
// none.
func setNode(on, n *Node, path string, r *report) {
	var keys []string
	for _, k := range schema {
		if k.node.copy != nil && k.XDS == "" && k.node.given(on).State != FieldAbsent {
			k.node.copy(n, on)
			keys = append(keys, k.Path())
		}
	}
	if on.RateLimits.State != FieldAbsent {
		n.RateLimit = nil
	}
	if rl := on.RateLimit; rl != nil {
		limits := limitsOf(n)
		if u := n.RateLimit; u != nil && u.Unlimited.State == FieldSet && u.Unlimited.Value {
			limits = nil
		}
		if len(limits) == 0 {
			r.errorAt(rl.Pos, path+".rate_limit", "selects %s, which has no limit to set this on (no rate_limit, or unlimited)", describeNode(n))
		}
		for _, k := range schema {
			if k.rl.copy == nil || k.rl.given(rl).State == FieldAbsent {
				continue
			}
			for _, l := range limits {
				k.rl.copy(l, rl)
			}
			keys = append(keys, k.Path())
		}
	}
	if len(keys) > 0 {
		n.Changes = append(n.Changes, Change{By: entryAt(on.Pos), Keys: keys})
	}
}

// describeNode names a selected node in an error: its key and value, and
// where its source has it.
func describeNode(n *Node) string {
	s := "key " + quote(n.Key.Value)
	if n.Value.State == FieldSet && n.Value.Value != "" {
		s += " value " + quote(n.Value.Value)
	}
	if n.Pos.Line > 0 {
		s += fmt.Sprintf(" (line %d)", n.Pos.Line)
	}
	return s
}
