package rlqs

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// BenchmarkReport handles one stream's periodic report of 100 buckets
// ({api_key: k<i>, route: search}) on the in-memory store, one second apart:
// checking, matching, demand, one Store call, 100 actions. It reports
// buckets per second, Sluice's own cost per bucket and report.
func BenchmarkReport(b *testing.B) {
	const n = 100
	clock := testclock.New(time.Unix(1_800_000_000, 0))
	core := ratelimit.New(ratelimit.Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{})})
	core.SetConfig(parse(b, matchYAML))
	s := New(Options{Decider: core, Store: limiter.NewMemoryShares(clock.Now), Now: clock.Now})
	st, _ := s.openStream(context.Background())
	r := &rlqsv3.RateLimitQuotaUsageReports{Domain: "d"}
	for i := range n {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:    &rlqsv3.BucketId{Bucket: map[string]string{"api_key": "k" + strconv.Itoa(i), "route": "search"}},
			TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: 9, NumRequestsDenied: 1})
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		clock.Advance(time.Second)
		if _, err := s.handle(ctx, st, r); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "buckets/s")
}
