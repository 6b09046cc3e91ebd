package integration

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// quotaEnvoy plays one Envoy's rate_limit_quota filter with one bucket,
// the way Envoy's filter behaves (source/extensions/filters/http/
// rate_limit_quota): the first request matched into the bucket creates it,
// is allowed (no_assignment_behavior unset: allow all) and is reported at
// once; every reportEvery all buckets are reported (time_elapsed in whole
// seconds, as Envoy sends it); an assignment applies at once for its TTL
// (whole seconds, as Envoy reads it), a token bucket starts full and is kept
// when an assignment repeats it, and an expired assignment falls back to
// allowing all; an abandon erases the bucket. Requests arrive at rate per
// second, spread evenly; every admitted request's time is recorded.
type quotaEnvoy struct {
	name   string
	bucket map[string]string
	domain string
	every  time.Duration // reporting interval

	stream grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]
	stop   context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	rate      float64 // offered requests per second; 0 sends none
	reporting bool    // false: the Envoy is hung, it sends no report
	created   bool
	strategy  *typev3.RateLimitStrategy // nil: no assignment
	expires   time.Time
	tokens    float64 // the token bucket's
	filled    time.Time
	allowed   uint64 // since the last report
	denied    uint64
	last      time.Time // of the last report
	admitted  []time.Time
	recvErr   error
}

// startQuotaEnvoy opens a quota stream to s and starts the Envoy's traffic,
// reports and receiver, stopped at the end of the test or by kill.
func startQuotaEnvoy(t *testing.T, s *sluice, name string, rate float64, every time.Duration, domain string, bucket map[string]string) *quotaEnvoy {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(s.Conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := &quotaEnvoy{name: name, bucket: bucket, domain: domain, every: every, stream: stream, stop: cancel, rate: rate, reporting: true}
	e.wg.Add(3)
	go func() { defer e.wg.Done(); e.traffic(ctx) }()
	go func() { defer e.wg.Done(); e.reports(ctx) }()
	go func() { defer e.wg.Done(); e.receive() }()
	t.Cleanup(e.kill)
	return e
}

// kill stops the Envoy as a crash does: its stream ends, nothing more is
// sent.
func (e *quotaEnvoy) kill() {
	e.stop()
	e.wg.Wait()
}

// hang stops the Envoy's traffic and reports but keeps its stream open.
func (e *quotaEnvoy) hang() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rate, e.reporting = 0, false
}

func (e *quotaEnvoy) traffic(ctx context.Context) {
	const tick = 5 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	owed, prev := 0.0, time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			e.mu.Lock()
			owed += e.rate * now.Sub(prev).Seconds()
			prev = now
			var first bool
			for ; owed >= 1; owed-- {
				first = e.request(now) || first
			}
			e.mu.Unlock()
			if first {
				e.report() // a new bucket is reported at once
			}
		}
	}
}

// request decides one request at now by the bucket's assignment and
// reports whether it created the bucket. e.mu is held.
func (e *quotaEnvoy) request(now time.Time) (created bool) {
	created = !e.created
	e.created = true
	ok := true
	switch s := e.strategy; {
	case s == nil || now.After(e.expires):
		// No assignment, or an expired one without expired_assignment_behavior.
	case s.GetTokenBucket() != nil:
		tb := s.GetTokenBucket()
		perSec := float64(tb.GetTokensPerFill().GetValue()) / float64(int64(tb.GetFillInterval().AsDuration().Seconds()))
		e.tokens = min(float64(tb.GetMaxTokens()), e.tokens+perSec*now.Sub(e.filled).Seconds())
		e.filled = now
		if ok = e.tokens >= 1; ok {
			e.tokens--
		}
	default:
		ok = s.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL
	}
	if ok {
		e.allowed++
		e.admitted = append(e.admitted, now)
	} else {
		e.denied++
	}
	return created
}

func (e *quotaEnvoy) reports(ctx context.Context) {
	t := time.NewTicker(e.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			e.report()
		}
	}
}

// report sends the bucket's usage since the last report, if it exists and
// the Envoy reports.
func (e *quotaEnvoy) report() {
	e.mu.Lock()
	if !e.created || !e.reporting {
		e.mu.Unlock()
		return
	}
	now := time.Now()
	elapsed := time.Duration(0)
	if !e.last.IsZero() {
		elapsed = now.Sub(e.last).Truncate(time.Second)
	}
	r := &rlqsv3.RateLimitQuotaUsageReports{Domain: e.domain, BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqsv3.BucketId{Bucket: maps.Clone(e.bucket)}, TimeElapsed: durationpb.New(elapsed),
		NumRequestsAllowed: e.allowed, NumRequestsDenied: e.denied}}}
	e.allowed, e.denied, e.last = 0, 0, now
	e.mu.Unlock()
	_ = e.stream.Send(r) // a failed send shows in receive
}

func (e *quotaEnvoy) receive() {
	for {
		resp, err := e.stream.Recv()
		if err != nil {
			e.mu.Lock()
			e.recvErr = err
			e.mu.Unlock()
			return
		}
		for _, a := range resp.GetBucketAction() {
			e.apply(a)
		}
	}
}

// apply applies one bucket action as Envoy does.
func (e *quotaEnvoy) apply(a *rlqsv3.RateLimitQuotaResponse_BucketAction) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	q := a.GetQuotaAssignmentAction()
	if q == nil { // abandon: erase the bucket, its usage included
		e.created, e.strategy, e.allowed, e.denied, e.last = false, nil, 0, 0, time.Time{}
		return
	}
	s := q.GetRateLimitStrategy()
	if tb := s.GetTokenBucket(); tb != nil && !proto.Equal(tb, e.strategy.GetTokenBucket()) {
		e.tokens, e.filled = float64(tb.GetMaxTokens()), now // a new token bucket starts full
	}
	e.strategy = s
	e.expires = now.Add(time.Duration(q.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
}

// share is the Envoy's current share: its token bucket's tokens per fill,
// 0 for DENY_ALL, -1 without a token bucket or DENY_ALL.
func (e *quotaEnvoy) share() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch s := e.strategy; {
	case s.GetTokenBucket() != nil:
		return int(s.GetTokenBucket().GetTokensPerFill().GetValue())
	case s != nil && s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL:
		return 0
	}
	return -1
}

// admittedIn counts the requests admitted in [from, to).
func (e *quotaEnvoy) admittedIn(from, to time.Time) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, at := range e.admitted {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}

func (e *quotaEnvoy) err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.recvErr
}
