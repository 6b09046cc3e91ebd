package app

import (
	"encoding/json"
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
		ConfigVersion string       `json:"config_version,omitempty"`
		Rules         []configView `json:"rules"`
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

// configView is /config's view of a loaded config: every domain's
// descriptor tree with its names, limits and algorithms, as loaded.
type configView struct {
	Domain      string     `json:"domain"`
	File        string     `json:"file"`
	FailureMode string     `json:"failure_mode,omitempty"`
	Descriptors []ruleView `json:"descriptors"`
}

type ruleView struct {
	Key            string         `json:"key"`
	Value          string         `json:"value,omitempty"`
	Rule           string         `json:"rule"` // the name metrics and the status page use
	Limit          *limitView     `json:"rate_limit,omitempty"`
	Limits         []*limitView   `json:"rate_limits,omitempty"` // a rule with several limits: all of them
	Unlimited      bool           `json:"unlimited,omitempty"`
	ShadowMode     bool           `json:"shadow_mode,omitempty"`
	QuotaMode      bool           `json:"quota_mode,omitempty"`
	DetailedMetric bool           `json:"detailed_metric,omitempty"`
	ValueToMetric  bool           `json:"value_to_metric,omitempty"`
	ShareThreshold bool           `json:"share_threshold,omitempty"`
	Metadata       map[string]any `json:"metadata,omitempty"`
	Line           int            `json:"line"`
	Classes        *classesView   `json:"classes,omitempty"` // a pool's classes
	Descriptors    []ruleView     `json:"descriptors,omitempty"`
}

// classesView is a pool's classes as the config gives them, with each
// ceiling in force and what it admits in requests.
type classesView struct {
	Key      string        `json:"key"`
	Ceilings []ceilingView `json:"ceilings"`
	Lowest   string        `json:"lowest"` // the class of a missing or unknown value
}

type ceilingView struct {
	Value    string `json:"value"`
	Ceiling  string `json:"ceiling"`
	Requests uint32 `json:"requests"` // floor(requests_per_unit x ceiling)
}

type limitView struct {
	Name            string   `json:"name,omitempty"`
	RequestsPerUnit uint32   `json:"requests_per_unit"`
	Unit            string   `json:"unit"`
	UnitMultiplier  uint32   `json:"unit_multiplier,omitempty"`
	Window          string   `json:"window"`
	Algorithm       string   `json:"algorithm"`
	Burst           uint32   `json:"burst,omitempty"`
	SubWindows      uint8    `json:"sub_windows,omitempty"`
	Overdraw        *bool    `json:"overdraw,omitempty"`
	Replaces        []string `json:"replaces,omitempty"`
}

func describeLimit(l *descriptors.Limit) *limitView {
	v := &limitView{Name: l.Name, RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit.String(), Window: l.Window().String(),
		Algorithm: l.Algorithm.String(), Burst: l.Burst, SubWindows: l.SubWindows, Overdraw: l.Overdraw, Replaces: l.Replaces}
	if l.UnitMultiplier > 1 {
		v.UnitMultiplier = l.UnitMultiplier
	}
	return v
}

// describeConfig renders cfg for /config; nil for no config.
func describeConfig(cfg *descriptors.Config) []configView {
	var out []configView
	for _, d := range cfg.Domains() {
		out = append(out, configView{Domain: d.Name, File: d.File, FailureMode: d.FailureMode.String(), Descriptors: describeRules(d.Name, d.Rules)})
	}
	return out
}

func describeRules(domain string, rules []*descriptors.Rule) []ruleView {
	out := make([]ruleView, 0, len(rules))
	for _, r := range rules {
		v := ruleView{Key: r.Key, Value: r.Value, Rule: strings.TrimPrefix(r.FullKey, domain+"."), Unlimited: r.Unlimited,
			ShadowMode: r.ShadowMode, QuotaMode: r.QuotaMode, DetailedMetric: r.DetailedMetric, ValueToMetric: r.ValueToMetric,
			ShareThreshold: r.ShareThreshold, Metadata: r.Metadata, Line: r.Line, Descriptors: describeRules(domain, r.Children)}
		if l := r.Limit; l != nil {
			if l.Name != "" {
				v.Rule = l.Name
			}
			v.Limit = describeLimit(l)
		}
		if len(r.Limits) > 1 {
			for _, l := range r.Limits {
				v.Limits = append(v.Limits, describeLimit(l))
			}
		}
		if p := r.Pool; p != nil {
			v.Classes = &classesView{Key: p.Key, Lowest: p.Lowest.Value}
			for _, c := range p.Classes {
				v.Classes.Ceilings = append(v.Classes.Ceilings, ceilingView{Value: c.Value, Ceiling: c.CeilingText(), Requests: c.Rule.Limit.CeilingRequests()})
			}
		}
		out = append(out, v)
	}
	return out
}
