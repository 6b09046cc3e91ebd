package limiter

import (
	"fmt"
	"sync"
	"time"
)

// MaxPenalty is the longest Penalty.Max and Penalty.Forget: a year, so that
// every block and expiry stays an exact integer in the Lua twin's doubles.
const MaxPenalty = 366 * 24 * time.Hour

// Penalty keeps a counter that denied a hit denied for a while, longer for
// repeat offenders (rate_limit.penalty). When a hit is denied by its limit
// while the counter is not blocked, a block of Block * Escalate^level,
// at most Max, starts; level is 0 for a first offence and rises by one for
// each offence while the previous block's state is alive (until Forget
// after that block ends). A hit on a blocked counter is denied until the
// block ends (RetryAfter says when) and consumes nothing; denials during a
// block do not extend it. A Shadow hit is decided the same way, blocks
// included, but never denies its request. Part of the counter's identity.
// The zero value is none.
type Penalty struct {
	// Block is the first offence's block; positive when there is a penalty.
	Block time.Duration
	// Escalate multiplies the block for each further offence; at least 1.
	Escalate uint32
	// Max caps a block; at least Block.
	Max time.Duration
	// Forget is how long after a block ends an offence still escalates.
	Forget time.Duration
}

// On reports whether p is a penalty (not the zero value).
func (p Penalty) On() bool { return p != Penalty{} }

// validate returns an error naming the field when p cannot be applied.
func (p Penalty) validate() error {
	ms := func(d time.Duration) bool { return d%time.Millisecond == 0 }
	switch {
	case p.Block <= 0 || !ms(p.Block):
		return fmt.Errorf("limiter: penalty: block: %v is not a positive whole number of milliseconds", p.Block)
	case p.Escalate < 1:
		return fmt.Errorf("limiter: penalty: escalate: %d is below 1", p.Escalate)
	case p.Max < p.Block || p.Max > MaxPenalty || !ms(p.Max):
		return fmt.Errorf("limiter: penalty: max: %v is not whole milliseconds between block (%v) and %v", p.Max, p.Block, MaxPenalty)
	case p.Forget < 0 || p.Forget > MaxPenalty || !ms(p.Forget):
		return fmt.Errorf("limiter: penalty: forget: %v is not whole milliseconds between 0 and %v", p.Forget, MaxPenalty)
	}
	return nil
}

// blockMs is the block of an offence at level: Block * Escalate^level, at
// most Max, in ms. It multiplies step by step so that it never overflows
// and the Lua twin computes the same integer.
func (p Penalty) blockMs(level uint8) int64 {
	b, m := p.Block.Milliseconds(), p.Max.Milliseconds()
	for range level {
		if p.Escalate == 1 {
			break
		}
		if b > m/int64(p.Escalate) {
			return m
		}
		b *= int64(p.Escalate)
	}
	return min(b, m)
}

// penaltyExpires is the Unix ms from which s's penalty state no longer
// matters: Forget after its block ends; math.MinInt64 when it has none.
func penaltyExpires(s State, p Penalty) int64 {
	if s.BlockUntil == 0 {
		return minInt64
	}
	return s.BlockUntil + p.Forget.Milliseconds()
}

const minInt64 = -1 << 63

// offend returns s's penalty state after an offence at nowMs, which is not
// during a block: the level rises while the previous state is alive, else
// it starts over.
func offend(s State, nowMs int64, p Penalty) (until int64, level uint8) {
	if s.BlockUntil != 0 && nowMs < penaltyExpires(s, p) {
		level = min(s.BlockLevel+1, 63)
	}
	return nowMs + p.blockMs(level), level
}

// penaltyIDs numbers the Penalties seen, so that a counter's identity holds
// a number instead of the Penalty: there are as many as configs name.
var penaltyIDs struct {
	sync.Mutex
	m map[Penalty]uint32
}

// penaltyID returns p's number, 0 for none.
func penaltyID(p Penalty) uint32 {
	if !p.On() {
		return 0
	}
	penaltyIDs.Lock()
	defer penaltyIDs.Unlock()
	id, ok := penaltyIDs.m[p]
	if !ok {
		if penaltyIDs.m == nil {
			penaltyIDs.m = make(map[Penalty]uint32)
		}
		id = uint32(len(penaltyIDs.m) + 1)
		penaltyIDs.m[p] = id
	}
	return id
}
