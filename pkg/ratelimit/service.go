package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// Options configures a Service. The zero value of every field but Store is
// usable.
type Options struct {
	// Store decides and counts hits. Required.
	Store limiter.Store
	// Logger receives per-request debug lines and degraded-mode warnings.
	// nil means zap.NewNop().
	Logger *zap.Logger
	// FailureMode is the failure mode of a domain whose config sets none.
	// FailureModeUnset means FailureModeError.
	FailureMode descriptors.FailureMode
	// Metrics records decisions, store calls and failure-mode answers; nil
	// records nothing.
	Metrics *Metrics
	// Observers are told of every counted descriptor, after Metrics; those
	// that are also ErrorObservers are told of failed calls too.
	Observers []Observer
	// StoreObservers are told of every Store call, after Metrics, with the
	// timing Decide took of it: the call is timed once, whoever reads it.
	StoreObservers []StoreObserver
	// ShadowMode puts every counted limit in shadow mode: counted as if
	// admitted, reported OK, never denying (envoyproxy/ratelimit's global
	// SHADOW_MODE). Metrics count its would-be denials as shadow mode.
	ShadowMode bool
	// Overdraw is the overdraw of every limit whose config does not say
	// (descriptors.Limit.Overdraw nil; configs from xDS never say): it
	// counts every hit it is sent, admitted or not (limiter.Limit.Overdraw).
	// Algorithms that cannot overdraw (sliding_log, concurrency) and pools'
	// classes ignore it.
	Overdraw bool
	// CountDenied counts the hits of a denied request too, on every limit
	// whose config says no overdraw and that Overdraw leaves alone: a hit is
	// over the limit when the count after it would pass the limit, and
	// counts either way (limiter.Limit.CountDenied; envoyproxy/ratelimit's
	// counting without STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT). Algorithms
	// that cannot (sliding_log, concurrency) and pools' classes ignore it:
	// a shed request consumes nothing.
	CountDenied bool
	// Cache is the limiter cache of every limit whose config and domain do
	// not say (descriptors.Limit.Cache, descriptors.Domain.Cache): its hits
	// carry limiter.Limit.Cache, for a limiter.Cache in the Store to decide
	// in process. Concurrency limits and pools' classes ignore it.
	Cache bool
	// Local decides the requests of a domain whose failure mode is
	// FailureModeLocal while the Store fails (limiter.Local: each limit
	// divided among the instances); nil answers them as FailureModeError.
	Local limiter.Store
	// Tenants gives the rows of tenant tables (tenants_from) to the rules
	// that name one; nil gives every value its rule's own limits.
	Tenants Tenants
	// DegradedLogInterval is the least time between two log lines about
	// answers given by the failure mode (the metric counts every one). Zero
	// means 10 s.
	DegradedLogInterval time.Duration
}

// Service decides rate-limit requests against the config in force and a
// Store. It is safe for concurrent use; the config is swapped atomically
// with SetConfig and every Decide reads one snapshot.
type Service struct {
	opts      Options
	log       *zap.Logger
	config    atomic.Pointer[descriptors.Config]
	observers []Observer      // Metrics, then Options.Observers
	errObs    []ErrorObserver // the Observers that are also ErrorObservers

	lastDegraded atomic.Int64 // UnixNano of the last degraded-answer log line
	localSince   atomic.Int64 // UnixNano of the first local decision since the store last answered, 0 for none
	suppressed   atomic.Int64 // degraded answers not logged since
	scratch      sync.Pool    // *scratch, reused per call
}

// Observer is told of the outcome of every counted descriptor that the
// store decided (not of answers given by the failure mode): metrics, the
// status page, compatible metric names. st and entries are valid only during
// the call. ObserveDescriptor runs on the request path: it must be fast and
// safe for concurrent use.
type Observer interface {
	ObserveDescriptor(dom *descriptors.Domain, st *Status, entries []descriptors.Entry)
}

// ErrorObserver is an Observer that is also told of every call that
// failed: each error Decide returns (but the caller's own cancellation or
// deadline), and each store failure, whatever the failure mode then
// answered (err wraps limiter.ErrStoreUnavailable). domain is the request's,
// possibly empty. ObserveError must be safe for concurrent use.
type ErrorObserver interface {
	ObserveError(domain string, err error)
}

// StoreCall is one Store call that Decide made, as Decide timed it.
type StoreCall struct {
	// Start is when the call began (time.Now, with its monotonic reading).
	Start time.Time
	// Took is how long the call took, until the store returned.
	Took time.Duration
	// Hits is the number of hits the call sent.
	Hits int
	// Err is the store's error, nil when it answered.
	Err error
}

// StoreObserver is told of every Store call that Decide makes (the status
// page's latencies, a trace span per call), so that a call is timed once,
// by the decision, not by a decorator per reader. ctx is the request's,
// carrying its trace. ObserveStore runs on the request path after the call
// returned: it must be fast and safe for concurrent use.
type StoreObserver interface {
	ObserveStore(ctx context.Context, c StoreCall)
}

// Tenants gives the rows of tenant tables. Implementations must be safe for
// concurrent use and fast: Tenant runs on the request path.
type Tenants interface {
	// Tenant returns value's row of table, nil when the table has none (the
	// value counts its rule's own limits). It never fails: a table that
	// cannot be read gives the row last seen, else nil.
	Tenant(ctx context.Context, table, value string) *descriptors.TenantRow
}

// scratch is per-call working memory, reused through Service.scratch.
type scratch struct {
	hits     []limiter.Hit
	idx      []int  // per status: index into hits, -1 when not counted
	acquired uint64 // the request's slot token, when a hit acquires slots
}

// New returns a Service with no config: until SetConfig is called every
// Decide fails with ErrNoConfig. New panics if o.Store is nil, a programmer
// error.
func New(o Options) *Service {
	if o.Store == nil {
		panic("ratelimit: Options.Store is nil")
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.DegradedLogInterval <= 0 {
		o.DegradedLogInterval = 10 * time.Second
	}
	if o.FailureMode == descriptors.FailureModeUnset {
		o.FailureMode = descriptors.FailureModeError
	}
	s := &Service{opts: o, log: o.Logger}
	if o.Metrics != nil {
		s.observers = append(s.observers, o.Metrics)
	}
	s.observers = append(s.observers, o.Observers...)
	for _, ob := range o.Observers {
		if eo, ok := ob.(ErrorObserver); ok {
			s.errObs = append(s.errObs, eo)
		}
	}
	s.scratch.New = func() any { return new(scratch) }
	return s
}

// SetConfig makes c the config of every Decide that starts after it
// returns. A nil c unloads the config (Decide then fails with ErrNoConfig).
func (s *Service) SetConfig(c *descriptors.Config) { s.config.Store(c) }

// Config returns the config in force, nil if none was set.
func (s *Service) Config() *descriptors.Config { return s.config.Load() }

// Decide evaluates every descriptor of req against the config in force and
// returns one Status per descriptor, in order. A request that any enforced
// limit denies consumes from none; shadow-mode limits are counted but never
// deny. An unknown domain or a descriptor that matches no rule is OK with no
// limit. Decide makes at most one Store call, bounded by ctx, and does not
// keep req.
//
// Errors: ErrNoConfig while no config is loaded; an error wrapping
// ErrInvalidRequest, naming the field, for an empty domain or a limit
// override that cannot be honoured (nothing is counted); ctx's error when it
// ends before the store answers; and when the store fails, the failure mode
// decides: FailureModeError returns the store's error (wrapping
// limiter.ErrStoreUnavailable), allow and deny answer a Decision whose
// FailureMode says so.
func (s *Service) Decide(ctx context.Context, req *Request) (Decision, error) {
	if req.Domain == "" {
		return Decision{}, s.failed(req.Domain, fmt.Errorf("%w: domain: must not be empty", ErrInvalidRequest))
	}
	cfg := s.config.Load()
	if cfg == nil {
		return Decision{}, s.failed(req.Domain, ErrNoConfig)
	}
	d := Decision{Statuses: req.StatusBuffer, Binding: -1, Config: cfg, Domain: cfg.Domain(req.Domain)}
	if n := len(req.Descriptors); cap(d.Statuses) >= n {
		d.Statuses = d.Statuses[:n]
		clear(d.Statuses)
	} else {
		d.Statuses = make([]Status, n)
	}
	if d.Domain == nil {
		// Not an error (envoyproxy/ratelimit answers OK too), but a domain
		// misspelt in Envoy's config would otherwise never show.
		if ce := s.log.Check(zap.DebugLevel, "unknown domain, no limits apply"); ce != nil {
			ce.Write(zap.String("domain", req.Domain))
		}
		return d, nil
	}
	if err := resolve(ctx, &d, req, s.opts.Tenants); err != nil {
		return Decision{}, s.failed(req.Domain, err)
	}
	if s.opts.ShadowMode {
		for i := range d.Statuses {
			d.Statuses[i].Shadow = d.Statuses[i].Counted()
		}
	}
	sc := s.scratch.Get().(*scratch)
	defer s.scratch.Put(sc)
	hits := plan(&d, req, sc, counting{overdraw: s.opts.Overdraw, countDenied: s.opts.CountDenied, cache: s.opts.Cache})
	defer func() { clear(hits); sc.hits = hits[:0] }()
	if len(hits) == 0 {
		return d, nil
	}
	results, err := s.apply(ctx, hits, s.failureMode(d) != descriptors.FailureModeError)
	if err != nil && s.failureMode(d) == descriptors.FailureModeLocal && s.opts.Local != nil {
		results, err = s.applyLocal(ctx, &d, hits, err)
	} else if err == nil && s.localSince.Load() != 0 {
		s.localSince.Store(0) // the store answers again
	}
	if err != nil {
		return s.failure(d, err)
	}
	s.result(&d, req, sc.idx, hits, results)
	if d.Code == OK && sc.acquired != 0 {
		d.SlotToken = FormatSlotToken(sc.acquired)
	}
	return d, nil
}

// observeStore tells Metrics, then the StoreObservers, of a store call
// that began at start and returned err.
func (s *Service) observeStore(ctx context.Context, start time.Time, hits int, err error) {
	c := StoreCall{Start: start, Took: time.Since(start), Hits: hits, Err: err}
	s.opts.Metrics.observeStore(c.Took, err)
	for _, o := range s.opts.StoreObservers {
		o.ObserveStore(ctx, c)
	}
}

// failed tells the ErrorObservers of err and returns it.
func (s *Service) failed(domain string, err error) error {
	for _, o := range s.errObs {
		o.ObserveError(domain, err)
	}
	return err
}
