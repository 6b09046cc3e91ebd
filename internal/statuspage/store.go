package statuspage

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// latencyBounds are the upper bounds of the store latency buckets (the last
// is open-ended), as ratelimit.LatencyBuckets: 100 us to 100 ms.
var latencyBounds = [...]time.Duration{100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond, 15 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond}

// storeStats are per-second store calls, errors and latencies for the last
// ringSeconds. Its fields are guarded by mu.
type storeStats struct {
	mu      sync.Mutex
	ring    [ringSeconds]storeBucket
	lastErr string
	errAt   time.Time
}

type storeBucket struct {
	sec           int64
	calls, errors uint64
	latency       [len(latencyBounds) + 1]uint32
}

// ObserveStore implements ratelimit.StoreObserver: it records the call's
// latency, as the decision timed it, and its error for the page, in the
// second of the Recorder's clock.
func (r *Recorder) ObserveStore(_ context.Context, c ratelimit.StoreCall) {
	r.store.observe(r.opts.Now(), c.Took, c.Err)
}

func (s *storeStats) observe(now time.Time, d time.Duration, err error) {
	sec := now.Unix()
	i := 0
	for i < len(latencyBounds) && d > latencyBounds[i] {
		i++
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := &s.ring[sec%ringSeconds]
	if b.sec != sec {
		*b = storeBucket{sec: sec}
	}
	b.calls++
	b.latency[i]++
	if err != nil {
		b.errors++
		s.lastErr, s.errAt = err.Error(), now
	}
}

// quantile estimates the q quantile (0..1) of the latencies counted in
// hist, interpolating linearly inside the bucket that holds it as
// Prometheus's histogram_quantile does; 0 when hist is empty. A quantile
// in the open-ended bucket is reported as its lower bound.
func quantile(q float64, hist []uint64) time.Duration {
	var total uint64
	for _, n := range hist {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var seen uint64
	for i, n := range hist {
		if float64(seen+n) < rank || n == 0 {
			seen += n
			continue
		}
		if i == len(latencyBounds) {
			return latencyBounds[i-1]
		}
		lo := time.Duration(0)
		if i > 0 {
			lo = latencyBounds[i-1]
		}
		frac := (rank - float64(seen)) / float64(n)
		return lo + time.Duration(frac*float64(latencyBounds[i]-lo))
	}
	return latencyBounds[len(latencyBounds)-1]
}
