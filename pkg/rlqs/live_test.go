package rlqs

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

const apiYAML = `domain: d
descriptors:
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 600}
`

// fleet is Envoys' view of the assignments of one quota service: every
// stream's live token buckets, replaced by each new action for their bucket
// and dropped when they expire or are abandoned.
type fleet struct {
	t     *testing.T
	s     *Service
	clock *testclock.Clock
	live  map[string]liveAssignment // by stream and bucket id
}

type liveAssignment struct {
	fill    uint64
	expires time.Time
}

func newFleet(t *testing.T, store Store, clock *testclock.Clock) *fleet {
	return newFleetWith(t, Options{Store: store, Now: clock.Now}, clock)
}

// newFleetWith is newFleet with the service's options o (Store and Now
// set).
func newFleetWith(t *testing.T, o Options, clock *testclock.Clock) *fleet {
	core := ratelimit.New(ratelimit.Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{})})
	core.SetConfig(parse(t, apiYAML))
	o.Decider = core
	return &fleet{t: t, s: New(o), clock: clock, live: map[string]liveAssignment{}}
}

// open opens a stream.
func (f *fleet) open() *stream {
	st, err := f.s.openStream(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

// report has stream st report the paths with requests each, and records the
// assignments it gets.
func (f *fleet) report(name string, st *stream, elapsed time.Duration, requests uint64, paths ...string) {
	f.t.Helper()
	r := &rlqsv3.RateLimitQuotaUsageReports{Domain: "d"}
	for _, p := range paths {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqsv3.BucketId{Bucket: map[string]string{"path": p}},
			TimeElapsed:        durationpb.New(elapsed),
			NumRequestsAllowed: requests,
		})
	}
	resp, err := f.s.handle(context.Background(), st, r)
	if err != nil {
		f.t.Fatal(err)
	}
	now := f.clock.Now()
	for _, a := range resp.GetBucketAction() {
		k := name + " " + a.GetBucketId().GetBucket()["path"]
		q := a.GetQuotaAssignmentAction()
		if q == nil {
			delete(f.live, k)
			continue
		}
		fill := uint64(0)
		if tb := q.GetRateLimitStrategy().GetTokenBucket(); tb != nil {
			fill = uint64(tb.GetTokensPerFill().GetValue())
		} else if q.GetRateLimitStrategy().GetBlanketRule() != 1 { // DENY_ALL
			f.t.Fatalf("%s: %v, want a token bucket or DENY_ALL", k, a)
		}
		f.live[k] = liveAssignment{fill, now.Add(q.GetAssignmentTimeToLive().AsDuration())}
	}
}

// sum is the requests per minute the live assignments admit.
func (f *fleet) sum() uint64 {
	var n uint64
	now := f.clock.Now()
	for k, a := range f.live {
		if !a.expires.After(now) {
			delete(f.live, k)
			continue
		}
		n += a.fill
	}
	return n
}

// TestShareThresholdLiveSum: eight buckets of one share_threshold rule
// (600/min), each reported alone as Envoy reports a new bucket, a second
// apart: the assignments live at once never admit more than the limit, and
// each new bucket gets a part of what the others leave.
func TestShareThresholdLiveSum(t *testing.T) {
	clock := testclock.New(time.Unix(1_800_000_000, 0))
	f := newFleet(t, limiter.NewMemoryShares(clock.Now), clock)
	st := f.open()
	var fills []uint64
	for i := range 8 {
		clock.Advance(time.Second)
		p := "/api/" + strconv.Itoa(i)
		f.report("a", st, 0, 1, p)
		fills = append(fills, f.live["a "+p].fill)
		if fills[i] == 0 {
			t.Errorf("new bucket %s: DENY_ALL, want a part of the headroom left", p)
		}
		if sum := f.sum(); sum > 600 {
			t.Errorf("after %d new buckets (assigned %v): %d/min live, over the limit 600", i+1, fills, sum)
		}
	}
	t.Logf("assigned %v: %d/min live", fills, f.sum())
}

// TestLiveSumPastBounds is TestLiveSumProperty with bounds of 3 buckets a
// stream and 5 in all on the 8 paths: buckets are evicted and answered from
// the overflow share (here the rule's own, its buckets sharing one
// counter), and the assignments live at once still admit at most the
// limit.
func TestLiveSumPastBounds(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 34))
		clock := testclock.New(time.Unix(1_800_000_000, 0))
		t.Run("seed "+strconv.FormatUint(seed, 10), func(t *testing.T) {
			f := newFleetWith(t, Options{Store: limiter.NewMemoryShares(clock.Now), Now: clock.Now, Metrics: m,
				MaxBuckets: 3, MaxTotalBuckets: 5}, clock)
			randomReports(t, f, rng, 5, func() uint64 { return uint64(rng.IntN(3) * rng.IntN(30)) })
		})
	}
	for _, name := range []string{"sluice_rlqs_overflowed_total", "sluice_rlqs_evicted_total"} {
		if n := testutil.CollectAndCount(reg, name); n == 0 {
			t.Errorf("no %s: the bounds were never reached", name)
		}
	}
}

// TestLiveSumProperty reports random sets of buckets of one share_threshold
// rule from three streams on one store, in random order, at random times
// and demands: after every report the assignments live at once admit at
// most the limit.
func TestLiveSumProperty(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 28))
		clock := testclock.New(time.Unix(1_800_000_000, 0))
		t.Run("seed "+strconv.FormatUint(seed, 10), func(t *testing.T) {
			f := newFleet(t, limiter.NewMemoryShares(clock.Now), clock)
			if randomReports(t, f, rng, 4, func() uint64 { return uint64(rng.IntN(50)) }) == 0 {
				t.Fatal("nothing assigned")
			}
		})
	}
}

// randomReports has three streams of f make 300 reports, each of 1 to
// maxPaths of the 8 paths (repeats allowed), at random times and with
// demand() requests each, and fails the test as soon as the assignments
// live at once admit more than the limit, 600/min. It returns the most
// they admitted.
func randomReports(t *testing.T, f *fleet, rng *rand.Rand, maxPaths int, demand func() uint64) uint64 {
	t.Helper()
	streams := []*stream{f.open(), f.open(), f.open()}
	most := uint64(0)
	for step := range 300 {
		f.clock.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
		i := rng.IntN(len(streams))
		var paths []string
		for range 1 + rng.IntN(maxPaths) {
			paths = append(paths, "/api/"+strconv.Itoa(rng.IntN(8)))
		}
		elapsed := time.Duration(rng.IntN(2000)) * time.Millisecond
		f.report(strconv.Itoa(i), streams[i], elapsed, demand(), paths...)
		sum := f.sum()
		most = max(most, sum)
		if sum > 600 {
			t.Fatalf("step %d: %d/min live, over the limit 600: %v", step, sum, f.live)
		}
	}
	return most
}
