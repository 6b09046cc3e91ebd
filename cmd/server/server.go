package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/rls"
)

// rlsServiceName is the gRPC service whose health Envoy and Kubernetes probe.
const rlsServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// server is one running Sluice: listeners, the rate-limit service and its
// store.
type server struct {
	set    *settings
	log    *zap.Logger
	svc    *rls.Service
	store  limiter.Store
	closer func() error // closes the store, nil if nothing to close

	grpc     *grpc.Server
	health   *health.Server
	http     *http.Server
	grpcLn   net.Listener
	httpLn   net.Listener
	stopping atomic.Bool
}

// newServer loads the config, opens the store and binds both listeners. On
// error it releases whatever it had already acquired.
func newServer(s *settings, log *zap.Logger) (_ *server, err error) {
	cfg, err := descriptors.Load(s.Config)
	if err != nil {
		for _, e := range unjoin(err) {
			log.Error("config error", zap.String("config_file", s.Config), zap.Error(e))
		}
		return nil, fmt.Errorf("config %s: %d errors", s.Config, len(unjoin(err)))
	}
	for _, w := range cfg.Warnings {
		log.Warn("config warning", zap.Error(w))
	}
	log.Info("config loaded", zap.Strings("config_file", cfg.Files), zap.Int("domains", len(cfg.Domains())))

	srv := &server{set: s, log: log}
	defer func() {
		if err != nil {
			srv.close()
		}
	}()
	if err := srv.openStore(); err != nil {
		return nil, err
	}
	srv.svc = rls.New(rls.Options{
		Store:           srv.store,
		Logger:          log.Named("rls"),
		Headers:         s.headers,
		RawBody:         s.RawBody,
		DynamicMetadata: s.DynamicMetadata,
		FailureMode:     s.failureMode(),
		StoreTimeout:    s.StoreTimeout,
		MaxDescriptors:  s.MaxDescriptors,
		MaxEntries:      s.MaxEntries,
		MaxKeyBytes:     s.MaxKeyBytes,
	})
	srv.svc.SetConfig(cfg)

	srv.grpc = grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv.grpc, srv.svc)
	srv.health = health.NewServer()
	healthpb.RegisterHealthServer(srv.grpc, srv.health)
	reflection.Register(srv.grpc)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", srv.readyz)
	mux.Handle("/json", srv.svc.JSONHandler())
	srv.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}

	if srv.grpcLn, err = net.Listen("tcp", s.GRPCAddr); err != nil {
		return nil, fmt.Errorf("--grpc-addr: %w", err)
	}
	if srv.httpLn, err = net.Listen("tcp", s.HTTPAddr); err != nil {
		return nil, fmt.Errorf("--http-addr: %w", err)
	}
	return srv, nil
}

// openStore opens the store the settings name: the in-memory store when
// --redis-url is empty.
func (srv *server) openStore() error {
	if srv.set.RedisURL != "" {
		return errors.New("--redis-url: the Redis store is not built into this binary yet")
	}
	srv.store = limiter.NewMemoryStore(limiter.MemoryOptions{MaxCounters: srv.set.MaxCounters})
	srv.log.Info("store ready", zap.String("store", "memory"), zap.Int("max_counters", srv.set.MaxCounters))
	return nil
}

// readyz answers 200 while the server serves with a config, 503 otherwise.
func (srv *server) readyz(w http.ResponseWriter, r *http.Request) {
	if srv.stopping.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	if srv.svc.Config() == nil {
		http.Error(w, "no config loaded", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// serve runs both listeners until ctx ends or one fails, then shuts down in
// this order: health reports NOT_SERVING (gRPC health and /readyz), the
// shutdown delay passes so load balancers stop sending, the gRPC server
// stops gracefully (in-flight calls finish; after the shutdown timeout they
// are cut), the HTTP server shuts down, and the store is closed. It returns
// nil after a shutdown caused by ctx, or the listener's error.
func (srv *server) serve(ctx context.Context) error {
	srv.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	srv.health.SetServingStatus(rlsServiceName, healthpb.HealthCheckResponse_SERVING)

	errc := make(chan error, 2)
	var wg sync.WaitGroup
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
	srv.log.Info("listening", zap.String("grpc_addr", srv.grpcLn.Addr().String()), zap.String("http_addr", srv.httpLn.Addr().String()))

	var err error
	select {
	case <-ctx.Done():
		srv.log.Info("shutting down", zap.Duration("shutdown_delay", srv.set.ShutdownDelay))
	case err = <-errc:
	}

	srv.stopping.Store(true)
	srv.health.Shutdown()
	if err == nil && srv.set.ShutdownDelay > 0 {
		time.Sleep(srv.set.ShutdownDelay)
	}
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
	cancel()
	wg.Wait()
	srv.close()
	srv.log.Info("stopped")
	return err
}

// close releases the store and any listener that serve did not take over.
func (srv *server) close() {
	if srv.closer != nil {
		if err := srv.closer(); err != nil {
			srv.log.Warn("closing store", zap.Error(err))
		}
		srv.closer = nil
	}
}
