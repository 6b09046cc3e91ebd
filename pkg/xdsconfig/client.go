package xdsconfig

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/internal/shortval"
	"github.com/sluicehq/sluice/pkg/descriptors"
)

const (
	// defaultNackHold is Options.NackHold's default.
	defaultNackHold = time.Second
	// resendLogEvery is the most often the Client logs that a server
	// re-sends a refused response.
	resendLogEvery = time.Minute
	// noConfigWarnAfter is how long an open stream may go without a
	// response before the Client warns (a node id the server has no
	// snapshot for gets none, ever).
	noConfigWarnAfter = 30 * time.Second
	// MaxVersionBytes bounds a version_info where the Client shows it: in
	// Status, its log lines and the sluice_xds_config_info label. A server
	// may send any length (a 3 MB one was seen), and every log line and
	// scrape would carry it whole; a longer one shows as its start and a
	// hash of the whole (internal/shortval), so that versions stay distinct.
	// The protocol's requests carry it whole.
	MaxVersionBytes = 64
	// maxErrorDetail bounds the error_detail message of a NACK, in bytes.
	maxErrorDetail = 16 << 10
	// keepaliveTime is how long a stream may be silent before the Client
	// pings the server, to notice one that vanished without closing the
	// connection. gRPC servers refuse pings more often than every 5
	// minutes by default.
	keepaliveTime = 6 * time.Minute
)

// Options configure a Client. Server and Node are required; every other
// zero field takes the default it documents.
type Options struct {
	// Server is the xDS server's gRPC target, such as
	// "envoy-gateway:18001" (CONFIG_GRPC_XDS_SERVER_URL).
	Server string
	// Node identifies Sluice to the server, which picks the snapshot by
	// its id: Envoy Gateway serves node id "envoy-ratelimit". It is sent
	// on the first request of each stream, as the xDS protocol asks.
	Node *corev3.Node
	// Headers are sent as gRPC metadata with every stream
	// (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS); nil sends none.
	Headers map[string]string
	// TLS returns the TLS config of one connection attempt, nil for a
	// plaintext connection. It is called at every attempt, so that
	// certificate files rotated on disk are read again; its error fails
	// the attempt, which is retried after the backoff.
	TLS func() (*tls.Config, error)
	// Backoff bounds the waits between connection attempts.
	Backoff Backoff
	// MaxRecvMsgBytes is the largest response accepted, in bytes
	// (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES); 0 means gRPC's default, 4 MiB.
	MaxRecvMsgBytes int
	// NackHold is how long the Client waits before it NACKs a response
	// that repeats the one it last refused, version and resources alike.
	// go-control-plane's server answers a NACK at once with the same
	// snapshot, over and over, until the snapshot changes; the hold makes
	// that loop one exchange per NackHold instead of thousands a second,
	// and a fixed snapshot is fetched at most NackHold late. 0 means 1s.
	NackHold time.Duration
	// Logger gets the Client's lifecycle lines; nil logs nothing.
	Logger *zap.Logger
	// Metrics records connection state, version, ACKs and NACKs; nil
	// records nothing.
	Metrics *Metrics
}

// Status is what a Client knows of its subscription, for /config and logs.
type Status struct {
	// Server and NodeID are Options.Server and Options.Node's id.
	Server string `json:"server"`
	NodeID string `json:"node_id"`
	// Connected reports that a stream to the server is open.
	Connected bool `json:"connected"`
	// Version is the version_info of the config in force (the last
	// response ACKed), shortened to at most MaxVersionBytes; "" before the
	// first.
	Version string `json:"version,omitempty"`
	// RefusedVersion is the version_info of the last response NACKed,
	// shortened as Version, "" when none was refused since the last ACK.
	RefusedVersion string `json:"refused_version,omitempty"`
}

// Client is an xDS SotW subscription to RateLimitConfig resources on the
// Aggregated Discovery Service. Run drives it; Status may be called from
// any goroutine.
type Client struct {
	opts Options
	log  *zap.Logger

	mu      sync.Mutex
	status  Status
	inForce string // the whole version_info of the config in force, for requests

	// Owned by Run's goroutine.
	last      outcome // of the last response built
	resends   int     // re-sent refused responses not logged yet
	resendLog time.Time
}

// outcome is the result of building one response: its resources'
// fingerprint, its version_info, and its errors (nil if it built).
type outcome struct {
	set     bool
	fp      [sha256.Size]byte
	version string
	err     error
}

// New returns a Client for opts. It returns an error if Server or the
// node id is missing.
func New(opts Options) (*Client, error) {
	if opts.Server == "" {
		return nil, errors.New("xdsconfig: no server address")
	}
	if opts.Node.GetId() == "" {
		return nil, errors.New("xdsconfig: no node id")
	}
	if opts.NackHold <= 0 {
		opts.NackHold = defaultNackHold
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	c := &Client{opts: opts, log: log.With(zap.String("xds_server", opts.Server), zap.String("node_id", opts.Node.GetId()))}
	c.status = Status{Server: opts.Server, NodeID: opts.Node.GetId()}
	return c, nil
}

// Status returns the state of the subscription. It is safe for concurrent
// use.
func (c *Client) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// Run subscribes until ctx ends, reconnecting with backoff whenever the
// stream ends, and returns nil then. It calls deliver, from its own
// goroutine, with each new outcome: a Config that built (before ACKing
// it), or the builder's errors (before NACKing). A response whose
// resources equal those of the last outcome (a reconnection, a new
// version of the same content, a refused response sent again) is answered
// without a build or a call to deliver. Run must not be called twice at
// once.
func (c *Client) Run(ctx context.Context, deliver func(*descriptors.Config, error)) error {
	b := newBackoff(c.opts.Backoff)
	for {
		responded, err := c.session(ctx, deliver)
		c.setConnected(false)
		if ctx.Err() != nil {
			return nil
		}
		if responded {
			b.reset()
		}
		wait := b.next()
		c.log.Warn("xds stream ended, reconnecting", zap.Error(err), zap.Duration("retry_in", wait))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// session runs one connection and stream until either fails or ctx ends.
// It reports whether the server sent any response.
func (c *Client) session(ctx context.Context, deliver func(*descriptors.Config, error)) (responded bool, err error) {
	conn, err := c.dial()
	if err != nil {
		return false, err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(c.opts.Headers) > 0 {
		sctx = metadata.NewOutgoingContext(sctx, metadata.New(c.opts.Headers))
	}
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		return false, fmt.Errorf("open stream: %w", err)
	}
	// The first request names the node and the version in force, so that
	// a server that still has it need not send it again.
	first := &discoveryv3.DiscoveryRequest{Node: c.opts.Node, TypeUrl: TypeURL, VersionInfo: c.versionInForce()}
	if err := stream.Send(first); err != nil {
		return false, fmt.Errorf("send first request: %w", err)
	}
	c.setConnected(true)
	c.opts.Metrics.count(streams)
	c.log.Info("xds stream open", zap.String("version", shortVersion(first.VersionInfo)))
	warn := time.AfterFunc(noConfigWarnAfter, func() {
		c.log.Warn("xds server has sent no config yet; does it serve this node id?", zap.Duration("waited", noConfigWarnAfter))
	})
	defer warn.Stop()
	for {
		resp, err := stream.Recv()
		if err != nil {
			return responded, fmt.Errorf("receive: %w", err)
		}
		warn.Stop()
		responded = true
		if err := c.handle(sctx, stream, resp, deliver); err != nil {
			return responded, err
		}
	}
}

// dial makes the connection of one attempt. gRPC connects when the stream
// opens, and fails it at once if the connection cannot be made.
func (c *Client) dial() (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if c.opts.TLS != nil {
		cfg, err := c.opts.TLS()
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		creds = credentials.NewTLS(cfg)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: 20 * time.Second})}
	if c.opts.MaxRecvMsgBytes > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.opts.MaxRecvMsgBytes)))
	}
	conn, err := grpc.NewClient(c.opts.Server, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", c.opts.Server, err)
	}
	return conn, nil
}

// stream is the part of the ADS stream handle uses.
type stream interface {
	Send(*discoveryv3.DiscoveryRequest) error
}

// handle answers one response: ACK if its config built and is in force,
// NACK with the builder's errors if not.
func (c *Client) handle(ctx context.Context, s stream, resp *discoveryv3.DiscoveryResponse, deliver func(*descriptors.Config, error)) error {
	if resp.GetTypeUrl() != TypeURL {
		// Only RateLimitConfig is subscribed; Envoy ignores unwatched types
		// the same way.
		c.log.Warn("xds response of a type not subscribed to, ignored", zap.String("type_url", resp.GetTypeUrl()))
		return nil
	}
	fp := fingerprint(resp.GetResources())
	if c.last.set && fp == c.last.fp {
		return c.repeat(ctx, s, resp)
	}
	cfg, err := Build(resp.GetResources())
	c.last = outcome{set: true, fp: fp, version: resp.GetVersionInfo(), err: err}
	if err != nil {
		c.setRefused(resp.GetVersionInfo())
		deliver(nil, err)
		return c.nack(s, resp, err)
	}
	c.setVersion(resp.GetVersionInfo())
	deliver(cfg, nil)
	return c.ack(s, resp)
}

// repeat answers a response whose resources equal the last outcome's, with
// no build: the config in force already is (or the errors already were)
// theirs. A refused response sent again with the same version is the
// server's NACK loop: its NACK waits NackHold, and it is logged at most
// once every resendLogEvery.
func (c *Client) repeat(ctx context.Context, s stream, resp *discoveryv3.DiscoveryResponse) error {
	if c.last.err == nil {
		c.setVersion(resp.GetVersionInfo())
		return c.ack(s, resp)
	}
	loop := resp.GetVersionInfo() == c.last.version
	c.last.version = resp.GetVersionInfo()
	c.setRefused(resp.GetVersionInfo())
	c.opts.Metrics.count(resends)
	c.resends++
	if now := time.Now(); now.Sub(c.resendLog) >= resendLogEvery {
		c.log.Warn("xds server sent a refused config again; refused again without a new build (logged at most once a minute)",
			zap.String("version", shortVersion(resp.GetVersionInfo())), zap.Int("times", c.resends))
		c.resends, c.resendLog = 0, now
	}
	if loop {
		t := time.NewTimer(c.opts.NackHold)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return c.nack(s, resp, c.last.err)
}

// ack tells the server that resp is in force.
func (c *Client) ack(s stream, resp *discoveryv3.DiscoveryResponse) error {
	c.opts.Metrics.count(acks)
	return s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeURL, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()})
}

// nack tells the server that resp was refused, and why; version_info stays
// the version in force, as the xDS protocol asks.
func (c *Client) nack(s stream, resp *discoveryv3.DiscoveryResponse, err error) error {
	c.opts.Metrics.count(nacks)
	return s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeURL, VersionInfo: c.versionInForce(), ResponseNonce: resp.GetNonce(),
		ErrorDetail: &statuspb.Status{Code: int32(codes.InvalidArgument), Message: errorDetail(err)}})
}

// errorDetail is err's text, one error a line, cut at maxErrorDetail bytes
// on a line end.
func errorDetail(err error) string {
	msg := err.Error()
	if len(msg) <= maxErrorDetail {
		return msg
	}
	cut := msg[:maxErrorDetail]
	if i := strings.LastIndexByte(cut, '\n'); i > 0 {
		cut = cut[:i]
	}
	rest := strings.TrimPrefix(msg[len(cut):], "\n")
	return fmt.Sprintf("%s\n... (%d more lines)", cut, strings.Count(rest, "\n")+1)
}

// fingerprint hashes resources regardless of their order, which
// go-control-plane does not keep from one response to the next.
func fingerprint(resources []*anypb.Any) [sha256.Size]byte {
	sums := make([][sha256.Size]byte, len(resources))
	for i, r := range resources {
		h := sha256.New()
		h.Write([]byte(r.GetTypeUrl()))
		h.Write([]byte{0})
		h.Write(r.GetValue())
		h.Sum(sums[i][:0])
	}
	slices.SortFunc(sums, func(a, b [sha256.Size]byte) int { return bytes.Compare(a[:], b[:]) })
	h := sha256.New()
	for _, s := range sums {
		h.Write(s[:])
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

func (c *Client) setConnected(up bool) {
	c.mu.Lock()
	c.status.Connected = up
	c.mu.Unlock()
	c.opts.Metrics.setConnected(up)
}

// setVersion records the version in force.
func (c *Client) setVersion(v string) {
	short := shortVersion(v)
	c.mu.Lock()
	c.inForce = v
	c.status.Version, c.status.RefusedVersion = short, ""
	c.mu.Unlock()
	c.opts.Metrics.setVersion(short)
}

// versionInForce is the whole version_info of the config in force, which
// the protocol's requests name.
func (c *Client) versionInForce() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inForce
}

// setRefused records the version last refused.
func (c *Client) setRefused(v string) {
	short := shortVersion(v)
	c.mu.Lock()
	c.status.RefusedVersion = short
	c.mu.Unlock()
}

// shortVersion is v as the Client shows it: at most MaxVersionBytes.
func shortVersion(v string) string {
	if len(v) <= MaxVersionBytes {
		return v
	}
	return string(shortval.Append(nil, v, MaxVersionBytes))
}
