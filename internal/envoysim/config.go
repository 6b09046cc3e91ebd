package envoysim

import (
	"fmt"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// MatchConfig reports every descriptor in all that cfg has no rule for
// under its domain, or whose rule neither limits it nor is unlimited (a
// node without rate_limit: Sluice would answer OK and count nothing, which
// in an example means its actions and its config disagree). configName
// says in the messages where cfg came from, e.g. "config/". Each error
// names the route and the request; a message that would repeat for another
// request is reported once.
func MatchConfig(cfg *descriptors.Config, all []Descriptor, configName string) []error {
	var errs []error
	seen := map[string]bool{}
	for _, d := range all {
		es := make([]descriptors.Entry, len(d.Entries))
		for i, e := range d.Entries {
			es[i] = e.Entry
		}
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
