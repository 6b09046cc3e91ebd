package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/settings"
	"github.com/sluicehq/sluice/internal/source"
	"github.com/sluicehq/sluice/internal/statuspage"
	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
	"github.com/sluicehq/sluice/pkg/rlqs"
	"github.com/sluicehq/sluice/pkg/rls"
)

// rlsServiceName is the gRPC service whose health Envoy and Kubernetes probe.
const rlsServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// rlqsServiceName is the gRPC service of Envoy's rate limit quota streams,
// also reported by gRPC health.
const rlqsServiceName = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"

// Connection limits of the listeners. Envoy keeps its gRPC connections open
// and reconnects at once when one closes, so closing idle ones costs it
// nothing; a connection that sends nothing at all holds a transport
// goroutine set (about 3 goroutines and 17 KB each) until then.
const (
	// httpIdleTimeout closes an HTTP keep-alive connection idle this long.
	httpIdleTimeout = 2 * time.Minute
	// httpMaxHeaderBytes bounds the request headers of the HTTP listener.
	httpMaxHeaderBytes = 64 << 10
	// grpcMaxConnectionIdle closes a gRPC connection with no call in flight
	// for this long (a GOAWAY: the client reconnects on its next call).
	grpcMaxConnectionIdle = 5 * time.Minute
)

// grpcStreamWorkers is the number of goroutines that serve gRPC calls and
// are reused from call to call (grpc.NumStreamWorkers); a call that finds
// none idle gets a goroutine of its own, as without them. A fresh goroutine
// starts with a small stack and grows it during every call (copying it,
// runtime.copystack): 9% of the service's CPU at 64 callers on the Redis
// path (pprof during cmd/loadgen -concurrency 64), 1.5% with 64 workers.
// More is not better: every garbage collection shrinks the stacks of the
// idle workers, which then grow again (3% with 256). Their cost is their
// stacks, a few KB each.
const grpcStreamWorkers = 64

// server is one running Sluice: listeners, the rate-limit service and its
// store.
type server struct {
	set    *settings.Settings
	hooks  hooks
	log    *zap.Logger
	core   *ratelimit.Service
	svc    *rls.Service
	quota  *rlqs.Service // Envoy's rate limit quota streams
	store  *backend      // the store, its decorators and observers (backend.go)
	reg    *prometheus.Registry
	config *source.State
	page   *configPage          // renders /config and the status page's config status (config.go)
	status *statuspage.Recorder // the status page's, nil with --ui=false
	trace  *tracing             // nil with tracing off

	grpc     *grpc.Server
	health   *health.Server
	http     *http.Server
	grpcLn   net.Listener
	httpLn   net.Listener
	extra    []extraListener // the debug and metrics listeners, when set
	stopping atomic.Bool
	tenants  tenantPart // the tenant tables and their cache (tenants.go)
}

// hooks change what the settings select, for tests; the zero hooks change
// nothing.
type hooks struct {
	// wrapStore, when set, wraps the store the settings select.
	wrapStore func(limiter.Store) limiter.Store
	// exporter, when set, replaces the OTLP exporter of --tracing-enabled
	// and exports every span as it ends.
	exporter sdktrace.SpanExporter
	// now, when set, is the status page's clock (statuspage.Options.Now),
	// so that a test ends a second by moving it instead of waiting.
	now func() time.Time
	// delay, when set, waits out the shutdown delay instead of sleeping it,
	// so that a test acts inside the delay and then ends it.
	delay func(time.Duration)
}

// newServer loads the config, opens the store and binds both listeners. On
// error it releases whatever it had already acquired.
func newServer(s *settings.Settings, log *zap.Logger, h hooks) (_ *server, err error) {
	srv := &server{set: s, hooks: h, log: log, reg: prometheus.NewRegistry()}
	srv.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	defer func() {
		if err != nil {
			// serve never ran: release what was acquired, listeners included.
			for _, ln := range []net.Listener{srv.grpcLn, srv.httpLn} {
				if ln != nil {
					ln.Close()
				}
			}
			for _, x := range srv.extra {
				x.ln.Close()
			}
			srv.close()
		}
	}()
	if srv.store, err = openBackend(s, log); err != nil {
		return nil, err
	}
	srv.newStatusPage() // ui.go
	if srv.trace, err = newTracing(context.Background(), &s.TracingSettings, h.exporter); err != nil {
		return nil, err
	}
	srv.store.compose(s, srv.reg, h.wrapStore, srv.status, srv.trace)
	if err := srv.newServices(); err != nil {
		return nil, err
	}
	if err := srv.newConfig(); err != nil {
		return nil, err
	}

	if err := srv.newGRPC(); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /healthcheck", srv.healthcheck)
	mux.HandleFunc("GET /readyz", srv.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(srv.reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /config", srv.page)
	mux.Handle("/json", srv.jsonHandler()) // dropin.go
	srv.handleUI(mux)
	// A client that sends its headers or body slowly, or keeps a connection
	// idle, must not hold a goroutine and a socket for long.
	srv.http = &http.Server{Handler: mux, ReadHeaderTimeout: min(5*time.Second, s.HTTPReadTimeout), ReadTimeout: s.HTTPReadTimeout,
		IdleTimeout: httpIdleTimeout, MaxHeaderBytes: httpMaxHeaderBytes}

	if srv.grpcLn, err = listen(s.GRPCAddr); err != nil {
		return nil, fmt.Errorf("--grpc-addr: %w (set --grpc-addr to another address)", err)
	}
	if srv.httpLn, err = net.Listen("tcp", s.HTTPAddr); err != nil {
		return nil, fmt.Errorf("--http-addr: %w (set --http-addr to another address)", err)
	}
	if err := srv.bindExtra(); err != nil {
		return nil, err
	}
	return srv, nil
}

// recovery turns a panic in a gRPC handler into an Internal error for that
// call alone (Envoy then applies its failure mode to it), logged with its
// stack and counted, instead of the end of the process and of every
// domain's limits with it.
func (srv *server) recovery() []grpc.ServerOption {
	panics := prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_grpc_panics_total",
		Help: "gRPC calls whose handler panicked; each was answered with an Internal error and logged with its stack."})
	srv.reg.MustRegister(panics)
	handle := recovery.WithRecoveryHandler(func(p any) error {
		panics.Inc()
		srv.log.Error("gRPC handler panicked; the call answers Internal", zap.Any("panic", p), zap.StackSkip("stack", 3))
		return status.Errorf(codes.Internal, "sluice: internal error: %v", p)
	})
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(recovery.UnaryServerInterceptor(handle)),
		grpc.ChainStreamInterceptor(recovery.StreamServerInterceptor(handle))}
}

// newGRPC builds the gRPC server: the rate limit service, health and
// reflection, with TLS when the settings ask for it. Connections are closed
// after --grpc-max-connection-age (gRPC adds ±10% jitter), as
// envoyproxy/ratelimit does, so that Envoy's connections spread over
// replicas that were added since.
func (srv *server) newGRPC() error {
	s := srv.set
	opts := []grpc.ServerOption{grpc.ForceServerCodecV2(rlqs.Codec(rls.Codec())), grpc.MaxRecvMsgSize(s.MaxRequestBytes), rlqs.TagConnections(),
		grpc.NumStreamWorkers(grpcStreamWorkers), grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: grpcMaxConnectionIdle,
			MaxConnectionAge: ageOrInfinity(s.GRPCMaxAge), MaxConnectionAgeGrace: ageOrInfinity(s.GRPCMaxAgeGrace)})}
	if s.GRPCTLSCert != "" {
		creds, err := serverTLS(s)
		if err != nil {
			return err
		}
		opts = append(opts, grpc.Creds(creds))
	}
	opts = append(opts, srv.recovery()...)
	srv.grpc = grpc.NewServer(append(opts, srv.trace.serverOptions()...)...)
	rlsv3.RegisterRateLimitServiceServer(srv.grpc, srv.svc)
	rlqsv3.RegisterRateLimitQuotaServiceServer(srv.grpc, srv.quota)
	srv.health = health.NewServer()
	// NOT_SERVING until watchHealth's first check: gRPC health starts
	// SERVING, which a probe could see before the store is ready.
	for _, name := range []string{"", rlsServiceName, rlqsServiceName} {
		srv.health.SetServingStatus(name, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	healthpb.RegisterHealthServer(srv.grpc, srv.health)
	reflection.Register(srv.grpc)
	return nil
}

// ageOrInfinity is d, with 0 meaning no limit.
func ageOrInfinity(d time.Duration) time.Duration {
	if d == 0 {
		return time.Duration(math.MaxInt64)
	}
	return d
}

// newConfig sets up the config source the settings name (source.New) and
// makes its first load, which the file source waits for at most a moment
// (then the listeners open, not ready until it ends). A bad config at
// start is not fatal: Sluice serves NOT_SERVING (and answers UNAVAILABLE)
// until a good one loads, unless --start-without-config makes it serve an
// empty config (every domain unknown, answered OK) until then.
func (srv *server) newConfig() error {
	s, log := srv.set, srv.log
	if s.StartWithoutConfig {
		empty, _ := descriptors.Build()
		srv.core.SetConfig(empty)
		log.Info("starting without a config: every domain answers OK until one loads")
	}
	src, err := source.New(s, srv.reg, log)
	if err != nil {
		return err
	}
	srv.config = source.NewPolicyState(srv.reg, reloadSink{srv.core, srv.store}, src, &descriptors.Policy{Defaults: s.Defaults()}, log)
	if s.Overlay != "" {
		if err := srv.config.WatchOverlay(s.Overlay, s.Defaults(), s.ReloadDebounce); err != nil {
			return fmt.Errorf("--overlay: %w", err)
		}
	}
	srv.page = newConfigPage(srv.config, s)
	srv.config.Load()
	return nil
}

// serverTLS builds the gRPC listener's TLS, its certificate read again when
// its files change. With --grpc-client-ca, client certificates are verified
// against it: required, or only when sent (--grpc-client-auth=if-given),
// and with --grpc-client-san they must name that host.
func serverTLS(s *settings.Settings) (credentials.TransportCredentials, error) {
	certs, err := newCertReloader(s.GRPCTLSCert, s.GRPCTLSKey)
	if err != nil {
		return nil, fmt.Errorf("--grpc-tls-cert/--grpc-tls-key: %w", err)
	}
	cfg := &tls.Config{GetCertificate: certs.getCertificate, MinVersion: tls.VersionTLS12}
	if s.GRPCClientCA != "" {
		pem, err := os.ReadFile(s.GRPCClientCA)
		if err != nil {
			return nil, fmt.Errorf("--grpc-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--grpc-client-ca: no PEM certificate in %s", s.GRPCClientCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		if s.GRPCClientAuth == "if-given" {
			cfg.ClientAuth = tls.VerifyClientCertIfGiven
		}
		if san := s.GRPCClientSAN; san != "" {
			cfg.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
				if len(chains) == 0 || len(chains[0]) == 0 {
					return nil // no certificate sent (if-given): nothing to name
				}
				return chains[0][0].VerifyHostname(san)
			}
		}
	}
	return credentials.NewTLS(cfg), nil
}

// readyz answers 200 while the server is ready (a config is loaded, the
// store's connections are open and its library loaded, it answers, not
// shutting down) and 503 with the reason otherwise.
func (srv *server) readyz(w http.ResponseWriter, r *http.Request) {
	if reason := srv.notReady(r.Context()); reason != "" {
		http.Error(w, reason, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// notReady returns why the server cannot serve, "" when it can.
func (srv *server) notReady(ctx context.Context) string {
	switch {
	case srv.stopping.Load():
		return "shutting down"
	case srv.core.Config() == nil:
		return "no config loaded"
	case srv.set.ReadyNeedsStore && srv.store.notWarm():
		return "store not ready: its connections are not open or its limiter library is not loaded"
	case srv.set.ReadyNeedsStore && srv.store.fallible():
		if err := srv.store.ping(ctx); err != nil {
			return "store unreachable: " + err.Error()
		}
	}
	return ""
}

// watchHealth sets the gRPC health status from notReady every interval until
// ctx ends, logging each change.
func (srv *server) watchHealth(ctx context.Context) {
	t := time.NewTicker(srv.set.HealthInterval)
	defer t.Stop()
	last := ""
	for {
		warm := srv.store.warm(ctx) == nil // a failure shows as not ready
		if srv.set.HealthNeedsStore() && srv.store.fallible() {
			srv.store.up.Store(warm && srv.store.ping(ctx) == nil)
		}
		reason := srv.notReady(ctx)
		if ctx.Err() != nil {
			return
		}
		st := healthpb.HealthCheckResponse_SERVING
		if reason != "" {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		srv.health.SetServingStatus("", st)
		srv.health.SetServingStatus(rlsServiceName, st)
		srv.health.SetServingStatus(rlqsServiceName, st)
		if reason != last {
			if reason == "" {
				srv.log.Info("serving")
			} else {
				srv.log.Warn("not serving", zap.String("reason", reason))
			}
			last = reason
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// serve runs both listeners, the health checker and the config watcher until
// ctx ends or a listener fails, then shuts down in this order: the watcher and
// checker stop, health reports NOT_SERVING (gRPC health and /readyz), the
// shutdown delay passes so load balancers stop sending, the gRPC server
// stops gracefully (in-flight calls finish; after the shutdown timeout they
// are cut), the HTTP server shuts down, and the store is closed. It returns
// nil after a shutdown caused by ctx, or the listener's error.
func (srv *server) serve(ctx context.Context) error {
	bg, stopBG := context.WithCancel(context.Background())
	errc := make(chan error, 2+len(srv.extra))
	var wg, bgWG sync.WaitGroup
	bgWG.Add(3)
	go func() {
		defer bgWG.Done()
		srv.watchHealth(bg)
	}()
	go func() {
		defer bgWG.Done()
		srv.store.run(bg, srv.heartbeatNeeded)
	}()
	go func() {
		defer bgWG.Done()
		srv.config.Run(bg)
	}()
	srv.runTenants(bg, &bgWG)
	srv.startListeners(&wg, errc)

	var err error
	select {
	case <-ctx.Done():
		srv.log.Info("shutting down", zap.Duration("shutdown_delay", srv.set.ShutdownDelay))
	case err = <-errc:
	}

	srv.stopping.Store(true)
	stopBG()
	bgWG.Wait()
	srv.health.Shutdown()
	if err == nil && srv.set.ShutdownDelay > 0 {
		wait := time.Sleep
		if srv.hooks.delay != nil {
			wait = srv.hooks.delay
		}
		wait(srv.set.ShutdownDelay)
	}
	srv.quota.Stop() // quota streams never end by themselves: end them for GracefulStop
	stopped := make(chan struct{})
	go func() {
		srv.grpc.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(srv.set.ShutdownTimeout)
	select {
	case <-stopped:
		timer.Stop()
	case <-timer.C:
		srv.log.Warn("shutdown timeout passed, cutting in-flight calls")
		srv.grpc.Stop()
		<-stopped
	}
	hctx, cancel := context.WithTimeout(context.Background(), srv.set.ShutdownTimeout)
	srv.http.Shutdown(hctx)
	for _, x := range srv.extra {
		x.srv.Shutdown(hctx)
	}
	cancel()
	wg.Wait()
	srv.quota.Wait()
	srv.close()
	srv.log.Info("stopped")
	return err
}

// startListeners serves every listener in goroutines that wg tracks; a
// listener that fails sends its error to errc. It logs the bound addresses.
func (srv *server) startListeners(wg *sync.WaitGroup, errc chan<- error) {
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := srv.grpc.Serve(srv.grpcLn); err != nil {
			errc <- fmt.Errorf("grpc: %w", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := srv.http.Serve(srv.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("http: %w", err)
		}
	}()
	fields := []zap.Field{zap.String("grpc_addr", srv.grpcLn.Addr().String()), zap.String("http_addr", srv.httpLn.Addr().String())}
	for _, x := range srv.extra {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := x.srv.Serve(x.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s: %w", x.name, err)
			}
		}()
		fields = append(fields, zap.String(strings.ReplaceAll(x.name, "-", "_"), x.ln.Addr().String()))
	}
	srv.log.Info("listening", fields...)
}

// close flushes the traces and releases the store. (The listeners belong to the gRPC and HTTP
// servers once serve runs; newServer closes them on a failed start.)
func (srv *server) close() {
	if srv.trace != nil {
		// Flush the spans not yet exported, for at most 5 s.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := srv.trace.close(ctx); err != nil {
			srv.log.Warn("flushing traces", zap.Error(err))
		}
		cancel()
		srv.trace = nil
	}
	if srv.store == nil {
		return
	}
	if err := srv.store.close(); err != nil {
		srv.log.Warn("closing store", zap.Error(err))
	}
}
