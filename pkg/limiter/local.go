package limiter

import (
	"context"
	"sync/atomic"
	"time"
)

// LocalOptions configures NewLocal. The zero value is usable.
type LocalOptions struct {
	// Instances returns how many instances share the limits, at least 1:
	// each hit's limit is divided by it. nil means 1.
	Instances func() int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// MaxCounters caps the counters held, as MemoryOptions.MaxCounters.
	MaxCounters int
}

// Local is a Store that decides in process with each limit divided among
// the instances: a failure mode that keeps limiting while the shared store
// is unavailable. A hit's Requests and Burst become their share, rounded
// up (so never 0 for a limit that admits), on counters of its own in
// memory: each of N instances admits at most ceil(L/N) in a window, the
// fleet at most L + N - 1. It is safe for concurrent use.
type Local struct {
	mem       *MemoryStore
	instances func() int
	decided   atomic.Int64
}

var _ Store = (*Local)(nil)

// NewLocal returns a Local deciding on a fresh in-memory store.
func NewLocal(o LocalOptions) *Local {
	if o.Instances == nil {
		o.Instances = func() int { return 1 }
	}
	return &Local{mem: NewMemoryStore(MemoryOptions{Now: o.Now, MaxCounters: o.MaxCounters}), instances: o.Instances}
}

// Apply implements Store on each hit's share of its limit.
func (l *Local) Apply(ctx context.Context, hits []Hit) ([]Result, error) {
	n := uint64(max(l.instances(), 1))
	share := make([]Hit, len(hits))
	for i, h := range hits {
		h.Limit.Cache = false
		h.Limit.Requests = divUp(h.Limit.Requests, n)
		h.Limit.Burst = divUp(h.Limit.Burst, n)
		share[i] = h
	}
	l.decided.Add(1)
	return l.mem.Apply(ctx, share)
}

// Decided is how many requests Apply decided.
func (l *Local) Decided() int64 { return l.decided.Load() }

func divUp(x, n uint64) uint64 {
	if x == 0 {
		return 0
	}
	return (x-1)/n + 1
}
