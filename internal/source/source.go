package source

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// configSink is what configs are delivered to: the service that decides
// with the config in force (*ratelimit.Service).
type configSink interface {
	// SetConfig makes c the config of every call that starts after it.
	SetConfig(c *descriptors.Config)
	// Config returns the config in force, nil if none.
	Config() *descriptors.Config
}

// deliverFunc receives the outcome of one load of a source: a config that
// built (err nil), or the builder's errors (cfg nil).
type deliverFunc func(cfg *descriptors.Config, err error)

// configSource is a place configs come from: files (fileSource) or an xDS
// server (xdsSource). A source builds its configs with pkg/descriptors (Load,
// or Build on Documents of its own) and delivers every outcome; what to do
// with one (swap it in, count it, log it, show it on /config) is
// configState's.
//
// To add a source: convert what it holds into descriptors.Documents (File
// names it in errors, e.g. "xds:<resource name>"), call descriptors.Build,
// deliver the result from Run, describe it in Info, and hand it to
// newConfigState in newServer. Rules, errors and the swap stay shared.
type configSource interface {
	// Run watches the source until ctx ends and delivers each new outcome:
	// a config that built, or the errors of one that did not. It never
	// delivers the same content twice in a row. It returns nil once ctx
	// ends, or at once an error if it cannot watch at all.
	Run(ctx context.Context, deliver deliverFunc) error
	// Info describes the source for /config and logs. It is safe for
	// concurrent use.
	Info() sourceInfo
}

// sourceInfo describes a config source.
type sourceInfo struct {
	// Kind is "file" or "xds".
	Kind string `json:"kind"`
	// Path is --config, for a file source.
	Path string `json:"path,omitempty"`
	// Server and NodeID are --xds-server and --xds-node-id, for an xds
	// source.
	Server string `json:"server,omitempty"`
	NodeID string `json:"node_id,omitempty"`
	// Connected reports, for an xds source, that its stream is open.
	Connected *bool `json:"connected,omitempty"`
	// Version is the xDS version_info of the config in force, and
	// RefusedVersion that of the last one refused since ("" if none).
	Version        string `json:"version,omitempty"`
	RefusedVersion string `json:"refused_version,omitempty"`
}

// fields are the log fields that name the source.
func (si sourceInfo) fields() []zap.Field {
	switch {
	case si.Path != "":
		return []zap.Field{zap.String("config_file", si.Path)}
	case si.Kind == "xds":
		f := []zap.Field{zap.String("config_source", si.Kind), zap.String("xds_server", si.Server),
			zap.String("node_id", si.NodeID), zap.String("version", si.Version)}
		if si.RefusedVersion != "" {
			f = append(f, zap.String("refused_version", si.RefusedVersion))
		}
		return f
	}
	return []zap.Field{zap.String("config_source", si.Kind)}
}

// configState puts the configs a source delivers into force and keeps the
// outcome of the last load, for /config, the metrics and the logs. It is
// safe for concurrent use.
type configState struct {
	sink    configSink
	src     configSource
	log     *zap.Logger
	version string // the binary's, for /config; set before use

	mu       sync.Mutex
	files    []string
	domains  []string
	loadedAt time.Time
	lastErr  []string
	errAt    time.Time

	reloads *prometheus.CounterVec // result: ok, error
	lastOK  prometheus.Gauge

	cfg        *descriptors.Config // in force, for /config's rules (ui.go)
	cfgVersion string              // of cfg: configVersion
}

// newConfigState registers the config metrics on reg and returns the state
// that feeds sink from src.
func newConfigState(reg prometheus.Registerer, sink configSink, src configSource, log *zap.Logger) *configState {
	cs := &configState{
		sink: sink,
		src:  src,
		log:  log,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_config_loads_total",
			Help: "Config loads (the first one and every reload), by result (ok, error)."}, []string{"result"}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_config_last_load_success",
			Help: "1 if the last config load succeeded, 0 if it failed and an older config (or none) is in force."}),
	}
	reg.MustRegister(cs.reloads, cs.lastOK)
	return cs
}

// run runs the source until ctx ends, delivering to cs. A source that
// cannot run is logged: the config in force stays, without reloads.
func (cs *configState) run(ctx context.Context) {
	if err := cs.src.Run(ctx, cs.deliver); err != nil {
		cs.log.Error("cannot watch config, hot reload is off", append(cs.src.Info().fields(), zap.Error(err))...)
	}
}

// deliver takes one outcome of a load. A config that built goes into force;
// an error keeps the config in force, and is logged and kept for /config.
func (cs *configState) deliver(cfg *descriptors.Config, err error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if err != nil {
		cs.reloads.WithLabelValues("error").Inc()
		cs.lastOK.Set(0)
		cs.lastErr = cs.lastErr[:0]
		msg := "config error, keeping the config in force"
		if cs.sink.Config() == nil {
			msg = "config error, no config in force"
		}
		fields := cs.src.Info().fields()
		for _, e := range unjoin(err) {
			cs.lastErr = append(cs.lastErr, e.Error())
			cs.log.Error(msg, append(fields, zap.Error(e))...)
		}
		cs.errAt = time.Now()
		return
	}
	for _, w := range cfg.Warnings {
		cs.log.Warn("config warning", zap.Error(w))
	}
	cs.sink.SetConfig(cfg)
	cs.reloads.WithLabelValues("ok").Inc()
	cs.lastOK.Set(1)
	cs.files = cfg.Files
	cs.domains = cs.domains[:0]
	for _, d := range cfg.Domains() {
		cs.domains = append(cs.domains, d.Name)
	}
	cs.loadedAt = time.Now()
	cs.lastErr = nil
	cs.cfg, cs.cfgVersion = cfg, configVersion(cfg)
	fields := []zap.Field{zap.Strings("config_file", cfg.Files), zap.Int("domains", len(cfg.Domains()))}
	if si := cs.src.Info(); si.Kind != "file" {
		fields = append(fields, si.fields()...)
	}
	cs.log.Info("config loaded", fields...)
}

// ServeHTTP answers /config: the source, the config in force (its files,
// domains, load time, version and every domain's rules with their names,
// limits and algorithms) and the errors of the last load if it failed.
func (cs *configState) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	cs.mu.Lock()
	out := struct {
		Version   string     `json:"version"`
		Source    sourceInfo `json:"source"`
		Files     []string   `json:"files"`
		Domains   []string   `json:"domains"`
		LoadedAt  *time.Time `json:"loaded_at,omitempty"`
		LastError []string   `json:"last_error,omitempty"`
		ErrorAt   *time.Time `json:"last_error_at,omitempty"`
		// ConfigVersion identifies the rules in force (configVersion).
		ConfigVersion string       `json:"config_version,omitempty"`
		Rules         []configView `json:"rules"`
	}{Version: cs.version, Source: cs.src.Info(), Files: cs.files, Domains: cs.domains, LastError: cs.lastErr,
		ConfigVersion: cs.cfgVersion, Rules: describeConfig(cs.cfg)}
	if !cs.loadedAt.IsZero() {
		t := cs.loadedAt
		out.LoadedAt = &t
	}
	if len(cs.lastErr) > 0 {
		t := cs.errAt
		out.ErrorAt = &t
	}
	cs.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(out)
}
