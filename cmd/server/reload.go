package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// configState is the config in force and the outcome of the last load, for
// /config. It is safe for concurrent use.
type configState struct {
	mu       sync.Mutex
	files    []string
	domains  []string
	loadedAt time.Time
	lastErr  []string
	errAt    time.Time

	reloads *prometheus.CounterVec // result: ok, error
	lastOK  prometheus.Gauge

	fp    [sha256.Size]byte // fingerprint of the files last loaded
	fpSet bool
}

func newConfigState(reg prometheus.Registerer) *configState {
	cs := &configState{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_config_loads_total",
			Help: "Config loads (the first one and every reload), by result (ok, error)."}, []string{"result"}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_config_last_load_success",
			Help: "1 if the last config load succeeded, 0 if it failed and an older config (or none) is in force."}),
	}
	reg.MustRegister(cs.reloads, cs.lastOK)
	return cs
}

// load loads path and, if it is valid, makes it svc's config. A bad config
// keeps the one in force; its errors are logged and kept for /config.
func (cs *configState) load(path string, svc *ratelimit.Service, log *zap.Logger) bool {
	fp := fingerprint(path)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.fpSet && fp == cs.fp {
		return false // an event that changed no config file (a log file beside it, a touch)
	}
	cs.fp, cs.fpSet = fp, true
	cfg, err := descriptors.Load(path)
	if err != nil {
		cs.reloads.WithLabelValues("error").Inc()
		cs.lastOK.Set(0)
		cs.lastErr = cs.lastErr[:0]
		msg := "config error, keeping the config in force"
		if svc.Config() == nil {
			msg = "config error, no config in force"
		}
		for _, e := range unjoin(err) {
			cs.lastErr = append(cs.lastErr, e.Error())
			log.Error(msg, zap.String("config_file", path), zap.Error(e))
		}
		cs.errAt = time.Now()
		return false
	}
	for _, w := range cfg.Warnings {
		log.Warn("config warning", zap.Error(w))
	}
	svc.SetConfig(cfg)
	cs.reloads.WithLabelValues("ok").Inc()
	cs.lastOK.Set(1)
	cs.files = cfg.Files
	cs.domains = cs.domains[:0]
	for _, d := range cfg.Domains() {
		cs.domains = append(cs.domains, d.Name)
	}
	cs.loadedAt = time.Now()
	cs.lastErr = nil
	log.Info("config loaded", zap.Strings("config_file", cfg.Files), zap.Int("domains", len(cfg.Domains())))
	return true
}

// fingerprint hashes what a load of path would read: the YAML files of the
// directory (dotfiles skipped, symlinks followed) or the file, names and
// contents. Unreadable files hash their error, so a change there counts.
func fingerprint(path string) [sha256.Size]byte {
	h := sha256.New()
	add := func(name string) {
		data, err := os.ReadFile(name)
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(data))
		h.Write(data)
		if err != nil {
			fmt.Fprintf(h, "error %v\x00", err)
		}
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			fmt.Fprintf(h, "error %v", err)
		}
		for _, e := range entries {
			n := e.Name()
			if ext := filepath.Ext(n); !strings.HasPrefix(n, ".") && (ext == ".yaml" || ext == ".yml") {
				add(filepath.Join(path, n))
			}
		}
	} else {
		add(path)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// ServeHTTP answers /config: the config in force (its files, domains and
// load time) and the errors of the last load if it failed.
func (cs *configState) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	cs.mu.Lock()
	out := struct {
		Files     []string   `json:"files"`
		Domains   []string   `json:"domains"`
		LoadedAt  *time.Time `json:"loaded_at,omitempty"`
		LastError []string   `json:"last_error,omitempty"`
		ErrorAt   *time.Time `json:"last_error_at,omitempty"`
	}{Files: cs.files, Domains: cs.domains, LastError: cs.lastErr}
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

// watchConfig reloads path whenever it changes, until ctx ends. It watches
// the directory that holds the config (the config itself when it is a
// directory), so it sees editors' rename-on-save and the symlink swap of a
// Kubernetes ConfigMap (..data -> ..2026_...), and waits debounce after the
// last event before loading, so a burst of writes is one reload.
func watchConfig(ctx context.Context, path string, debounce time.Duration, reload func(), log *zap.Logger) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	// Watch the config's directory (or the config itself when it is one),
	// the directory holding it (a symlinked directory is swapped there), and
	// the current target of a symlink, re-resolved after every reload. A
	// ConfigMap's files are symlinks through ..data into a timestamped
	// directory, and its update is the swap of ..data inside the watched
	// directory.
	watch := func() {
		w.Add(filepath.Dir(path))
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			w.Add(path)
		}
		if target, err := filepath.EvalSymlinks(path); err == nil {
			w.Add(filepath.Dir(target))
			if fi, err := os.Stat(target); err == nil && fi.IsDir() {
				w.Add(target)
			}
		}
	}
	// In the directory holding the config, only the config itself and
	// Kubernetes' ..data links matter; a log file written there must not
	// trigger reloads. Every reload is also skipped when no config file
	// changed (see fingerprint).
	parent := filepath.Dir(filepath.Clean(path))
	relevant := func(name string) bool {
		name = filepath.Clean(name)
		return filepath.Dir(name) != parent || name == filepath.Clean(path) || strings.HasPrefix(filepath.Base(name), "..")
	}
	if err := w.Add(filepath.Dir(path)); err != nil {
		return err
	}
	watch()
	log.Info("watching config", zap.String("config_file", path))
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Has(fsnotify.Chmod) && !ev.Has(fsnotify.Write) || !relevant(ev.Name) {
				continue
			}
			timer.Reset(debounce)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			log.Warn("config watch error", zap.Error(err))
		case <-timer.C:
			reload()
			watch()
		}
	}
}
