package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// Failure modes: what a domain answers when the store fails.
const (
	// FailureModeAllow answers OK (fail open).
	FailureModeAllow = "allow"
	// FailureModeDeny answers OVER_LIMIT for every limited descriptor.
	FailureModeDeny = "deny"
	// FailureModeError answers gRPC UNAVAILABLE, so that Envoy's own
	// failure_mode_deny decides. It is what an unset failure mode means.
	FailureModeError = ""
)

// Default input limits. They bound what Envoy's config shapes, never what an
// end client sends (entry values are unbounded and count in their own
// counters).
const (
	// DefaultMaxDescriptors is Options.MaxDescriptors when zero.
	DefaultMaxDescriptors = 64
	// DefaultMaxEntries is Options.MaxEntries when zero.
	DefaultMaxEntries = 32
	// DefaultMaxKeyBytes is Options.MaxKeyBytes when zero.
	DefaultMaxKeyBytes = 256
)

// Options configures a Service. The zero value of every field but Store is
// usable.
type Options struct {
	// Store decides and counts hits. Required.
	Store limiter.Store
	// Logger receives per-request debug lines and degraded-mode warnings.
	// nil means zap.NewNop().
	Logger *zap.Logger
	// Headers selects the response header sets; zero sends none.
	// cmd/server's default is HeadersDraft.
	Headers HeaderSet
	// RawBody sets the JSON body Envoy sends with a 429,
	// {"error":"rate_limited","retry_after_seconds":N}, and its content-type.
	RawBody bool
	// DynamicMetadata adds the config metadata of every descriptor that
	// matched a rule and passed to the response's dynamic_metadata, for later
	// filters.
	DynamicMetadata bool
	// FailureMode is the failure mode of a domain whose config sets none:
	// FailureModeAllow, FailureModeDeny or FailureModeError (the default).
	FailureMode string
	// Metrics records decisions, store calls and latencies; nil records
	// nothing.
	Metrics *Metrics
	// DegradedLogInterval is the least time between two log lines about
	// answers given by the failure mode (the metric counts every one). Zero
	// means 10 s.
	DegradedLogInterval time.Duration
	// MaxDescriptors, MaxEntries and MaxKeyBytes bound the descriptors per
	// request, the entries per descriptor and the bytes of an entry key. A
	// request over them gets INVALID_ARGUMENT and touches no counter. Zero
	// means the Default constants.
	MaxDescriptors, MaxEntries, MaxKeyBytes int
}

// Service answers ShouldRateLimit calls. It is safe for concurrent use; the
// config is swapped atomically with SetConfig and every call reads one
// snapshot.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	opts   Options
	log    *zap.Logger
	config atomic.Pointer[descriptors.Config]

	lastDegraded atomic.Int64 // UnixNano of the last degraded-answer log line
	suppressed   atomic.Int64 // degraded answers not logged since
	scratch      sync.Pool    // *scratch, reused per call
	texts        atomic.Pointer[limitTexts]
}

// scratch is per-call working memory, reused through Service.scratch.
type scratch struct {
	vs      []verdict
	entries []descriptors.Entry
	hits    []limiter.Hit
}

// grow returns s resized to n, reusing its array when it is large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// New returns a Service with no config: until SetConfig is called every call
// fails with UNAVAILABLE (ErrNoConfig), so Envoy's failure mode decides. New
// panics if o.Store is nil, a programmer error.
func New(o Options) *Service {
	if o.Store == nil {
		panic("rls: Options.Store is nil")
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.DegradedLogInterval <= 0 {
		o.DegradedLogInterval = 10 * time.Second
	}
	if o.MaxDescriptors <= 0 {
		o.MaxDescriptors = DefaultMaxDescriptors
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.MaxKeyBytes <= 0 {
		o.MaxKeyBytes = DefaultMaxKeyBytes
	}
	s := &Service{opts: o, log: o.Logger}
	s.scratch.New = func() any { return new(scratch) }
	return s
}

// SetConfig makes c the config of every call that starts after it returns.
// A nil c unloads the config (every domain unknown).
func (s *Service) SetConfig(c *descriptors.Config) { s.config.Store(c) }

// Config returns the config in force, nil if none was set.
func (s *Service) Config() *descriptors.Config { return s.config.Load() }

// ShouldRateLimit implements envoy.service.ratelimit.v3.RateLimitService.
//
// It returns exactly one status per request descriptor, in order, and
// overall_code OVER_LIMIT if any enforced descriptor is over its limit. A
// request that any enforced limit denies consumes from none. An unknown
// domain or a descriptor that matches no rule is OK with no limit.
//
// Errors, as gRPC statuses: INVALID_ARGUMENT naming the field when the
// request's shape (set by Envoy's config) is wrong or over a limit of
// Options; UNAVAILABLE when the store fails and the domain's failure mode is
// FailureModeError; the context's code when ctx ends first.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := time.Now()
	resp, err := s.shouldRateLimit(ctx, req)
	if s.opts.Metrics != nil {
		s.opts.Metrics.observeRequest(time.Since(start), status.Code(err).String())
	}
	return resp, err
}

func (s *Service) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := s.validate(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp, err := s.decide(ctx, req)
	if err != nil {
		return nil, grpcError(err)
	}
	return resp, nil
}

// ErrNoConfig is returned (as gRPC UNAVAILABLE) while no config is loaded:
// without one Sluice cannot tell which limits apply.
var ErrNoConfig = errors.New("rls: no config loaded")

// grpcError maps an error of decide to its gRPC status: the one function
// where Sluice's errors become codes.
func grpcError(err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, limiter.ErrStoreUnavailable):
		return status.FromContextError(err).Err()
	case errors.Is(err, limiter.ErrStoreUnavailable), errors.Is(err, ErrNoConfig):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// validate checks what Envoy's config shapes. It never looks at entry values,
// which the end client controls.
func (s *Service) validate(req *rlsv3.RateLimitRequest) error {
	if req.GetDomain() == "" {
		return errors.New("domain: must not be empty")
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return errors.New("descriptors: must not be empty")
	}
	if len(ds) > s.opts.MaxDescriptors {
		return fmt.Errorf("descriptors: %d descriptors, more than the limit of %d", len(ds), s.opts.MaxDescriptors)
	}
	for i, d := range ds {
		es := d.GetEntries()
		if len(es) == 0 {
			return fmt.Errorf("descriptors[%d].entries: must not be empty", i)
		}
		if len(es) > s.opts.MaxEntries {
			return fmt.Errorf("descriptors[%d].entries: %d entries, more than the limit of %d", i, len(es), s.opts.MaxEntries)
		}
		for j, e := range es {
			if e.GetKey() == "" {
				return fmt.Errorf("descriptors[%d].entries[%d].key: must not be empty", i, j)
			}
			if len(e.GetKey()) > s.opts.MaxKeyBytes {
				return fmt.Errorf("descriptors[%d].entries[%d].key: %d bytes, more than the limit of %d", i, j, len(e.GetKey()), s.opts.MaxKeyBytes)
			}
		}
		if o := d.GetLimit(); o != nil {
			u := descriptors.Unit(o.GetUnit())
			if u == descriptors.UnitUnknown || u.Duration() == 0 {
				return fmt.Errorf("descriptors[%d].limit.unit: unit %v cannot be used (want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR)", i, o.GetUnit())
			}
			if m := o.GetUnitMultiplier(); m != nil && m.GetValue() == 0 {
				return fmt.Errorf("descriptors[%d].limit.unit_multiplier: must be at least 1", i)
			}
		}
	}
	return nil
}

// verdict is the per-descriptor state of one call.
type verdict struct {
	rule   *descriptors.Rule  // matched rule, nil if none
	limit  *descriptors.Limit // the limit counted, nil if not counted
	name   string             // limit name for headers
	hit    int                // index into hits, -1 if not counted
	quota  bool               // quota_mode
	shadow bool               // shadow_mode: never denies, never in headers
	over   bool               // limit is the descriptor's own override
}

// decide evaluates a validated request.
func (s *Service) decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	cfg := s.config.Load()
	if cfg == nil {
		return nil, ErrNoConfig
	}
	ds := req.GetDescriptors()
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds)),
	}
	block := make([]rlsv3.RateLimitResponse_DescriptorStatus, len(ds)) // one allocation for all statuses
	for i := range resp.Statuses {
		block[i].Code = rlsv3.RateLimitResponse_OK
		resp.Statuses[i] = &block[i]
	}
	dom := cfg.Domain(req.GetDomain())
	if dom == nil {
		// Not an error (envoyproxy/ratelimit answers OK too), but a domain
		// misspelt in Envoy's config would otherwise never show.
		if ce := s.log.Check(zap.DebugLevel, "unknown domain, no limits apply"); ce != nil {
			ce.Write(zap.String("domain", req.GetDomain()))
		}
		return resp, nil
	}

	// Resolve every descriptor to a rule and a limit.
	sc := s.scratch.Get().(*scratch)
	defer s.scratch.Put(sc)
	vs := grow(sc.vs, len(ds))
	sc.vs = vs
	var replaced map[string]struct{}
	entries := sc.entries[:0]
	defer func() { sc.entries = entries[:0] }()
	for i, d := range ds {
		entries = entries[:0]
		for _, e := range d.GetEntries() {
			entries = append(entries, descriptors.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		v := verdict{hit: -1}
		v.rule = cfg.Match(dom.Name, entries)
		switch {
		case d.GetLimit() != nil:
			v.limit = overrideLimit(d.GetLimit())
			v.name = overrideName(v.limit)
			v.over = true
		case v.rule != nil && v.rule.Limit != nil && !v.rule.Unlimited:
			v.limit = v.rule.Limit
			v.name = limitName(dom.Name, v.rule)
			v.quota = v.rule.QuotaMode
			for _, r := range v.rule.Limit.Replaces {
				if replaced == nil {
					replaced = make(map[string]struct{})
				}
				replaced[r] = struct{}{}
			}
		}
		vs[i] = v
	}

	// Drop replaced limits, then build one hit per counted descriptor.
	hits := sc.hits[:0]
	defer func() { clear(hits); sc.hits = hits[:0] }()
	quotas := 0
	for i := range vs {
		v := &vs[i]
		if v.limit == nil {
			continue
		}
		if _, ok := replaced[v.limit.Name]; ok && v.limit.Name != "" && ds[i].GetLimit() == nil {
			v.limit = nil
			continue
		}
		d := ds[i]
		v.hit = len(hits)
		v.shadow = d.GetLimit() == nil && v.rule != nil && v.rule.ShadowMode
		shadow := v.shadow
		if v.quota {
			quotas++
			shadow = true // decided below: quota limits deny only together
		}
		hits = append(hits, limiter.Hit{
			Key:    counterKey(dom.Name, d, v.rule, d.GetLimit() != nil),
			Limit:  limiter.Limit{Requests: uint64(v.limit.RequestsPerUnit), Window: v.limit.Window()},
			Hits:   hitsAddend(req, d),
			Refund: d.GetIsNegativeHits(),
			Shadow: shadow,
		})
	}
	if len(hits) == 0 {
		return resp, nil
	}

	// The store bounds its own calls (pkg/redis: CallTimeout, 15 ms by
	// default); the incoming deadline, when shorter, rides on ctx.
	storeStart := time.Now()
	results, err := s.opts.Store.Apply(ctx, hits)
	s.opts.Metrics.observeStore(time.Since(storeStart), err)
	if err != nil {
		// The caller's own deadline or cancellation is not a store failure:
		// answering by failure mode then would be a late answer (an OK after
		// Envoy gave up). go-redis can report the passed deadline as a socket
		// timeout before ctx says so, hence the clock check.
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			return nil, context.DeadlineExceeded
		}
		return s.failure(dom, vs, resp, err)
	}

	// Quota mode: the quota descriptors deny only when all of them are over.
	quotaDenied := false
	if quotas > 0 {
		quotaDenied = true
		for _, v := range vs {
			if v.quota && v.hit >= 0 && results[v.hit].Allowed {
				quotaDenied = false
				break
			}
		}
		if quotaDenied && admitted(hits, results) {
			// The store admitted the request (quota hits were shadows), so it
			// consumed: give it back, keeping "a denial consumes nothing".
			if err := s.refund(ctx, hits); err != nil {
				s.log.Warn("quota refund failed", zap.String("domain", dom.Name), zap.Error(err))
			}
		}
	}

	var denyRetry time.Duration
	exceeds := false
	for i, v := range vs {
		st := resp.Statuses[i]
		if v.hit < 0 {
			continue
		}
		r := results[v.hit]
		st.CurrentLimit = currentLimit(v.limit)
		st.LimitRemaining = uint32(min(r.Remaining, math.MaxUint32))
		st.DurationUntilReset = durationpb.New(r.ResetAfter)
		enforced := !hits[v.hit].Shadow || (v.quota && quotaDenied)
		if !r.Allowed && enforced {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			denyRetry = max(denyRetry, r.RetryAfter)
			if r.ExceedsLimit {
				// More hits than the limit allows in a whole window: no wait
				// admits them. Retry-After is one window; the raw body and
				// this line say so.
				exceeds = true
				if ce := s.log.Check(zap.DebugLevel, "hits exceed the limit itself"); ce != nil {
					ce.Write(zap.String("domain", dom.Name), zap.Int("descriptor", i), zap.Uint64("hits_addend", hits[v.hit].Hits),
						zap.Uint64("requests_per_unit", hits[v.hit].Limit.Requests))
				}
			}
		}
		if m := s.opts.Metrics; m != nil {
			m.observe(dom.Name, ruleLabel(dom.Name, &v, ds[i]), hits[v.hit].Hits, r.Allowed, v.shadow, r.Remaining, hits[v.hit].Limit.Requests)
		}
		if ce := s.log.Check(zap.DebugLevel, "descriptor decided"); ce != nil {
			ce.Write(zap.String("domain", dom.Name), zap.Int("descriptor", i), zap.String("limit_name", v.name),
				zap.Bool("allowed", r.Allowed), zap.Uint64("limit_remaining", r.Remaining),
				zap.Bool("shadow_mode", hits[v.hit].Shadow && !v.quota), zap.Uint64("hits_addend", hits[v.hit].Hits))
		}
	}
	s.addHeaders(cfg, resp, vs, results, resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT, denyRetry, exceeds)
	if s.opts.DynamicMetadata && resp.OverallCode == rlsv3.RateLimitResponse_OK {
		resp.DynamicMetadata = dynamicMetadata(vs)
	}
	return resp, nil
}

// admitted reports whether the store consumed: every enforced hit Allowed.
func admitted(hits []limiter.Hit, results []limiter.Result) bool {
	for i, h := range hits {
		if !h.Shadow && !h.Refund && !results[i].Allowed {
			return false
		}
	}
	return true
}

// refund gives back what hits consumed.
func (s *Service) refund(ctx context.Context, hits []limiter.Hit) error {
	back := make([]limiter.Hit, 0, len(hits))
	for _, h := range hits {
		if h.Hits == 0 {
			continue
		}
		back = append(back, limiter.Hit{Key: h.Key, Limit: h.Limit, Hits: h.Hits, Refund: !h.Refund, Shadow: true})
	}
	if len(back) == 0 {
		return nil
	}
	_, err := s.opts.Store.Apply(ctx, back)
	return err
}

// failure answers a call whose store failed, per the domain's failure mode.
func (s *Service) failure(dom *descriptors.Domain, vs []verdict, resp *rlsv3.RateLimitResponse, err error) (*rlsv3.RateLimitResponse, error) {
	mode := dom.FailureMode.String()
	if mode == "" {
		mode = s.opts.FailureMode
	}
	if mode == "error" {
		mode = FailureModeError
	}
	s.opts.Metrics.observeFailure(dom.Name, mode)
	s.logDegraded(dom.Name, mode, err)
	if mode != FailureModeAllow && mode != FailureModeDeny {
		return nil, err
	}
	for i, v := range vs {
		if v.hit >= 0 {
			st := resp.Statuses[i]
			st.CurrentLimit = currentLimit(v.limit)
			if mode == FailureModeDeny {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
				resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			}
		}
	}
	// A denial by failure mode still tells the client when to come back: the
	// store's state is unknown, so the shortest useful wait, 1 s.
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && s.opts.Headers != 0 {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: "Retry-After", Value: "1"})
	}
	return resp, nil
}

// logDegraded logs a store failure at most once per DegradedLogInterval,
// with the number of failures it did not log since the last line.
func (s *Service) logDegraded(domain, mode string, err error) {
	now := time.Now().UnixNano()
	last := s.lastDegraded.Load()
	if now-last < int64(s.opts.DegradedLogInterval) || !s.lastDegraded.CompareAndSwap(last, now) {
		s.suppressed.Add(1)
		return
	}
	if mode == FailureModeError {
		mode = "error"
	}
	s.log.Warn("store failed, answering by failure mode", zap.String("domain", domain), zap.String("failure_mode", mode),
		zap.Int64("suppressed", s.suppressed.Swap(0)), zap.Error(err))
}

// hitsAddend follows RateLimitDescriptor.hits_addend and
// RateLimitRequest.hits_addend: the descriptor's own value wins, even 0
// (check only); otherwise the request's, where 0 means 1.
func hitsAddend(req *rlsv3.RateLimitRequest, d *rlcommon.RateLimitDescriptor) uint64 {
	if h := d.GetHitsAddend(); h != nil {
		return h.GetValue()
	}
	if n := req.GetHitsAddend(); n > 0 {
		return uint64(n)
	}
	return 1
}

// overrideLimit turns a descriptor's limit override into a Limit. validate
// has checked its unit.
func overrideLimit(o *rlcommon.RateLimitDescriptor_RateLimitOverride) *descriptors.Limit {
	m := uint32(1)
	if o.GetUnitMultiplier() != nil {
		m = o.GetUnitMultiplier().GetValue()
	}
	return &descriptors.Limit{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: descriptors.Unit(o.GetUnit()), UnitMultiplier: m}
}

// currentLimit is a DescriptorStatus.current_limit for l.
func currentLimit(l *descriptors.Limit) *rlsv3.RateLimitResponse_RateLimit {
	cl := &rlsv3.RateLimitResponse_RateLimit{
		Name:            l.Name,
		RequestsPerUnit: l.RequestsPerUnit,
		Unit:            rlsv3.RateLimitResponse_RateLimit_Unit(l.Unit),
	}
	if l.UnitMultiplier > 1 {
		cl.UnitMultiplier = wrapperspb.UInt32(l.UnitMultiplier)
	}
	return cl
}

// dynamicMetadata merges the metadata of every matched rule, later
// descriptors winning on the same key.
func dynamicMetadata(vs []verdict) *structpb.Struct {
	var m map[string]any
	for _, v := range vs {
		if v.rule == nil || v.rule.Metadata == nil {
			continue
		}
		if m == nil {
			m = make(map[string]any)
		}
		for k, x := range v.rule.Metadata {
			m[k] = x
		}
	}
	if m == nil {
		return nil
	}
	st, err := structpb.NewStruct(m)
	if err != nil {
		return nil // metadata that is not JSON-like is left out
	}
	return st
}
