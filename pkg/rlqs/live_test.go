package rlqs

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"

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
	core := ratelimit.New(ratelimit.Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{})})
	core.SetConfig(parse(t, apiYAML))
	s := New(Options{Decider: core, Store: store, Now: clock.Now})
	return &fleet{t: t, s: s, clock: clock, live: map[string]liveAssignment{}}
}

// open opens a stream.
func (f *fleet) open() *stream {
	st, err := f.s.openStream()
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

// TestLiveSumProperty reports random sets of buckets of one share_threshold
// rule from three streams on one store, in random order, at random times
// and demands: after every report the assignments live at once admit at
// most the limit.
func TestLiveSumProperty(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 28))
		clock := testclock.New(time.Unix(1_800_000_000, 0))
		f := newFleet(t, limiter.NewMemoryShares(clock.Now), clock)
		streams := []*stream{f.open(), f.open(), f.open()}
		maxSum := uint64(0)
		for step := range 300 {
			clock.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
			i := rng.IntN(len(streams))
			var paths []string
			for range 1 + rng.IntN(4) {
				paths = append(paths, "/api/"+strconv.Itoa(rng.IntN(8)))
			}
			elapsed := time.Duration(rng.IntN(2000)) * time.Millisecond
			f.report(strconv.Itoa(i), streams[i], elapsed, uint64(rng.IntN(50)), paths...)
			sum := f.sum()
			maxSum = max(maxSum, sum)
			if sum > 600 {
				t.Fatalf("seed %d step %d: %d/min live, over the limit 600: %v", seed, step, sum, f.live)
			}
		}
		if maxSum == 0 {
			t.Fatalf("seed %d: nothing assigned", seed)
		}
	}
}
