package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// everyNode is the snapshot cache's node hash: one snapshot for every node
// id, so that Sluice's --xds-node-id needs no matching here.
type everyNode struct{}

func (everyNode) ID(*corev3.Node) string { return "" }

// serve serves o.dir on o.addr until ctx ends.
func serve(ctx context.Context, o options, log *zap.Logger) error {
	var opts []grpc.ServerOption
	if o.tlsDir != "" {
		cfg, err := serverTLS(o.tlsDir, log)
		if err != nil {
			return err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.addr, err)
	}
	cache := cachev3.NewSnapshotCache(false, everyNode{}, nil)
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(id int64, req *discoveryv3.DiscoveryRequest) error {
		if req.GetResponseNonce() == "" {
			log.Info("stream opened", zap.Int64("stream", id), zap.String("node_id", req.GetNode().GetId()))
		} else if d := req.GetErrorDetail(); d != nil {
			log.Warn("config refused (NACK)", zap.Int64("stream", id), zap.String("version", req.GetVersionInfo()), zap.String("error", d.GetMessage()))
		} else {
			log.Info("config accepted (ACK)", zap.Int64("stream", id), zap.String("version", req.GetVersionInfo()))
		}
		return nil
	}}
	g := grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(ctx, cache, cb))
	w := &watcher{dir: o.dir, cache: cache, log: log}
	w.poll(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Serve(ln) }()
	log.Info("listening", zap.String("grpc_addr", ln.Addr().String()), zap.String("dir", o.dir), zap.Bool("tls", o.tlsDir != ""))
	t := time.NewTicker(o.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			g.Stop()
			<-done
			return nil
		case err := <-done:
			return fmt.Errorf("serve xDS: %w", err)
		case <-t.C:
			w.poll(ctx)
		}
	}
}

// watcher turns the files of dir into snapshots when they change.
type watcher struct {
	dir     string
	cache   cachev3.SnapshotCache
	log     *zap.Logger
	seen    [sha256.Size]byte // fingerprint of the files last loaded (or refused)
	version int               // of the snapshot in force, 0 before the first
}

// poll loads dir if its files changed since the last poll and, if they
// load and convert, serves them as the next version. A refused change is
// logged once; the snapshot in force stays.
func (w *watcher) poll(ctx context.Context) {
	names, fp := fingerprint(w.dir)
	if fp == w.seen {
		return
	}
	w.seen = fp
	cfg, err := descriptors.Load(w.dir)
	var res []types.Resource
	if err == nil {
		var rcs []*rlsconfv3.RateLimitConfig
		rcs, err = resources(cfg)
		for _, rc := range rcs {
			res = append(res, rc)
		}
	}
	if err != nil {
		w.log.Error("config not served: the snapshot in force stays", zap.Int("version", w.version), zap.Strings("errors", lines(err)))
		return
	}
	snap, err := cachev3.NewSnapshot(strconv.Itoa(w.version+1), map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: res})
	if err == nil {
		err = w.cache.SetSnapshot(ctx, "", snap)
	}
	if err != nil {
		w.log.Error("cannot set the snapshot", zap.Error(err))
		return
	}
	w.version++
	domains := make([]string, 0, len(res))
	for _, d := range cfg.Domains() {
		domains = append(domains, d.Name)
	}
	w.log.Info("serving", zap.Int("version", w.version), zap.Strings("domains", domains), zap.Strings("files", names),
		zap.Int("warnings", len(cfg.Warnings)))
}

// fingerprint hashes the names and contents of the files a load of dir
// reads; a file that cannot be read counts by its name alone (the load
// reports it).
func fingerprint(dir string) ([]string, [sha256.Size]byte) {
	names, _ := descriptors.Files(dir)
	h := sha256.New()
	for _, n := range names {
		data, _ := os.ReadFile(n)
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(data))
		h.Write(data)
	}
	var out [sha256.Size]byte
	copy(out[:], h.Sum(nil))
	return names, out
}

// lines splits a joined error into its messages.
func lines(err error) []string {
	var out []string
	for _, l := range bytes.Split([]byte(err.Error()), []byte("\n")) {
		out = append(out, string(l))
	}
	return out
}

// serverTLS is Envoy Gateway's xDS server TLS (TLS 1.3, a client
// certificate from the CA required) from dir's ca.crt, server.crt and
// server.key, made first when ca.crt is missing.
func serverTLS(dir string, log *zap.Logger) (*tls.Config, error) {
	if _, err := os.Stat(filepath.Join(dir, "ca.crt")); errors.Is(err, os.ErrNotExist) {
		if err := makePKI(dir, time.Now()); err != nil {
			return nil, fmt.Errorf("make certificates in %s: %w", dir, err)
		}
		log.Info("made certificates", zap.String("dir", dir))
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"))
	if err != nil {
		return nil, fmt.Errorf("load %s/server.crt and server.key: %w", dir, err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s/ca.crt: no PEM certificate", dir)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS13}, nil
}
