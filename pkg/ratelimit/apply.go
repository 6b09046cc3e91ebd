package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// errCaller marks an error of apply that is the caller's own (its context
// ended): it is returned as is, never answered by the failure mode.
type errCaller struct{ err error }

func (e errCaller) Error() string { return e.err.Error() }
func (e errCaller) Unwrap() error { return e.err }

// The margin a decision keeps of its caller's deadline to answer when its
// failure mode answers (allow or deny): the store's call ends that long
// before the deadline, so that a decision the store could not make in time
// is still answered, by the failure mode, before the caller gives up. It is
// a tenth of the time left, at least AnswerMargin and at most
// maxAnswerMargin; a caller that leaves less than minMargined gets none
// (the answer could not arrive in time anyway). With the error failure mode
// there is no margin: an error and a passed deadline are the same to Envoy,
// and a store call that ends within the margin is a decision. The cap is
// wide enough for a loaded host to deliver the answer: a call of a 1 s
// caller that Redis holds (paused) waits its whole budget, and 5 ms, as
// it was, let answers arrive after the caller's deadline.
const (
	AnswerMargin    = 2 * time.Millisecond
	maxAnswerMargin = 100 * time.Millisecond
	minMargined     = 5 * time.Millisecond
)

// answerBy returns the deadline of the store call of a decision whose
// caller's deadline is dl, at now: dl less the margin to answer.
func answerBy(dl, now time.Time) time.Time {
	left := dl.Sub(now)
	if left < minMargined {
		return dl
	}
	return dl.Add(-min(max(left/10, AnswerMargin), maxAnswerMargin))
}

// apply is the third stage of Decide: one Store call for every hit of the
// request. The caller's deadline rides on ctx: the store takes its budget
// from it (less the margin to answer when answers, the failure mode being
// allow or deny), and bounds a call that has none itself (pkg/redis:
// CallTimeout, 1 s by default). It returns one Result per hit, or an
// errCaller when ctx ended first, or the store's error.
func (s *Service) apply(ctx context.Context, hits []limiter.Hit, answers bool) ([]limiter.Result, error) {
	start := time.Now()
	sctx := ctx
	if dl, ok := ctx.Deadline(); ok && answers {
		if by := answerBy(dl, start); by.Before(dl) {
			var cancel context.CancelFunc
			sctx, cancel = context.WithDeadline(ctx, by)
			defer cancel()
		}
	}
	results, err := s.opts.Store.Apply(sctx, hits)
	s.observeStore(ctx, start, len(hits), err)
	if err == nil && len(results) != len(hits) {
		err = fmt.Errorf("%w: store returned %d results for %d hits", limiter.ErrStoreUnavailable, len(results), len(hits))
	}
	if err == nil {
		return results, nil
	}
	// The caller's own deadline or cancellation is not a store failure:
	// answering by failure mode then would be a late answer (an OK after
	// Envoy gave up). go-redis can report the passed deadline as a socket
	// timeout before ctx says so, hence the clock check.
	if ctx.Err() != nil {
		return nil, errCaller{ctx.Err()}
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return nil, errCaller{context.DeadlineExceeded}
	}
	return nil, err
}

// failure answers a request whose store call failed with err: by the
// domain's failure mode, else the service's. FailureModeError returns err;
// allow answers OK; deny answers OverLimit for every enforced limit, with a
// Retry-After of one second (the store's state is unknown, so the shortest
// useful wait).
func (s *Service) failure(d Decision, err error) (Decision, error) {
	if c, ok := errors.AsType[errCaller](err); ok {
		return Decision{}, c.err
	}
	mode := s.failureMode(d)
	s.opts.Metrics.observeFailure(d.Domain.Name, mode.String())
	s.failed(d.Domain.Name, err)
	s.logDegraded(d.Domain.Name, mode, err)
	if mode == descriptors.FailureModeError {
		return Decision{}, err
	}
	d.FailureMode = mode
	if mode != descriptors.FailureModeDeny {
		return d, nil
	}
	for i := range d.Statuses {
		if st := &d.Statuses[i]; st.Counted() && !st.Shadow {
			st.Code, d.Code = OverLimit, OverLimit
		}
	}
	if d.Code == OverLimit {
		d.RetryAfter = time.Second
	}
	return d, nil
}

// logDegraded logs a store failure at most once per DegradedLogInterval,
// with the number of failures it did not log since the last line.
func (s *Service) logDegraded(domain string, mode descriptors.FailureMode, err error) {
	now := time.Now().UnixNano()
	last := s.lastDegraded.Load()
	if now-last < int64(s.opts.DegradedLogInterval) || !s.lastDegraded.CompareAndSwap(last, now) {
		s.suppressed.Add(1)
		return
	}
	s.log.Warn("store failed, answering by failure mode", zap.String("domain", domain), zap.String("failure_mode", mode.String()),
		zap.Int64("suppressed", s.suppressed.Swap(0)), zap.Error(err))
}

// applyLocal decides hits on the local store because the store failed with
// err (the caller's own end is returned as is, for failure). It counts and
// logs the answer as the failure mode's, and marks d as decided locally.
func (s *Service) applyLocal(ctx context.Context, d *Decision, hits []limiter.Hit, err error) ([]limiter.Result, error) {
	if _, ok := errors.AsType[errCaller](err); ok {
		return nil, err
	}
	s.opts.Metrics.observeFailure(d.Domain.Name, descriptors.FailureModeLocal.String())
	s.failed(d.Domain.Name, err)
	s.logDegraded(d.Domain.Name, descriptors.FailureModeLocal, err)
	s.localSince.CompareAndSwap(0, time.Now().UnixNano())
	results, lerr := s.opts.Local.Apply(ctx, hits)
	if lerr != nil || len(results) != len(hits) {
		return nil, err
	}
	d.FailureMode = descriptors.FailureModeLocal
	return results, nil
}

// LocalSince returns when decisions began to be made locally (failure mode
// local) because the store failed, and the zero time while the store
// answers. It is safe for concurrent use.
func (s *Service) LocalSince() time.Time {
	if ns := s.localSince.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// failureMode is d's domain's failure mode, else the service's.
func (s *Service) failureMode(d Decision) descriptors.FailureMode {
	if d.Domain.FailureMode != descriptors.FailureModeUnset {
		return d.Domain.FailureMode
	}
	return s.opts.FailureMode
}
