package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/sluicehq/sluice/internal/statuspage"
	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// uiSettings are the status page's settings (rows in settings.table).
type uiSettings struct {
	UI          bool
	UITopValues int
	UISensitive string
}

// validateOps checks the status page's and the tracing settings.
func (s *settings) validateOps() error {
	if s.UITopValues < 0 || s.UITopValues > 100 {
		return fmt.Errorf("--ui-top-values: %d is not in 0..100", s.UITopValues)
	}
	return s.validateTracing()
}

// wrapOps wraps the store for the status page (which times every call)
// and for tracing (a span per call), as the settings ask, and creates the
// status page's recorder and the tracer provider.
func (srv *server) wrapOps() error {
	srv.newStatusPage()
	t, err := newTracing(context.Background(), &srv.set.tracingSettings)
	if err != nil {
		return err
	}
	srv.trace = t
	srv.store = t.wrapStore(srv.store, srv.storeKind())
	return nil
}

// closeTracing flushes the spans not yet exported, for at most 5 s.
func (srv *server) closeTracing() {
	if srv.trace == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.trace.close(ctx); err != nil {
		srv.log.Warn("flushing traces", zap.Error(err))
	}
	srv.trace = nil
}

// storeKind names the store: "redis" or "memory".
func (srv *server) storeKind() string {
	if srv.ping != nil {
		return "redis"
	}
	return "memory"
}

// newStatusPage creates the status page's recorder when --ui is on (nil
// otherwise) and wraps the store so the page sees its calls.
func (srv *server) newStatusPage() {
	s := srv.set
	if !s.UI {
		return
	}
	top := s.UITopValues
	if top == 0 {
		top = -1 // 0 in the setting turns values off; 0 in Options means the default
	}
	srv.status = statuspage.NewRecorder(statuspage.Options{
		TopValues:      top,
		Sensitive:      splitList(s.UISensitive),
		NearLimitRatio: s.nearLimitRatio(),
	})
	srv.store = srv.status.WrapStore(srv.store)
}

// observers are the decision observers besides the metrics.
func (srv *server) observers() []ratelimit.Observer {
	if srv.status == nil {
		return nil
	}
	return []ratelimit.Observer{srv.status}
}

// handleUI adds /ui and /ui/api to mux when the status page is on.
func (srv *server) handleUI(mux *http.ServeMux) {
	if srv.status == nil {
		return
	}
	h := statuspage.Handler(srv.status, statuspage.Sources{
		Config:       srv.core.Config,
		ConfigStatus: srv.config.pageStatus,
		Health: func(ctx context.Context) string {
			if srv.ping == nil {
				return ""
			}
			if err := srv.ping(ctx); err != nil {
				return "store unreachable: " + err.Error()
			}
			return ""
		},
		StoreKind: srv.storeKind(),
		Version:   version,
	})
	mux.Handle("GET /ui", h)
	mux.Handle("GET /ui/", h)
}

// pageStatus is the config's status as the status page shows it: the
// source (file path, or xDS server and node id), the version (the hash of
// the rules, after the xDS version_info when there is one), the last load
// and its errors.
func (cs *configState) pageStatus() statuspage.ConfigStatus {
	info := cs.src.Info()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	st := statuspage.ConfigStatus{Source: info.Kind, Version: cs.cfgVersion, LoadedAt: cs.loadedAt,
		Errors: append([]string(nil), cs.lastErr...)}
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
	if len(cs.lastErr) > 0 {
		st.ErrorAt = cs.errAt
	}
	return st
}

// configVersion identifies a config by its content: the first 12 hex
// digits of the SHA-256 of its rules as /config shows them, so replicas that
// loaded the same rules show the same version whatever the source.
func configVersion(cfg *descriptors.Config) string {
	b, err := json.Marshal(describeConfig(cfg))
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
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
	Descriptors    []ruleView     `json:"descriptors,omitempty"`
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
		out = append(out, v)
	}
	return out
}
