package limiter

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// shareSweepEvery is how often MemoryShares drops every expired holding, not
// only those of the limits it is asked about.
const shareSweepEvery = time.Minute

// MemoryShares keeps shared limits (see Claim) in process memory: the store
// of pkg/rlqs when no Redis is configured. Holdings are not shared between
// processes and are lost on restart. It is safe for concurrent use; one
// mutex guards every limit, which suits its load (one claim per bucket per
// Envoy report, not per request). It starts no goroutine and needs no Close.
type MemoryShares struct {
	now func() time.Time

	mu        sync.Mutex
	m         map[shareID]map[string]Holding
	nextSweep int64 // Unix ms of the next sweep of every limit
}

// shareID is a shared limit's identity.
type shareID struct {
	key    string
	window time.Duration
}

// NewMemoryShares returns an empty MemoryShares on the clock now (nil:
// time.Now), read to the millisecond.
func NewMemoryShares(now func() time.Time) *MemoryShares {
	if now == nil {
		now = time.Now
	}
	return &MemoryShares{now: now, m: make(map[shareID]map[string]Holding)}
}

// Share divides each claim's limit by Divide, one claim after another, in
// order, at one reading of the clock, and returns one Share per claim. It
// returns an error naming the claim, and changes nothing, when a claim does
// not Validate. It does not fail otherwise; ctx is not used.
func (s *MemoryShares) Share(_ context.Context, claims []Claim) ([]Share, error) {
	for i := range claims {
		if err := claims[i].Validate(); err != nil {
			return nil, fmt.Errorf("claim %d: %w", i, err)
		}
	}
	out := make([]Share, len(claims))
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixMilli()
	s.sweep(now)
	for i, c := range claims {
		id := shareID{c.Key, c.Window}
		out[i], s.m[id] = Divide(s.m[id], c, now)
	}
	return out, nil
}

// Release drops the holding of each claim's Holder in its limit (Key,
// Window), so that the others get its share at their next claims; the other
// fields of the claims are not used. Releasing what is not held does
// nothing. It does not fail; ctx is not used.
func (s *MemoryShares) Release(_ context.Context, claims []Claim) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range claims {
		id := shareID{c.Key, c.Window}
		if held := s.m[id]; held != nil {
			delete(held, c.Holder)
			if len(held) == 0 {
				delete(s.m, id)
			}
		}
	}
	return nil
}

// Len returns the number of holdings kept, expired ones not yet dropped
// included: what tests and gauges read to see that holdings are freed.
func (s *MemoryShares) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, held := range s.m {
		n += len(held)
	}
	return n
}

// sweep drops every expired holding and every limit left without one, at
// most once per shareSweepEvery, so that limits nobody claims any more do not
// stay in memory. s.mu is held.
func (s *MemoryShares) sweep(now int64) {
	if now < s.nextSweep {
		return
	}
	s.nextSweep = now + shareSweepEvery.Milliseconds()
	for id, held := range s.m {
		for h, v := range held {
			if v.Expires <= now {
				delete(held, h)
			}
		}
		if len(held) == 0 {
			delete(s.m, id)
		}
	}
}
