package rlqs

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// maxBucketBytes is the live heap a tracked bucket may take, the service's
// state and its holding in the in-memory store together: the figure the
// README gives for sizing --rlqs-max-total-buckets.
const maxBucketBytes = 1536

// TestBucketMemory measures the live heap per tracked bucket: 4 streams of
// 5,000 buckets each, every one its own limit ({api_key: <48 bytes>, route:
// search}, so each also has its own group and holding in MemoryShares, the
// worst case), reported twice so that the demand and shares are set. It
// logs the figure (go test -run TestBucketMemory -v ./pkg/rlqs/) and fails
// when it exceeds maxBucketBytes.
func TestBucketMemory(t *testing.T) {
	const streams, perStream = 4, 5000
	clock := testclock.New(time.Unix(1_800_000_000, 0))
	core := ratelimit.New(ratelimit.Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{})})
	core.SetConfig(parse(t, matchYAML))
	shares := limiter.NewMemoryShares(clock.Now)
	s := New(Options{Decider: core, Store: shares, Now: clock.Now})
	ctx := context.Background()
	before := liveHeap()
	var held []*stream
	for i := range streams {
		st, err := s.openStream(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, st)
		r := &rlqsv3.RateLimitQuotaUsageReports{Domain: "d"}
		for j := range perStream {
			r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
				BucketId:    &rlqsv3.BucketId{Bucket: map[string]string{"api_key": fmt.Sprintf("%048d", i*perStream+j), "route": "search"}},
				TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: 5})
		}
		for range 2 {
			clock.Advance(time.Second)
			if _, err := s.handle(ctx, st, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	per := float64(liveHeap()-before) / (streams * perStream)
	runtime.KeepAlive(held)
	runtime.KeepAlive(shares)
	t.Logf("live heap per bucket: %.0f bytes (%d buckets in %d streams)", per, streams*perStream, streams)
	if per > maxBucketBytes {
		t.Errorf("live heap per bucket = %.0f bytes, over %d: correct the README's figure and the defaults", per, maxBucketBytes)
	}
}

// liveHeap is the heap and goroutine stacks in use after a full
// collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}
