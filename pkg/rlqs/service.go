package rlqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// Defaults of Options.
const (
	// DefaultAssignmentTTL is Options.AssignmentTTL when zero.
	DefaultAssignmentTTL = 10 * time.Second
	// DefaultBurst is Options.Burst when zero.
	DefaultBurst = time.Second
	// DefaultIdleAfter is Options.IdleAfter when zero.
	DefaultIdleAfter = time.Minute
	// DefaultMaxBuckets is Options.MaxBuckets when zero.
	DefaultMaxBuckets = 10000
	// DefaultMaxTotalBuckets is Options.MaxTotalBuckets when zero: at about
	// 1.1 KB of live heap a bucket (TestBucketMemory), about 55 MB.
	DefaultMaxTotalBuckets = 50000
	// DefaultMaxStreams is Options.MaxStreams when zero: at about 30 KB a
	// stream (TestStreamMemory), about 15 MB.
	DefaultMaxStreams = 500
	// DefaultMaxStreamsPerConnection is Options.MaxStreamsPerConnection when
	// zero: an Envoy opens one stream per rate_limit_quota filter config
	// naming Sluice, over one connection, so this leaves room for many such
	// filters while sixteen connections at least are needed to fill
	// DefaultMaxStreams.
	DefaultMaxStreamsPerConnection = 32
	// DefaultMaxEntries is Options.MaxEntries when zero (as pkg/rls's).
	DefaultMaxEntries = 32
	// DefaultMaxKeyBytes is Options.MaxKeyBytes when zero (as pkg/rls's).
	DefaultMaxKeyBytes = 256
	// DefaultStoreTimeout is Options.StoreTimeout when zero: reports are
	// periodic and nobody's request waits on them.
	DefaultStoreTimeout = time.Second
)

// MaxReportedRequests is the most requests one BucketQuotaUsage may report,
// allowed and denied each: 2^40, beyond what any Envoy serves in a
// reporting interval. A report over it is refused (INVALID_ARGUMENT).
const MaxReportedRequests = 1 << 40

// holdGrace is how much longer the store keeps a stream's share than the
// assignment's TTL: Envoy starts the TTL when the assignment arrives, a
// little after the store reserved it.
const holdGrace = 500 * time.Millisecond

// Blanket is what a bucket without a limit to share is assigned: Envoy's
// RateLimitStrategy.BlanketRule.
type Blanket uint8

const (
	// AllowAll lets every request of the bucket through (ALLOW_ALL).
	AllowAll Blanket = iota
	// DenyAll denies every request of the bucket (DENY_ALL).
	DenyAll
)

// ParseBlanket returns the Blanket spelled s: "allow" or "deny"
// (case-insensitive), and false for anything else.
func ParseBlanket(s string) (Blanket, bool) {
	switch strings.ToLower(s) {
	case "allow":
		return AllowAll, true
	case "deny":
		return DenyAll, true
	}
	return AllowAll, false
}

// Store divides shared limits among their holders: limiter.MemoryShares, or
// pkg/redis's Shares so that every Sluice instance on one Redis agrees. It
// must be safe for concurrent use.
type Store interface {
	// Share divides each claim's limit (limiter.Divide) and returns one
	// Share per claim, in order. Its error wraps
	// limiter.ErrStoreUnavailable when the backend fails.
	Share(ctx context.Context, claims []limiter.Claim) ([]limiter.Share, error)
	// Release gives up each claim's Holder's share of its limit (Key,
	// Window).
	Release(ctx context.Context, claims []limiter.Claim) error
}

// Options configures a Service. The zero value of every field but Decider
// and Store is usable.
type Options struct {
	// Decider holds the config in force, the one ShouldRateLimit decides
	// with (its Config). Required.
	Decider *ratelimit.Service
	// Store divides each bucket's limit among the streams reporting it.
	// Required.
	Store Store
	// Logger receives lifecycle and degraded-mode lines; nil means
	// zap.NewNop().
	Logger *zap.Logger
	// Metrics records streams, reports and actions; nil records nothing.
	Metrics *Metrics
	// AssignmentTTL is every assignment's assignment_time_to_live: a whole
	// number of seconds, since Envoy reads only the seconds. A stream that
	// stops reporting keeps its share this long (plus half a second), then
	// the others get it. Envoy's reporting_interval must be shorter, or
	// assignments expire between reports. Zero: DefaultAssignmentTTL.
	AssignmentTTL time.Duration
	// Burst is how much of its share an Envoy may spend at once, as time at
	// the share's rate: the token bucket's max_tokens is share x Burst /
	// window, at least 1 and at most the share. The fleet may exceed a limit
	// within one window by about that much. Zero: DefaultBurst.
	Burst time.Duration
	// IdleAfter is how long a bucket may report no requests before it is
	// abandoned (AbandonAction) and its share released; a bucket no longer
	// reported at all is forgotten after as long. Zero: DefaultIdleAfter.
	IdleAfter time.Duration
	// Unmatched is assigned to buckets that match no rule of their
	// domain. The zero value is AllowAll, as ShouldRateLimit answers OK to a
	// descriptor without a rule.
	Unmatched Blanket
	// FailureMode is the failure mode of a domain whose config sets none
	// (the server's --failure-mode). FailureModeUnset means FailureModeError.
	FailureMode descriptors.FailureMode
	// ShadowMode assigns ALLOW_ALL to every bucket (the global shadow mode:
	// never deny).
	ShadowMode bool
	// MaxBuckets bounds the buckets one stream tracks. A new bucket past it
	// takes the place of the stream's least recently active idle bucket
	// (one reported without requests, answered with an AbandonAction, or
	// one no report has held for AssignmentTTL); when none is idle it is
	// answered, untracked, from its rule's overflow limit: one limit per
	// rule shared by all the buckets of the rule past a bound, never
	// nothing. Zero: DefaultMaxBuckets.
	MaxBuckets int
	// MaxTotalBuckets bounds the buckets all streams of the Service track
	// together, so that memory has a bound whatever the number of streams.
	// A new bucket past it is answered as one past MaxBuckets, and the other
	// streams evict as many of their idle buckets at their next reports.
	// Zero: DefaultMaxTotalBuckets.
	MaxTotalBuckets int
	// MaxStreams bounds the streams open at once; a stream past it ends at
	// once with RESOURCE_EXHAUSTED naming the bound, so that Envoy opens it
	// again, on another instance behind a balancer. Zero: DefaultMaxStreams.
	MaxStreams int
	// MaxStreamsPerConnection bounds the streams open at once on one client
	// connection, so that one client cannot take the streams of the others:
	// a stream past it ends at once with RESOURCE_EXHAUSTED naming the
	// bound, and other connections' streams are unaffected. Connections are
	// told apart only on a gRPC server built with TagConnections; elsewhere
	// MaxStreams alone bounds the streams. Zero:
	// DefaultMaxStreamsPerConnection.
	MaxStreamsPerConnection int
	// MaxEntries and MaxKeyBytes bound a bucket id's keys and each key's
	// bytes; a report over them ends the stream (INVALID_ARGUMENT). Zero:
	// DefaultMaxEntries, DefaultMaxKeyBytes.
	MaxEntries, MaxKeyBytes int
	// StoreTimeout bounds each Store call. Zero: DefaultStoreTimeout.
	StoreTimeout time.Duration
	// DegradedLogInterval is the least time between two log lines about
	// store failures or bucket overflows. Zero: 10 s.
	DegradedLogInterval time.Duration
	// Now is the clock of demand and idleness; nil means time.Now. (Shares
	// expire on the Store's clock.)
	Now func() time.Time
}

// Service is Envoy's rate limit quota service,
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService. It is safe for
// concurrent use: each stream's state belongs to its own handler.
type Service struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer

	opts     Options
	log      *zap.Logger
	instance string // names this process's streams in the store
	seq      atomic.Uint64

	stopping chan struct{}
	stopOnce sync.Once
	readers  sync.WaitGroup

	lastDegraded atomic.Int64 // UnixNano of the last degraded log line

	streams atomic.Int64 // streams open (MaxStreams)
	buckets atomic.Int64 // buckets tracked by all streams (MaxTotalBuckets)
	owed    atomic.Int64 // buckets that found no room under MaxTotalBuckets (bounds.go)
	owedAt  atomic.Int64 // UnixNano, on Options.Now, of the last of them
}

var _ rlqsv3.RateLimitQuotaServiceServer = (*Service)(nil)

// New returns a Service. It panics if o.Decider or o.Store is nil, or if
// AssignmentTTL is not a whole number of seconds: programmer errors
// (internal/settings validates the server's settings first).
func New(o Options) *Service {
	if o.Decider == nil || o.Store == nil {
		panic("rlqs: Options.Decider and Options.Store are required")
	}
	o.AssignmentTTL = orDefault(o.AssignmentTTL, DefaultAssignmentTTL)
	if o.AssignmentTTL%time.Second != 0 {
		panic("rlqs: Options.AssignmentTTL is not a whole number of seconds")
	}
	o.Burst = orDefault(o.Burst, DefaultBurst)
	o.IdleAfter = orDefault(o.IdleAfter, DefaultIdleAfter)
	o.StoreTimeout = orDefault(o.StoreTimeout, DefaultStoreTimeout)
	o.DegradedLogInterval = orDefault(o.DegradedLogInterval, 10*time.Second)
	o.MaxBuckets = orDefaultInt(o.MaxBuckets, DefaultMaxBuckets)
	o.MaxTotalBuckets = orDefaultInt(o.MaxTotalBuckets, DefaultMaxTotalBuckets)
	o.MaxStreams = orDefaultInt(o.MaxStreams, DefaultMaxStreams)
	o.MaxStreamsPerConnection = orDefaultInt(o.MaxStreamsPerConnection, DefaultMaxStreamsPerConnection)
	o.MaxEntries = orDefaultInt(o.MaxEntries, DefaultMaxEntries)
	o.MaxKeyBytes = orDefaultInt(o.MaxKeyBytes, DefaultMaxKeyBytes)
	if o.FailureMode == descriptors.FailureModeUnset {
		o.FailureMode = descriptors.FailureModeError
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	var id [8]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails
	return &Service{opts: o, log: o.Logger, instance: hex.EncodeToString(id[:]), stopping: make(chan struct{})}
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func orDefaultInt(n, def int) int {
	if n <= 0 {
		return def
	}
	return n
}

// Stop ends every stream, open or opened later, with UNAVAILABLE ("server
// shutting down"), so that Envoy reopens it on another instance and a
// graceful stop of the gRPC server does not wait for streams that never end
// by themselves. Each stream's shares are released as it ends. Stop is safe
// to call more than once.
func (s *Service) Stop() {
	s.stopOnce.Do(func() { close(s.stopping) })
}

// Wait waits for the goroutines that read the streams, which end once their
// streams have: call it after the gRPC server has stopped.
func (s *Service) Wait() { s.readers.Wait() }

// received is one Recv's outcome.
type received struct {
	r   *rlqsv3.RateLimitQuotaUsageReports
	err error
}

// StreamRateLimitQuotas implements RateLimitQuotaService: it answers each
// usage report with one action per bucket in it (a quota assignment, or an
// abandon for a bucket idle for Options.IdleAfter), until the stream ends.
//
// Errors, as gRPC statuses that end the stream: INVALID_ARGUMENT naming the
// field for a report that Envoy's config could not have produced (no
// domain, a domain no config has, a domain that changes, a bucket id
// without keys or over the key limits, absurd counts or durations);
// RESOURCE_EXHAUSTED, before any report, for a stream past
// Options.MaxStreams or Options.MaxStreamsPerConnection; UNAVAILABLE while
// no config is loaded or when Stop was called; the context's code when the
// stream's context ends. A store failure does not
// end the stream: the domain's failure mode answers the buckets it touched.
// Whatever ends the stream, its shares are released.
func (s *Service) StreamRateLimitQuotas(ss grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
	ctx := ss.Context()
	st, err := s.openStream(ctx)
	if err != nil {
		return err
	}
	defer s.closeStream(ctx, st)
	msgs := make(chan received)
	s.readers.Add(1)
	go func() {
		defer s.readers.Done()
		for {
			r, err := ss.Recv()
			select {
			case msgs <- received{r, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		var m received
		select {
		case <-s.stopping:
			return status.Error(codes.Unavailable, "server shutting down: reopen the stream")
		case <-ctx.Done(): // the reader may see it first and deliver nothing
			return status.FromContextError(ctx.Err()).Err()
		case m = <-msgs:
		}
		if errors.Is(m.err, io.EOF) {
			return nil
		}
		if m.err != nil {
			return m.err
		}
		resp, err := s.handle(ctx, st, m.r)
		s.opts.Metrics.observeReport(err)
		if err != nil {
			return err
		}
		if len(resp.GetBucketAction()) > 0 {
			if err := ss.Send(resp); err != nil {
				return err
			}
		}
	}
}

// openStream returns the state of a new stream on the client connection
// of ctx, named in the store by this instance and a sequence number, or
// RESOURCE_EXHAUSTED when MaxStreamsPerConnection streams are open on that
// connection or MaxStreams in all.
func (s *Service) openStream(ctx context.Context) (*stream, error) {
	c := connectionOf(ctx)
	if c != nil && c.streams.Add(1) > int64(s.opts.MaxStreamsPerConnection) {
		c.streams.Add(-1)
		s.opts.Metrics.refuse("max_streams_per_connection")
		s.degraded("a quota stream was refused: --rlqs-max-streams-per-connection streams are open on its connection", "", nil)
		return nil, status.Errorf(codes.ResourceExhausted,
			"quota streams: %d streams are open on this connection, the most --rlqs-max-streams-per-connection allows", s.opts.MaxStreamsPerConnection)
	}
	if s.streams.Add(1) > int64(s.opts.MaxStreams) {
		s.streams.Add(-1)
		c.release()
		s.opts.Metrics.refuse("max_streams")
		s.degraded("a quota stream was refused: --rlqs-max-streams streams are open", "", nil)
		return nil, status.Errorf(codes.ResourceExhausted,
			"quota streams: %d streams are open, the most --rlqs-max-streams allows; open this one on another instance", s.opts.MaxStreams)
	}
	s.opts.Metrics.streamOpened()
	return &stream{
		holder:   s.instance + "/" + strconv.FormatUint(s.seq.Add(1), 10),
		conn:     c,
		buckets:  make(map[string]*bucket),
		groups:   make(map[groupID]*group),
		overflow: make(map[groupID]*group),
	}, nil
}

// closeStream releases every share the stream holds, with a deadline of its
// own (the stream's context has ended), and forgets the stream and its
// buckets, counted against MaxStreams, MaxStreamsPerConnection and
// MaxTotalBuckets.
func (s *Service) closeStream(ctx context.Context, st *stream) {
	s.streams.Add(-1)
	st.conn.release()
	s.buckets.Add(-int64(len(st.buckets)))
	s.opts.Metrics.streamClosed(len(st.buckets))
	claims := make([]limiter.Claim, 0, len(st.groups))
	for _, g := range st.groups {
		claims = append(claims, g.claim)
	}
	if len(claims) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.StoreTimeout)
	defer cancel()
	if err := s.opts.Store.Release(ctx, claims); err != nil {
		s.degraded("releasing a closed stream's shares failed; they are reclaimed after the assignment ttl", st.domain, err)
	}
}

// degraded logs msg at warn level, at most once per DegradedLogInterval.
func (s *Service) degraded(msg, domain string, err error) {
	now := time.Now().UnixNano()
	last := s.lastDegraded.Load()
	if now-last < int64(s.opts.DegradedLogInterval) || !s.lastDegraded.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn(msg, zap.String("domain", domain), zap.Error(err))
}

// invalid is the INVALID_ARGUMENT status of a report's field.
func invalid(field, format string, args ...any) error {
	return status.Error(codes.InvalidArgument, field+": "+fmt.Sprintf(format, args...))
}
