package statuspage

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

//go:embed assets
var assets embed.FS

// Sources are what the page shows besides the Recorder's counts. Every
// field may be nil or empty.
type Sources struct {
	// Config returns the config in force (its limited rules are listed even
	// before any traffic).
	Config func() *descriptors.Config
	// ConfigStatus returns where the config came from, its version, the last
	// load and its errors.
	ConfigStatus func() ConfigStatus
	// Health returns why the store cannot serve, "" when it can. It is called
	// once per /ui/api request with a 250 ms deadline.
	Health func(context.Context) string
	// StoreKind names the store: "redis", "memory".
	StoreKind string
	// Version is the running Sluice's version.
	Version string
}

// Handler serves the status page: GET /ui (the page), /ui/style.css and
// /ui/app.js (its assets, embedded) and /ui/api (the JSON the page polls
// every second). The page fetches nothing from anywhere else, which its
// Content-Security-Policy enforces. Handler is safe for concurrent use.
func Handler(r *Recorder, src Sources) http.Handler {
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded directory is part of the binary
	}
	files := http.FileServerFS(static)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui/api", func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(r.view(req.Context(), src))
	})
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, "/ui/", http.StatusFound)
	})
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", files))
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		mux.ServeHTTP(w, req)
	})
}

// view builds the /ui/api answer.
func (r *Recorder) view(ctx context.Context, src Sources) view {
	now := r.opts.Now()
	v := view{Now: now, Started: r.start, Version: src.Version, TopValues: max(r.opts.TopValues, 0)}
	var cfg *descriptors.Config
	if src.Config != nil {
		cfg = src.Config()
	}
	v.Rules = r.ruleViews(now, cfg)
	r.mu.RLock()
	v.DroppedRules = r.dropped
	r.mu.RUnlock()
	if src.ConfigStatus != nil {
		v.Config = src.ConfigStatus()
	}
	v.Store = r.store.view(now.Unix())
	v.Store.Kind, v.Store.Healthy = src.StoreKind, true
	if src.Health != nil {
		hctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		v.Store.Reason = src.Health(hctx)
		cancel()
		v.Store.Healthy = v.Store.Reason == ""
	}
	return v
}
