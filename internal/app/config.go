package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/settings"
	"github.com/sluicehq/sluice/internal/source"
	"github.com/sluicehq/sluice/internal/statuspage"
	"github.com/sluicehq/sluice/pkg/descriptors"
)

// configPage renders the config in force and the outcome of its loads, the
// one place that does: GET /config and the status page's config status. It
// is safe for concurrent use.
type configPage struct {
	state *source.State
	set   *settings.Settings
}

// newConfigPage returns the page of state's config, with the settings in
// force s.
func newConfigPage(state *source.State, s *settings.Settings) *configPage {
	return &configPage{state: state, set: s}
}

// ServeHTTP answers /config: the source, the config in force (its files,
// domains, load time, version and every domain's rules with their names,
// limits and algorithms), the errors of the last load if it failed, and
// every setting in force that differs from its default.
func (p *configPage) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	st := p.state.Status()
	out := struct {
		Version   string      `json:"version"`
		Source    source.Info `json:"source"`
		Files     []string    `json:"files"`
		Domains   []string    `json:"domains"`
		LoadedAt  *time.Time  `json:"loaded_at,omitempty"`
		LastError []string    `json:"last_error,omitempty"`
		ErrorAt   *time.Time  `json:"last_error_at,omitempty"`
		// ConfigVersion identifies the config in force
		// (descriptors.Config.Version).
		ConfigVersion string   `json:"config_version,omitempty"`
		Rules         []object `json:"rules"`
		// Settings are the settings in force that differ from their
		// defaults, with what set them.
		Settings []settings.InForce `json:"settings"`
	}{Version: versionString(), Source: st.Source, Files: st.Files, Domains: st.Domains, LastError: st.LastError,
		ConfigVersion: st.Config.Version(), Rules: describeConfig(st.Config), Settings: []settings.InForce{}}
	if p.set != nil {
		out.Settings = append(out.Settings, p.set.InForce()...)
	}
	if !st.LoadedAt.IsZero() {
		out.LoadedAt = &st.LoadedAt
	}
	if len(st.LastError) > 0 {
		out.ErrorAt = &st.ErrorAt
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(out)
}

// pageStatus is the config's status as the status page shows it: the
// source (file path, or xDS server and node id), the version (the hash of
// the rules, after the xDS version_info when there is one), the last load
// and its errors.
func (p *configPage) pageStatus() statuspage.ConfigStatus {
	cs := p.state.Status()
	info := cs.Source
	st := statuspage.ConfigStatus{Source: info.Kind, Version: cs.Config.Version(), LoadedAt: cs.LoadedAt,
		Errors: cs.LastError, ErrorAt: cs.ErrorAt}
	switch {
	case info.Path != "":
		st.Source += ": " + info.Path
	case info.Server != "":
		st.Source += ": " + info.Server + " as node " + info.NodeID
		if info.Connected != nil && !*info.Connected {
			st.Source += " (disconnected)"
		}
	}
	if info.Version != "" && st.Version != "" {
		st.Version = info.Version + " (rules " + st.Version + ")" // the xDS version_info first
	}
	return st
}

// describeConfig renders cfg's domains for /config: each domain, rule and
// limit in the keys of the format, as the schema shows them
// (descriptors' Show), with what /config adds: a domain's file, a rule's
// name (as metrics and the status page give it) and line, a limit's
// window. A rule's nested descriptors come after its own keys. nil for no
// config.
func describeConfig(cfg *descriptors.Config) []object {
	var out []object
	for _, d := range cfg.Domains() {
		v := renderer{domain: d.Name}
		out = append(out, v.object(d.Show(), append([]member{{"file", d.File}}, changes(d.Changes)...)...))
	}
	return out
}

// renderer renders the objects of one domain.
type renderer struct{ domain string }

// object renders kvs, a mapping of the format, with extra after its keys
// and its nested descriptors last.
func (v renderer) object(kvs []descriptors.KeyValue, extra ...member) object {
	o := make(object, 0, len(kvs)+len(extra))
	var children []member
	for _, kv := range kvs {
		m := member{kv.Key, v.value(kv.Value)}
		if _, nested := kv.Value.([]*descriptors.Rule); nested {
			children = append(children, m)
			continue
		}
		o = append(o, m)
	}
	return append(append(o, extra...), children...)
}

// value renders one key's value: the model's objects in turn, a mapping
// of a key's own as an object, anything else as it is.
func (v renderer) value(x any) any {
	switch x := x.(type) {
	case *descriptors.Limit:
		return v.object(x.Show(), member{"window", x.Window().String()})
	case []*descriptors.Limit:
		out := make([]any, len(x))
		for i, l := range x {
			out[i] = v.value(l)
		}
		return out
	case []*descriptors.Rule:
		out := make([]object, len(x))
		for i, r := range x {
			out[i] = v.rule(r)
		}
		return out
	case []descriptors.KeyValue:
		return v.object(x)
	case [][]descriptors.KeyValue:
		out := make([]object, len(x))
		for i, kvs := range x {
			out[i] = v.object(kvs)
		}
		return out
	}
	return x
}

// rule renders r with its name and line.
func (v renderer) rule(r *descriptors.Rule) object {
	name := strings.TrimPrefix(r.FullKey, v.domain+".")
	if r.Limit != nil && r.Limit.Name != "" {
		name = r.Limit.Name
	}
	return v.object(r.Show(), append([]member{{"rule", name}, {"line", r.Line}}, changes(r.Changes)...)...)
}

// changes renders what a policy set on a domain or rule: each overlay
// entry (file:line) or setting, and the keys it set; none when nothing.
func changes(cs []descriptors.Change) []member {
	if len(cs) == 0 {
		return nil
	}
	out := make([]object, len(cs))
	for i, c := range cs {
		out[i] = object{{"by", c.By}, {"set", c.Keys}}
	}
	return []member{{"changed_by", out}}
}

// object is a JSON object whose members keep their order.
type object []member

// member is one member of an object.
type member struct {
	key   string
	value any
}

// MarshalJSON writes o's members in order.
func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(m.key)
		if err != nil {
			return nil, err
		}
		val, err := json.Marshal(m.value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.key, err)
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(val)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
