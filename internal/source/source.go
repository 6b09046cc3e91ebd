package source

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/sluicehq/sluice/internal/settings"
	"github.com/sluicehq/sluice/pkg/descriptors"
)

// Sink is what configs are delivered to: the service that decides with the
// config in force (*ratelimit.Service).
type Sink interface {
	// SetConfig makes c the config of every call that starts after it.
	SetConfig(c *descriptors.Config)
	// Config returns the config in force, nil if none.
	Config() *descriptors.Config
}

// Deliver receives the outcome of one load of a source: a config that
// built (err nil), or the builder's errors (cfg nil).
type Deliver func(cfg *descriptors.Config, err error)

// Source is a place configs come from: files (fileSource) or an xDS server
// (xdsSource). A source builds its configs with pkg/descriptors (Load, or
// Build on Documents of its own) and delivers every outcome; what to do with
// one (swap it in, count it, log it, show it on /config) is State's.
//
// To add a source: convert what it holds into descriptors.Documents (File
// names it in errors, e.g. "xds:<resource name>"), call descriptors.Build,
// deliver the result from Load and Run, describe it in Info, and choose it
// in New. Rules, errors and the swap stay shared.
type Source interface {
	// Load makes the first load, before the server serves: it delivers
	// the outcome of loading what the source holds now, and reports
	// whether it did so by the time it returns (a slow load may deliver
	// later). A source whose configs arrive only while it runs (xDS)
	// delivers nothing.
	Load(deliver Deliver) bool
	// Run watches the source until ctx ends and delivers each new outcome:
	// a config that built, or the errors of one that did not. It never
	// delivers the same content twice in a row. It returns nil once ctx
	// ends, or at once an error if it cannot watch at all.
	Run(ctx context.Context, deliver Deliver) error
	// Info describes the source for /config and logs. It is safe for
	// concurrent use.
	Info() Info
}

// Info describes a config source: /config's "source" and the log fields
// that name it.
type Info struct {
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

// Fields are the log fields that name the source.
func (si Info) Fields() []zap.Field {
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

// State puts the configs a source delivers into force and keeps the
// outcome of the last load, for /config, the metrics and the logs: a config
// that does not build never replaces the one in force. It is safe for
// concurrent use.
type State struct {
	sink Sink
	src  Source
	log  *zap.Logger

	mu       sync.Mutex
	files    []string
	domains  []string
	loadedAt time.Time
	lastErr  []string
	errAt    time.Time

	reloads *prometheus.CounterVec // result: ok, error
	lastOK  prometheus.Gauge

	cfg *descriptors.Config // in force, for /config's rules
	// policy is applied to every config the source builds (the process
	// defaults and the overlay in force); base is the last config the
	// source built, before it, which a new overlay is applied to.
	policy *descriptors.Policy
	base   *descriptors.Config
	// overlay watches --overlay, nil without one; Run runs it.
	overlay *overlayWatch
}

// NewState registers the config metrics on reg and returns the state that
// feeds sink from src.
func NewState(reg prometheus.Registerer, sink Sink, src Source, log *zap.Logger) *State {
	return NewPolicyState(reg, sink, src, nil, log)
}

// NewPolicyState is NewState with p, the policy applied to every config
// the source builds (nil for none), until SetPolicy changes it.
func NewPolicyState(reg prometheus.Registerer, sink Sink, src Source, p *descriptors.Policy, log *zap.Logger) *State {
	cs := &State{
		policy: p,
		sink:   sink,
		src:    src,
		log:    log,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_config_loads_total",
			Help: "Config loads (the first one and every reload), by result (ok, error)."}, []string{"result"}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_config_last_load_success",
			Help: "1 if the last config load succeeded, 0 if it failed and an older config (or none) is in force."}),
	}
	reg.MustRegister(cs.reloads, cs.lastOK)
	return cs
}

// Load makes the source's first load, delivered to cs as every later one.
func (cs *State) Load() {
	cs.src.Load(cs.deliver)
}

// Run runs the source until ctx ends, delivering to cs. A source that
// cannot run is logged: the config in force stays, without reloads.
func (cs *State) Run(ctx context.Context) {
	if o := cs.overlay; o != nil {
		go func() {
			if err := o.Run(ctx); err != nil {
				cs.log.Error("cannot watch the overlay, its hot reload is off", zap.Error(err))
			}
		}()
	}
	if err := cs.src.Run(ctx, cs.deliver); err != nil {
		cs.log.Error("cannot watch config, hot reload is off", append(cs.src.Info().Fields(), zap.Error(err))...)
	}
}

// Info describes the source.
func (cs *State) Info() Info { return cs.src.Info() }

// Loads returns how many loads (the first and every reload) succeeded and
// how many failed so far: sluice_config_loads_total.
func (cs *State) Loads() (ok, failed uint64) {
	value := func(result string) uint64 {
		var m dto.Metric
		if err := cs.reloads.WithLabelValues(result).Write(&m); err != nil {
			return 0
		}
		return uint64(m.GetCounter().GetValue())
	}
	return value("ok"), value("error")
}

// Status is the outcome of the loads so far.
type Status struct {
	Source Info
	// Config is the config in force, nil if none; Files and Domains are
	// its files and domains, LoadedAt when it was loaded.
	Config   *descriptors.Config
	Files    []string
	Domains  []string
	LoadedAt time.Time
	// LastError holds the errors of the last load if it failed (nil if it
	// did not), ErrorAt when.
	LastError []string
	ErrorAt   time.Time
}

// Status returns the outcome of the loads so far.
func (cs *State) Status() Status {
	info := cs.src.Info()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	st := Status{Source: info, Config: cs.cfg, Files: cs.files, Domains: append([]string(nil), cs.domains...), LoadedAt: cs.loadedAt,
		LastError: append([]string(nil), cs.lastErr...)}
	if len(cs.lastErr) > 0 {
		st.ErrorAt = cs.errAt
	}
	return st
}

// deliver takes one outcome of a load. A config that built goes into force
// with the policy applied; an error (the source's, or the policy's on the
// new config) keeps the config in force, and is logged and kept for
// /config.
func (cs *State) deliver(cfg *descriptors.Config, err error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if err == nil {
		if cs.policy.Zero() && cs.overlay == nil {
			cfg = cfg.Lean() // no policy will be applied to it
		}
		cs.base = cfg
		if !cs.policy.Zero() {
			cfg, err = cs.policy.Rebuild(cfg)
		}
	}
	if err != nil {
		cs.fail(err, "config error, keeping the config in force", "config error, no config in force")
		return
	}
	cs.put(cfg)
}

// fail records a load that failed: logged (as kept, or as none when no
// config is in force), counted and kept for /config.
func (cs *State) fail(err error, kept, none string) {
	cs.reloads.WithLabelValues("error").Inc()
	cs.lastOK.Set(0)
	cs.lastErr = cs.lastErr[:0]
	msg := kept
	if cs.sink.Config() == nil {
		msg = none
	}
	fields := cs.src.Info().Fields()
	for _, e := range unjoin(err) {
		cs.lastErr = append(cs.lastErr, e.Error())
		cs.log.Error(msg, append(fields, zap.Error(e))...)
	}
	cs.errAt = time.Now()
}

// put puts cfg, which built, into force.
func (cs *State) put(cfg *descriptors.Config) {
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
	cs.cfg = cfg
	fields := append(fileFields(cfg.Files), zap.Int("domains", len(cfg.Domains())))
	if si := cs.src.Info(); si.Kind != "file" {
		fields = append(fields, si.Fields()...)
	}
	cs.log.Info("config loaded", fields...)
}

// loggedFiles is how many file names the "config loaded" line lists: a
// directory of 100,000 files made that line 3.6 MB, once per reload.
const loggedFiles = 10

// fileFields are the "config loaded" line's fields that name the files:
// config_file lists at most loggedFiles of them, in load order, and
// config_files_more counts those left out (only when some are). /config
// lists them all.
func fileFields(files []string) []zap.Field {
	if len(files) <= loggedFiles {
		return []zap.Field{zap.Strings("config_file", files)}
	}
	return []zap.Field{zap.Strings("config_file", files[:loggedFiles]), zap.Int("config_files_more", len(files)-loggedFiles)}
}

// unjoin splits an errors.Join into its errors.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// New returns the source the settings name: the xDS server of --xds-server,
// or else the files of --config, watched. It returns an error naming the
// setting when the xDS source cannot be set up (its TLS files, say).
func New(s *settings.Settings, reg prometheus.Registerer, log *zap.Logger) (Source, error) {
	if s.XDS.Server != "" {
		return newXDSSource(&s.XDS, reg, log)
	}
	return newFileSource(s.Config, s.Selection(), s.ReloadDebounce, log), nil
}
