package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
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

// Options configures a Service. The zero value of every field but Decider is
// usable.
type Options struct {
	// Decider makes every decision. Required.
	Decider *ratelimit.Service
	// Headers selects the response header sets; zero sends none.
	// The server's default (--response-headers) is HeadersDraft.
	Headers HeaderSet
	// CompatNames are the names of the HeadersCompat headers: the limit, the
	// remaining and the reset (envoyproxy/ratelimit's LIMIT_LIMIT_HEADER,
	// LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER). An empty name takes
	// the default of DefaultCompatNames.
	CompatNames [3]string
	// RawBody sets the JSON body Envoy sends with a 429,
	// {"error":"rate_limited","retry_after_seconds":N}, and its content-type.
	RawBody bool
	// DynamicMetadata adds the config metadata of every descriptor that
	// matched a rule to an OK response's dynamic_metadata, for later filters.
	// (The slot token of a request that took concurrency slots is always
	// there, under ratelimit.SlotTokenKey.)
	DynamicMetadata bool
	// Metrics records the latency of every call by gRPC code; nil records
	// nothing. (Decision metrics are the Decider's.)
	Metrics *Metrics
	// MaxDescriptors, MaxEntries and MaxKeyBytes bound the descriptors per
	// request, the entries per descriptor and the bytes of an entry key. A
	// request over them gets INVALID_ARGUMENT and touches no counter. Zero
	// means the Default constants.
	MaxDescriptors, MaxEntries, MaxKeyBytes int
	// JSONHitsAddend lets POST /json (JSONHandler) refund hits
	// (is_negative_hits) and send a hits_addend above 1, as gRPC may.
	// False, such a request is refused with 400: the HTTP port is reached
	// by far more than Envoy (kubelets, Prometheus), and either field lets
	// its sender reset or drain any counter. JSONHitsAddendSetting names the
	// setting that turns it on, for that 400's message.
	JSONHitsAddend        bool
	JSONHitsAddendSetting string
	// JSONCheckOnly decides every POST /json request as a check: each
	// descriptor with hits_addend 0 and is_negative_hits false, whatever
	// the request asks, so the HTTP port shows decisions and moves no
	// counter.
	JSONCheckOnly bool
}

// Service answers ShouldRateLimit calls: it validates and converts Envoy's
// request, asks its Decider, and renders the Decision as Envoy's response
// (statuses, headers, raw body, dynamic metadata). It is safe for
// concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	opts    Options
	scratch sync.Pool // *converter, reused per call
	texts   textCache
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// New returns a Service on o.Decider. It panics if o.Decider is nil, a
// programmer error.
func New(o Options) *Service {
	if o.Decider == nil {
		panic("rls: Options.Decider is nil")
	}
	for i, n := range o.CompatNames {
		if n == "" {
			o.CompatNames[i] = DefaultCompatNames[i]
		}
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
	s := &Service{opts: o}
	s.scratch.New = func() any { return new(converter) }
	return s
}

// ShouldRateLimit implements envoy.service.ratelimit.v3.RateLimitService.
//
// It returns exactly one status per request descriptor, in order, and
// overall_code OVER_LIMIT if any enforced descriptor is over its limit. A
// request that any enforced limit denies consumes from none. An unknown
// domain or a descriptor that matches no rule is OK with no limit.
//
// Errors, as gRPC statuses: INVALID_ARGUMENT naming the field when the
// request's shape (set by Envoy's config) is wrong or over a limit of
// Options; UNAVAILABLE while no config is loaded, or when the store fails
// and the domain's failure mode is error; the context's code when ctx ends
// first.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := time.Now()
	resp, err := s.shouldRateLimit(ctx, req)
	if s.opts.Metrics != nil {
		s.opts.Metrics.observeRequest(time.Since(start), status.Code(err))
	}
	return resp, err
}

func (s *Service) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := s.validate(req); err != nil {
		annotate(ctx, req, nil)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	r := s.scratch.Get().(*converter)
	defer s.scratch.Put(r)
	defer r.reset() // after the response is built: the Decision's statuses are r's
	d, err := s.opts.Decider.Decide(ctx, r.convert(req))
	if err != nil {
		annotate(ctx, req, nil)
		return nil, grpcError(err)
	}
	annotate(ctx, req, &d)
	return s.response(&d), nil
}

// grpcError maps an error of Decide to its gRPC status: the one function
// where Sluice's errors become codes.
func grpcError(err error) error {
	switch {
	case errors.Is(err, ratelimit.ErrInvalidRequest):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, limiter.ErrStoreUnavailable):
		return status.FromContextError(err).Err()
	case errors.Is(err, limiter.ErrStoreUnavailable), errors.Is(err, ratelimit.ErrNoConfig):
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
		if err := validateOverride(d.GetLimit()); err != nil {
			return fmt.Errorf("descriptors[%d].limit.%w", i, err)
		}
	}
	return nil
}

// validateOverride checks a descriptor's limit override (nil is valid): a
// usable unit, a multiplier of at least 1, and a window no longer than
// descriptors.MaxWindow.
func validateOverride(o *rlcommon.RateLimitDescriptor_RateLimitOverride) error {
	if o == nil {
		return nil
	}
	u := descriptors.Unit(o.GetUnit())
	if u == descriptors.UnitUnknown || u.Duration() == 0 {
		return fmt.Errorf("unit: unit %v cannot be used (want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR)", o.GetUnit())
	}
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() == 0 {
		return errors.New("unit_multiplier: must be at least 1")
	}
	if m := o.GetUnitMultiplier().GetValue(); time.Duration(m) > descriptors.MaxWindow/u.Duration() {
		return fmt.Errorf("unit_multiplier: %d x %v is longer than the longest window, %v", m, o.GetUnit(), descriptors.MaxWindow)
	}
	return nil
}

// response renders d as Envoy's RateLimitResponse.
func (s *Service) response(d *ratelimit.Decision) *rlsv3.RateLimitResponse {
	resp, m := newResponse(len(d.Statuses), s.opts.Headers != 0)
	resp.OverallCode = code(d.Code)
	for i := range d.Statuses {
		st, ps := &d.Statuses[i], resp.Statuses[i]
		ps.Code = code(st.Code)
		if !st.Counted() {
			continue
		}
		ps.CurrentLimit = s.texts.get(d.Config, st.Override, st.Name, st.Limit).current
		if d.FailureMode == descriptors.FailureModeUnset {
			ps.LimitRemaining = uint32(min(st.Result.Remaining, math.MaxUint32))
			ps.DurationUntilReset = setDuration(&m.resets[i], st.Result.ResetAfter)
		}
	}
	s.addHeaders(resp, d, m.headers)
	if s.opts.DynamicMetadata && d.Code == ratelimit.OK {
		resp.DynamicMetadata = dynamicMetadata(d.Metadata())
	}
	if d.SlotToken != "" {
		// The concurrency slots' token, for the release to send back: see
		// ratelimit.SlotTokenKey.
		if resp.DynamicMetadata == nil {
			resp.DynamicMetadata = &structpb.Struct{Fields: make(map[string]*structpb.Value, 1)}
		}
		resp.DynamicMetadata.Fields[ratelimit.SlotTokenKey] = structpb.NewStringValue(d.SlotToken)
	}
	return resp
}

// responseMemory is what a response points to beside its statuses: one
// duration_until_reset per status and the response headers.
type responseMemory struct {
	resets  []durationpb.Duration
	headers *headerList // nil when no header set is on
}

// oneStatus is a response with one status, its duration_until_reset and
// its headers, in one allocation: most calls carry a single descriptor.
type oneStatus struct {
	resp    rlsv3.RateLimitResponse
	ptr     [1]*rlsv3.RateLimitResponse_DescriptorStatus
	st      rlsv3.RateLimitResponse_DescriptorStatus
	reset   [1]durationpb.Duration
	headers headerList
}

// newResponse returns an empty response with n empty statuses, and the
// memory the statuses' durations and, withHeaders, the headers may use,
// in as few allocations as it can: one for n = 1, else four.
func newResponse(n int, withHeaders bool) (*rlsv3.RateLimitResponse, responseMemory) {
	if n == 1 {
		b := new(oneStatus)
		b.ptr[0] = &b.st
		b.resp.Statuses = b.ptr[:]
		m := responseMemory{resets: b.reset[:]}
		if withHeaders {
			m.headers = &b.headers
		}
		return &b.resp, m
	}
	resp := &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}
	block := make([]rlsv3.RateLimitResponse_DescriptorStatus, n)
	for i := range block {
		resp.Statuses[i] = &block[i]
	}
	m := responseMemory{resets: make([]durationpb.Duration, n)}
	if withHeaders {
		m.headers = new(headerList)
	}
	return resp, m
}

// setDuration sets dp to d rounded up to whole seconds, and returns it.
// Envoy truncates duration_until_reset to whole seconds for its
// x-ratelimit-reset header, so a fraction would promise the reset too
// early; envoyproxy/ratelimit's are whole seconds too, and the RateLimit
// header's t and Retry-After round up the same way (ceilSeconds).
func setDuration(dp *durationpb.Duration, d time.Duration) *durationpb.Duration {
	dp.Seconds, dp.Nanos = ceilSeconds(d), 0
	return dp
}

func code(c ratelimit.Code) rlsv3.RateLimitResponse_Code {
	if c == ratelimit.OverLimit {
		return rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return rlsv3.RateLimitResponse_OK
}

// currentLimit is a DescriptorStatus.current_limit for l; for a pool's
// class, its requests_per_unit is the class's ceiling in requests.
func currentLimit(l *descriptors.Limit) *rlsv3.RateLimitResponse_RateLimit {
	cl := &rlsv3.RateLimitResponse_RateLimit{
		Name:            l.Name,
		RequestsPerUnit: l.CeilingRequests(),
		Unit:            rlsv3.RateLimitResponse_RateLimit_Unit(l.Unit),
	}
	if l.UnitMultiplier > 1 {
		cl.UnitMultiplier = wrapperspb.UInt32(l.UnitMultiplier)
	}
	return cl
}

// dynamicMetadata renders merged rule metadata as a Struct; nil for none or
// for metadata that is not JSON-like.
func dynamicMetadata(m map[string]any) *structpb.Struct {
	if m == nil {
		return nil
	}
	st, err := structpb.NewStruct(m)
	if err != nil {
		return nil
	}
	return st
}
