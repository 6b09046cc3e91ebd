package envoysim

import (
	"fmt"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// MatchConfig reports every descriptor in all that cfg has no rule for
// under its domain, or whose rule neither limits it nor is unlimited (a
// node without rate_limit: Sluice would answer OK and count nothing, which
// in an example means its actions and its config disagree). A last entry
// keyed ratelimit.SlotTokenKey carries a release's slot token, which Sluice
// strips before matching: so does MatchConfig. configName says in the
// messages where cfg came from, e.g. "config/". Each error names the route
// and the request; a message that would repeat for another request is
// reported once.
func MatchConfig(cfg *descriptors.Config, all []Descriptor, configName string) []error {
	var errs []error
	seen := map[string]bool{}
	for _, d := range all {
		es := Matched(d.Entries)
		var msg string
		switch rule := cfg.Match(d.Domain, es); {
		case rule == nil:
			msg = fmt.Sprintf("domain %q: %s matches no rule in %s", d.Domain, FormatEntries(d.Entries), configName)
		case rule.Limit == nil && !rule.Unlimited:
			msg = fmt.Sprintf("domain %q: %s matches rule %s (%s:%d), which has no rate_limit", d.Domain, FormatEntries(d.Entries), rule.FullKey, rule.File, rule.Line)
		default:
			continue
		}
		if !seen[msg] {
			seen[msg] = true
			errs = append(errs, fmt.Errorf("route %q, %s: %s", d.Route, d.Req, msg))
		}
	}
	return errs
}

// Matched returns the entries of es that Sluice matches against its config:
// all of them but a last one keyed ratelimit.SlotTokenKey (a release's slot
// token).
func Matched(es []Entry) []descriptors.Entry {
	if n := len(es); n > 0 && es[n-1].Key == ratelimit.SlotTokenKey {
		es = es[:n-1]
	}
	out := make([]descriptors.Entry, len(es))
	for i, e := range es {
		out[i] = e.Entry
	}
	return out
}
