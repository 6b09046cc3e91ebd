package app

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/internal/settings"
	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// The paths and listeners that envoyproxy/ratelimit's deployments probe and
// scrape: /healthcheck on the HTTP listener, the
// debug listener with /rlconfig and pprof, and a listener of its own for
// the metrics.

// listen binds addr: a TCP host:port, or unix:PATH for a unix socket (a
// stale socket file left by an earlier process is removed first).
func listen(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(path)
		}
		return net.Listen("unix", path)
	}
	return net.Listen("tcp", addr)
}

// healthcheck answers GET /healthcheck as envoyproxy/ratelimit does: 200
// "OK" while healthy, 500 from SIGTERM on, until Redis has first answered
// (the peer does not start without it, and Envoy Gateway's liveness,
// readiness and startup probes all ask /healthcheck), and, as
// --healthcheck-requires says, while no config with a domain is loaded or
// the store is unreachable. Unlike /readyz it ignores a later Redis outage
// unless told to, so that the outage does not make Kubernetes restart every
// replica through a liveness probe on it.
func (srv *server) healthcheck(w http.ResponseWriter, _ *http.Request) {
	reason := ""
	switch cfg := srv.core.Config(); {
	case srv.stopping.Load():
		reason = "shutting down"
	case srv.store.notWarm():
		reason = "store has not answered yet"
	case srv.set.HealthNeedsConfig() && (cfg == nil || len(cfg.Domains()) == 0):
		reason = "no config with a domain loaded"
	case srv.set.HealthNeedsStore() && srv.store.fallible() && !srv.store.up.Load():
		reason = "store unreachable"
	}
	if reason != "" {
		http.Error(w, reason, http.StatusInternalServerError)
		return
	}
	io.WriteString(w, "OK")
}

// jsonHandler serves POST /json, envoyproxy/ratelimit's HTTP twin of
// ShouldRateLimit, as --json says: counting as gRPC does, as checks only
// (rls.Options.JSONCheckOnly), or not at all (404 naming the setting): the
// HTTP port is reached by kubelets and Prometheus, far more than gRPC is.
func (srv *server) jsonHandler() http.Handler {
	if srv.set.JSON == "off" {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "POST /json is off (--json=off)", http.StatusNotFound)
		})
	}
	return srv.svc.JSONHandler()
}

// debugHandler serves the debug listener: /rlconfig (the config in force,
// as envoyproxy/ratelimit prints it, and for a config over xDS a last line
// naming its server, node id and version), pprof under /debug/pprof/, and an
// index at /.
func (srv *server) debugHandler() http.Handler {
	mux := http.NewServeMux()
	endpoints := map[string]string{
		"/rlconfig":            "print out the currently loaded configuration for debugging",
		"/debug/pprof/":        "root of various pprof endpoints. hit for help.",
		"/debug/pprof/profile": "CPU profiling endpoint",
		"/debug/pprof/trace":   "trace endpoint",
	}
	mux.HandleFunc("/rlconfig", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		writeRLConfig(w, srv.core.Config())
		if si := srv.config.Info(); si.Kind == "xds" {
			// envoyproxy/ratelimit prints the rules alone; a config over
			// xDS also says where it came from, after them.
			fmt.Fprintf(w, "# config source: xds server=%s node_id=%s version=%s connected=%t\n",
				si.Server, si.NodeID, si.Version, si.Connected != nil && *si.Connected)
		}
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		for _, p := range []string{"/debug/pprof/", "/debug/pprof/profile", "/debug/pprof/trace", "/rlconfig"} {
			fmt.Fprintf(w, "%s: %s\n", p, endpoints[p])
		}
	})
	return mux
}

// cmdline answers /debug/pprof/cmdline as pprof.Cmdline does, the
// arguments separated by NUL bytes, with the secrets they hold redacted
// (redactArgs): the debug listener may be reached by more than the
// operator who started the process.
func cmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, strings.Join(redactArgs(os.Args), "\x00"))
}

// redactArgs returns args with the secrets they hold replaced: the value of
// a secret flag (settings.IsSecret) by "(set)", the password of a URL (in
// --redis-url, or any argument holding "://") by "xxxxx".
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	secretNext := false
	for i, a := range args {
		switch name, v, hasV := strings.Cut(strings.TrimLeft(a, "-"), "="); {
		case secretNext:
			out[i], secretNext = "(set)", false
		case strings.HasPrefix(a, "-") && settings.IsSecret(name):
			out[i], secretNext = a, !hasV
			if hasV {
				out[i] = a[:len(a)-len(v)] + "(set)"
			}
		case strings.HasPrefix(a, "-") && hasV:
			out[i] = a[:len(a)-len(v)] + settings.RedactURL(v)
		default:
			out[i] = settings.RedactURL(a)
		}
	}
	return out
}

// writeRLConfig prints cfg as envoyproxy/ratelimit's /rlconfig does: one
// line per limit, depth first in config order, "FULL_KEY: unit=MINUTE
// requests_per_unit=10, shadow_mode: false, quota_mode: false" (an
// unlimited rule has unit=UNKNOWN and 0); each limit of a rate_limits list
// has a line of its own, its FULL_KEY followed by "[name]", the name the
// metrics and headers give it (Rule.LimitName), a line the peer, which has
// no such lists, never prints. Domains come in name order. A nil cfg prints nothing.
func writeRLConfig(w io.Writer, cfg *descriptors.Config) {
	line := func(key string, l *descriptors.Limit, r *descriptors.Rule) {
		fmt.Fprintf(w, "%s: %s, shadow_mode: %t, quota_mode: %t\n", key, rlLimit(l), r.ShadowMode, r.QuotaMode)
	}
	var walk func(domain string, rules []*descriptors.Rule)
	walk = func(domain string, rules []*descriptors.Rule) {
		for _, r := range rules {
			switch {
			case len(r.Limits) > 1:
				for _, l := range r.Limits {
					line(r.FullKey+"["+r.LimitName(domain, l)+"]", l, r)
				}
			case r.Limit != nil || r.Unlimited:
				line(r.FullKey, r.Limit, r)
			}
			walk(domain, r.Children)
		}
	}
	for _, d := range cfg.Domains() {
		walk(d.Name, d.Rules)
	}
}

// rlLimit is l as /rlconfig prints it: "unit=MINUTE requests_per_unit=10"
// (unit=UNKNOWN and 0 for nil, an unlimited rule), then what the peer's
// line cannot say, each only when set: unit_multiplier, algorithm (other
// than the default sliding window) and burst.
func rlLimit(l *descriptors.Limit) string {
	if l == nil {
		return "unit=UNKNOWN requests_per_unit=0"
	}
	s := fmt.Sprintf("unit=%s requests_per_unit=%d", strings.ToUpper(l.Unit.String()), l.RequestsPerUnit)
	if l.UnitMultiplier > 1 {
		s += fmt.Sprintf(" unit_multiplier=%d", l.UnitMultiplier)
	}
	if l.Algorithm != limiter.SlidingWindow {
		s += " algorithm=" + l.Algorithm.String()
	}
	if l.Burst > 0 {
		s += fmt.Sprintf(" burst=%d", l.Burst)
	}
	return s
}

// configLoads returns the config loads that succeeded and those that
// failed so far (sluice_config_loads_total), for envoyproxy/ratelimit's
// config-load counters; none before the config source is set up.
func (srv *server) configLoads() (ok, failed uint64) {
	if srv.config == nil {
		return 0, 0
	}
	return srv.config.Loads()
}

// metricsHandler serves the metrics alone at --metrics-path, for
// --metrics-addr (envoyproxy/ratelimit's PROMETHEUS_ADDR).
func (srv *server) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET "+srv.set.MetricsPath, promhttp.HandlerFor(srv.reg, promhttp.HandlerOpts{}))
	return mux
}

// bindExtra binds the debug and metrics listeners the settings ask for.
func (srv *server) bindExtra() error {
	s := srv.set
	for _, l := range []struct {
		flag, addr string
		h          http.Handler
	}{{"--debug-addr", s.DebugAddr, srv.debugHandler()}, {"--metrics-addr", s.MetricsAddr, srv.metricsHandler()}} {
		if l.addr == "" {
			continue
		}
		ln, err := listen(l.addr)
		if err != nil {
			return fmt.Errorf("%s: %w (set %s to another address, or empty to turn it off)", l.flag, err, l.flag)
		}
		srv.extra = append(srv.extra, extraListener{name: strings.TrimPrefix(l.flag, "--"), ln: ln,
			srv: &http.Server{Handler: l.h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: httpIdleTimeout, MaxHeaderBytes: httpMaxHeaderBytes}})
	}
	return nil
}

// extraListener is one of the debug and metrics listeners.
type extraListener struct {
	name string // debug-addr, metrics-addr
	ln   net.Listener
	srv  *http.Server
}

// certReloader serves the gRPC certificate from its files and reads them
// again when either file changes (a Kubernetes Secret update), as
// envoyproxy/ratelimit does. A file that no longer loads keeps the last
// good certificate. It is safe for concurrent use.
type certReloader struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	modTime time.Time
}

func newCertReloader(certFile, keyFile string) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	r.cert, r.modTime = &cert, r.latest()
	return r, nil
}

// latest is the later modification time of the two files.
func (r *certReloader) latest() time.Time {
	var t time.Time
	for _, f := range []string{r.certFile, r.keyFile} {
		if fi, err := os.Stat(f); err == nil && fi.ModTime().After(t) {
			t = fi.ModTime()
		}
	}
	return t
}

// getCertificate implements tls.Config.GetCertificate.
func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.latest(); !t.Equal(r.modTime) {
		if cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile); err == nil {
			r.cert, r.modTime = &cert, t
		}
	}
	return r.cert, nil
}
