package settings

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/pkg/redis"
)

// Report is what the settings say at start, one log line each: what
// envoyproxy/ratelimit's variables set, those of its variables that Sluice
// does not apply, and what the flags and SLUICE_* variables changed. Each
// says what is in force, not only what was given.
type Report struct {
	// Peer lists the Sluice settings the peer's variables set, one line
	// each: "--redis-url=redis://host:6379 (REDIS_URL, REDIS_SOCKET_TYPE)",
	// then what Sluice does with the set variables that need no setting.
	Peer []string
	// PeerWarnings lists the set peer variables Sluice does not apply, each
	// with what it does instead.
	PeerWarnings []string
	// Changed lists the settings in force that a flag or a SLUICE_*
	// variable set to other than the default: "--overdraw=true
	// (SLUICE_OVERDRAW)".
	Changed []string
	// Counting says how hits count for rules whose rate_limit sets no
	// overdraw (Counting's mode and what it means).
	Counting string
}

// Counting returns how hits count for rules whose rate_limit sets no
// overdraw, as the settings in force decide it: mode "overdraw"
// (--overdraw), "count-denied" (--count-denied, envoyproxy/ratelimit's
// counting) or "all-or-nothing" (Sluice's default), and what it means.
func (s *Settings) Counting() (mode, what string) {
	const rest = "; a rule's own overdraw decides its counting, and a pool's class never counts a shed request"
	switch {
	case s.Overdraw:
		return "overdraw", "overdraw (--overdraw): every hit a limit is sent counts, admitted or not, and a request is admitted " +
			"while its counter is under the limit (limits that cannot overdraw: all or nothing)" + rest
	case s.CountDenied:
		return "count-denied", "count-denied (--count-denied, envoyproxy/ratelimit's counting): a request is over the limit when the " +
			"count after its hits passes the limit, and its hits count either way (limits that cannot: all or nothing)" + rest
	}
	return "all-or-nothing", "all-or-nothing: a request is admitted only if every limit admits it, and a denied one consumes nothing" + rest
}

// Report returns what s reports at start.
func (s *Settings) Report() Report {
	var r Report
	_, r.Counting = s.Counting()
	if s.peer != nil {
		r.Peer, r.PeerWarnings = s.peer.applied(), s.peer.warnings
	}
	for _, in := range s.inForce {
		if !slices.ContainsFunc(in.From, isPeerVar) {
			r.Changed = append(r.Changed, fmt.Sprintf("--%s=%s (%s)", in.Name, in.Value, strings.Join(in.From, ", ")))
		}
	}
	return r
}

// InForce is one setting whose value in force differs from its default.
type InForce struct {
	// Name is the flag's name, without "--".
	Name string `json:"name"`
	// Value is the value in force; a secret is "(set)", and a Redis URL
	// shows no password.
	Value string `json:"value"`
	// From names what set it: "--name", "SLUICE_NAME", or the
	// envoyproxy/ratelimit variables that decided it.
	From []string `json:"from"`
}

// InForce returns every setting whose value in force differs from its
// default, in the table's order: those that change behaviour from a plain
// start, for /config. A setting of a config source that is not the one in
// use (--config with --xds-server, say) is not in force.
func (s *Settings) InForce() []InForce { return s.inForce }

// settle finishes Parse: it records what is in force (InForce), and with
// the config over xDS it reports the peer's file layout as not applied.
// fs holds the flags as parsed, given the names of what set each flag that
// was set (a flag, a SLUICE_* variable, the peer's variables).
func (s *Settings) settle(fs *flag.FlagSet, given map[string][]string) {
	if s.XDS.Server != "" && s.peer != nil {
		s.peer.notFromFiles()
	}
	defaults := flag.NewFlagSet("defaults", flag.ContinueOnError)
	defaults.SetOutput(io.Discard)
	for _, t := range (&Settings{}).allSettings() {
		defineFlag(defaults, t, t.def)
	}
	for _, t := range s.allSettings() {
		v := fs.Lookup(t.name).Value.String()
		if t.name == "version" || !s.sourceInUse(t.name) || v == defaults.Lookup(t.name).Value.String() {
			continue
		}
		s.inForce = append(s.inForce, InForce{Name: t.name, Value: Shown(t.name, v), From: given[t.name]})
	}
}

// sourceInUse reports whether the setting name belongs to the config source
// in use, or to no config source.
func (s *Settings) sourceInUse(name string) bool {
	switch {
	case name == "config" || name == "config-tree" || name == "config-dotfiles" || name == "reload-debounce":
		return s.XDS.Server == ""
	case strings.HasPrefix(name, "xds-"):
		return s.XDS.Server != ""
	}
	return true
}

// secrets are the settings whose whole value is a secret.
var secrets = map[string]bool{"redis-sentinel-auth": true, "xds-headers": true}

// IsSecret reports whether the whole value of the setting name (a flag's
// name, without "--") is a secret, never to be shown.
func IsSecret(name string) bool { return secrets[name] }

// Shown is the value v of the setting name as logs, /config and the debug
// listener may show it: "(set)" for a secret (IsSecret), a Redis URL
// without its password.
func Shown(name, v string) string {
	switch {
	case name == "redis-url":
		return redis.Redacted(v)
	case IsSecret(name):
		return "(set)"
	}
	return v
}

// notFromFiles drops the settings of the peer's file layout (RUNTIME_*),
// which a config over xDS leaves unused, and warns about their variables
// instead.
func (p *peerEnv) notFromFiles() {
	var unused []string
	for _, flag := range []string{"config", "config-tree", "config-dotfiles"} {
		for _, n := range p.from[flag] {
			if !slices.Contains(unused, n) {
				unused = append(unused, n)
			}
		}
		delete(p.vals, flag)
		delete(p.from, flag)
		delete(p.over, flag)
	}
	p.noted = slices.DeleteFunc(p.noted, func(n string) bool {
		if strings.HasPrefix(n, "RUNTIME_WATCH_ROOT=") {
			unused = append(unused, "RUNTIME_WATCH_ROOT")
			return true
		}
		return false
	})
	for _, n := range unused {
		p.warn(n, p.get(n), "not used: the config comes over xDS (--xds-server), not from files")
	}
}

// isPeerVar reports whether name is one of the peer's variables (not a
// flag or a SLUICE_* variable).
func isPeerVar(name string) bool {
	return !strings.HasPrefix(name, "--") && !strings.HasPrefix(name, "SLUICE_")
}

// RedactURL is v with the password of the URL it is replaced, and v itself
// when it holds no user information.
func RedactURL(v string) string {
	if !strings.Contains(v, "@") {
		return v
	}
	return redis.Redacted(v)
}
