package xdsconfig

import (
	"math/rand/v2"
	"time"
)

// Backoff bounds the waits between two connection attempts. The step
// starts at Initial and doubles after each attempt that got no response,
// up to Max; a stream that got a response starts the steps again. Each
// wait is the step times a random factor drawn uniformly from
// [1-Jitter, 1+Jitter], so that many clients that lost the same server do
// not come back at once.
type Backoff struct {
	// Initial is the first step; 0 means DefaultBackoffInitial (500ms).
	Initial time.Duration
	// Max is the largest step; 0 means DefaultBackoffMax (30s). A wait is at most
	// Max*(1+Jitter).
	Max time.Duration
	// Jitter is the random factor's spread, from 0 (every wait is the
	// step) to 1; values outside are clamped.
	Jitter float64
}

// Defaults of Backoff, which the server's --xds-backoff-* settings read.
const (
	// DefaultBackoffInitial is Backoff.Initial when zero.
	DefaultBackoffInitial = 500 * time.Millisecond
	// DefaultBackoffMax is Backoff.Max when zero.
	DefaultBackoffMax = 30 * time.Second
)

// backoff is the state of a Backoff: the number of attempts since the
// last reset. It is not safe for concurrent use.
type backoff struct {
	Backoff
	n    int
	rand func() float64 // in [0, 1)
}

func newBackoff(b Backoff) *backoff {
	if b.Initial <= 0 {
		b.Initial = DefaultBackoffInitial
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoffMax
	}
	b.Max = max(b.Max, b.Initial)
	b.Jitter = min(max(b.Jitter, 0), 1)
	return &backoff{Backoff: b, rand: rand.Float64}
}

// next returns the wait before the next attempt and counts the attempt.
func (b *backoff) next() time.Duration {
	step := b.Max
	if b.n < 40 && b.Initial<<b.n < b.Max && b.Initial<<b.n > 0 {
		step = b.Initial << b.n
	}
	b.n++
	f := 1 - b.Jitter + 2*b.Jitter*b.rand()
	return time.Duration(float64(step) * f)
}

// reset starts the steps again from Initial.
func (b *backoff) reset() { b.n = 0 }
