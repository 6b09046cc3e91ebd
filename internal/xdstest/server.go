package xdstest

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// NodeID is the node id Envoy Gateway serves its rate limit config to
// (its rate limit infrastructure's name).
const NodeID = "envoy-ratelimit"

// Reply is a client's answer to one response: an ACK, or a NACK with its
// error_detail.
type Reply struct {
	// Version is the version_info of the response answered.
	Version string
	// ACK reports an ACK; ErrorDetail is the NACK's message otherwise.
	ACK         bool
	ErrorDetail string
	// RequestVersion is the version_info the request carried: the
	// version in force at the client.
	RequestVersion string
}

// Stream is what the server saw of one stream's opening.
type Stream struct {
	// Node is the node id of its first request.
	NodeID string
	// NodeMetadata are the node's metadata fields that hold strings.
	NodeMetadata map[string]string
	// Headers are the gRPC metadata the client sent.
	Headers metadata.MD
}

// Server is an xDS server as Envoy Gateway runs one for its rate limit
// service: go-control-plane's SnapshotCache (not ADS-ordered, node ids
// hashed by IDHash) behind its ADS server, with mutual TLS. It records
// every stream and every ACK and NACK. It is safe for concurrent use.
type Server struct {
	t    testing.TB
	pki  *PKI
	addr string

	mu        sync.Mutex
	cache     cachev3.SnapshotCache
	grpc      *grpc.Server
	streams   []Stream
	replies   []Reply
	responses map[string]int    // responses sent, by version
	nonces    map[string]string // version of each nonce sent
	changed   chan struct{}     // closed and replaced at each record
}

// Start starts a Server on a free port of 127.0.0.1 with pki's server
// TLS, and stops it when t ends.
func Start(t testing.TB, pki *PKI) *Server {
	t.Helper()
	s := &Server{t: t, pki: pki, responses: map[string]int{}, nonces: map[string]string{}, changed: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	s.serve(ln)
	t.Cleanup(s.Stop)
	return s
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

// serve starts a new cache and gRPC server on ln.
func (s *Server) serve(ln net.Listener) {
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			s.record(func() { s.streams = append(s.streams, Stream{Headers: md}) })
			return nil
		},
		StreamRequestFunc:  s.onRequest,
		StreamResponseFunc: s.onResponse,
	}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(s.pki.ServerTLS())))
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(context.Background(), cache, cb))
	s.mu.Lock()
	s.cache, s.grpc = cache, g
	s.mu.Unlock()
	go g.Serve(ln)
}

func (s *Server) onRequest(_ int64, req *discoveryv3.DiscoveryRequest) error {
	s.record(func() {
		if req.GetNode() != nil && len(s.streams) > 0 && s.streams[len(s.streams)-1].NodeID == "" {
			st := &s.streams[len(s.streams)-1]
			st.NodeID = req.GetNode().GetId()
			st.NodeMetadata = map[string]string{}
			for k, v := range req.GetNode().GetMetadata().GetFields() {
				st.NodeMetadata[k] = v.GetStringValue()
			}
		}
		if req.GetResponseNonce() == "" {
			return
		}
		s.replies = append(s.replies, Reply{Version: s.nonces[req.GetResponseNonce()], ACK: req.GetErrorDetail() == nil,
			ErrorDetail: req.GetErrorDetail().GetMessage(), RequestVersion: req.GetVersionInfo()})
	})
	return nil
}

func (s *Server) onResponse(_ context.Context, _ int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
	s.record(func() {
		s.nonces[resp.GetNonce()] = resp.GetVersionInfo()
		s.responses[resp.GetVersionInfo()]++
	})
}

// record runs f under the lock and wakes the waiters.
func (s *Server) record(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
	close(s.changed)
	s.changed = make(chan struct{})
}

// Set makes configs, as snapshot version, the config of node id.
func (s *Server) Set(node, version string, configs ...*rlsconfv3.RateLimitConfig) {
	s.t.Helper()
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: res})
	if err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	cache := s.cache
	s.mu.Unlock()
	if err := cache.SetSnapshot(context.Background(), node, snap); err != nil {
		s.t.Fatal(err)
	}
}

// Stop stops the server, closing every stream.
func (s *Server) Stop() {
	s.mu.Lock()
	g := s.grpc
	s.mu.Unlock()
	g.Stop()
}

// Restart stops the server and starts a new one on the same address with
// an empty cache, as a restarted Envoy Gateway comes back: without
// snapshots, and counting versions from 1 again.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ln, err = net.Listen("tcp", s.addr); err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		s.t.Fatalf("listen again on %s: %v", s.addr, err)
	}
	s.serve(ln)
}

// Streams returns the streams opened so far.
func (s *Server) Streams() []Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Stream(nil), s.streams...)
}

// Responses returns how many responses of version were sent.
func (s *Server) Responses(version string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.responses[version]
}

// Replies returns the ACKs and NACKs received so far, in order.
func (s *Server) Replies() []Reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Reply(nil), s.replies...)
}

// WaitReply waits up to timeout for the first reply to version and
// returns it; it fails t if none comes.
func (s *Server) WaitReply(version string, timeout time.Duration) Reply {
	s.t.Helper()
	var found Reply
	if !s.WaitFor(timeout, func() bool {
		for _, r := range s.Replies() {
			if r.Version == version {
				found = r
				return true
			}
		}
		return false
	}) {
		s.t.Fatalf("no ACK or NACK of version %q within %v; replies: %+v", version, timeout, s.Replies())
	}
	return found
}

// WaitFor waits up to timeout for cond to hold, calling it again after
// each stream, request or response the server records, and reports
// whether it held. cond may call the Server's methods.
func (s *Server) WaitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		if cond() {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		}
	}
}
