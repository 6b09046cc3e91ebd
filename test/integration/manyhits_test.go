package integration

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestManyHitsPerRequest: a rule of 8 rate_limits and a request of 32
// descriptors on it (256 hits, one script entry) answers on Redis as on the
// in-memory store, round after round, while 8 callers send requests of one
// descriptor to the same instance, which share script calls with it: none
// of those fails, and each is decided (a counter of its own: remaining 999).
// The store timeout is long: this is about the wire layout and one entry's
// failure, and a 256-key script call on a loaded CI machine under -race can
// outlast the default 15 ms.
func TestManyHitsPerRequest(t *testing.T) {
	const config = "test/integration/testdata/manyhits"
	onRedis := startSluice(t, "--config", config, "--store-timeout", "2s", "--redis-read-timeout", "2s",
		"--redis-url", "redis://"+redistest.Addr(t)+"/0", "--redis-prefix", redistest.Prefix(t.Name()))
	inMemory := startSluice(t, "--config", config)
	big := make([][]string, 32)
	for i := range big {
		big[i] = []string{"tenant", "t" + strconv.Itoa(i)}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var decided, failed atomic.Int64
	var firstErr atomic.Value
	for c := range 8 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				r, err := onRedis.Client.ShouldRateLimit(context.Background(),
					request("manyhits", []string{"single", fmt.Sprintf("c%d-%d", c, n)}))
				if err == nil && (r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != 999) {
					err = fmt.Errorf("answered %v", r)
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				decided.Add(1)
			}
		})
	}
	for round := range 10 {
		want := inMemory.call(t, "manyhits", big...)
		got, err := onRedis.Client.ShouldRateLimit(context.Background(), request("manyhits", big...))
		if err != nil {
			t.Errorf("round %d: %v", round, err)
			continue
		}
		if got.GetOverallCode() != rlsv3.RateLimitResponse_OK || got.GetStatuses()[0].GetLimitRemaining() != uint32(99-round) {
			t.Errorf("round %d: %v, want OK with remaining %d (the 100/minute limit binds)", round, got, 99-round)
		}
		for i, st := range got.GetStatuses() {
			g, w := proto.Clone(st).(*rlsv3.RateLimitResponse_DescriptorStatus), proto.Clone(want.GetStatuses()[i]).(*rlsv3.RateLimitResponse_DescriptorStatus)
			g.DurationUntilReset, w.DurationUntilReset = nil, nil
			if !proto.Equal(g, w) {
				t.Errorf("round %d: descriptor %d: redis %v, memory %v", round, i, g, w)
			}
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d single-descriptor decisions beside the big ones, %d failed", decided.Load(), failed.Load())
	if failed.Load() != 0 || decided.Load() == 0 {
		t.Errorf("%d of the concurrent decisions failed (first: %v), %d decided; want none failed", failed.Load(), firstErr.Load(), decided.Load())
	}
}
