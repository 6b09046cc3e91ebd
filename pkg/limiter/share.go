package limiter

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// A shared limit is one limit divided among several holders instead of
// decided per hit: Envoy's rate limit quota service (pkg/rlqs) gives every
// Envoy stream reporting a bucket a share of the bucket's limit, which that
// Envoy then enforces by itself. The store keeps, per limit, every holder's
// share, recent demand and expiry, and divides the limit atomically, so that
// several Sluice instances on one store agree and the shares never add up to
// more than the limit.

// MaxDemand is the largest Claim.Demand a store accepts: 2^40 thousandths of
// a hit per window (about 10^9 hits), so that the total demand of up to 8192
// holders, and every step of Divide, stay exact in float64 (the Redis twin
// computes in Lua's doubles).
const MaxDemand = 1 << 40

// MaxShared is the largest Claim.Limit: requests_per_unit is a uint32.
const MaxShared = math.MaxUint32

// Claim is one holder's request for its share of a limit, carrying its
// recent demand.
//
// A share's identity is (Key, Window), as a counter's is (Hit): two claims
// with the same Key and Window divide the same Limit among their holders.
type Claim struct {
	// Key names the shared limit, opaque bytes (pkg/ratelimit's counter key
	// of the bucket's descriptor).
	Key string
	// Window is the limit's window: a positive whole number of milliseconds.
	Window time.Duration
	// Holder names the claimant (an Envoy stream on one Sluice instance).
	// Not empty.
	Holder string
	// Limit is the number of hits per Window that all holders share
	// (requests_per_unit), at most MaxShared.
	Limit uint64
	// Demand is the holder's recent demand, in thousandths of a hit per
	// Window (1000 = one hit per window), at most MaxDemand.
	Demand uint64
	// Keep is the share the holder still needs reserved because it handed
	// out that much that is live until its Hold passes (pkg/rlqs: the
	// assignments of buckets not in the report claiming). Divide never lowers
	// the holder's share below Keep, nor raises it to Keep. At most
	// MaxShared; 0 keeps nothing.
	Keep uint64
	// Hold is how long the store keeps the holder's share reserved without
	// another claim from it: after that the share is reclaimed for the
	// others. A positive whole number of milliseconds.
	Hold time.Duration
}

// Validate returns an error naming the field when c cannot be divided: an
// empty Holder, a Window or Hold that is not a positive whole number of
// milliseconds, a Demand over MaxDemand or a Limit or Keep over MaxShared.
func (c *Claim) Validate() error {
	switch {
	case c.Holder == "":
		return errors.New("limiter: holder: must not be empty")
	case c.Window <= 0 || c.Window%time.Millisecond != 0:
		return fmt.Errorf("limiter: window: %v is not a positive whole number of milliseconds", c.Window)
	case c.Hold <= 0 || c.Hold%time.Millisecond != 0:
		return fmt.Errorf("limiter: hold: %v is not a positive whole number of milliseconds", c.Hold)
	case c.Demand > MaxDemand:
		return fmt.Errorf("limiter: demand: %d is over the maximum %d", c.Demand, uint64(MaxDemand))
	case c.Limit > MaxShared:
		return fmt.Errorf("limiter: limit: %d is over the maximum %d", c.Limit, uint64(MaxShared))
	case c.Keep > MaxShared:
		return fmt.Errorf("limiter: keep: %d is over the maximum %d", c.Keep, uint64(MaxShared))
	}
	return nil
}

// Share is the outcome of one Claim.
type Share struct {
	// Requests is the holder's share of the Limit, in hits per Window. The
	// shares of all live holders of a limit add up to at most its Limit.
	Requests uint64
	// Holders is the number of live holders of the limit, this one included.
	Holders int
	// Demand is the live holders' total demand, in thousandths of a hit per
	// Window.
	Demand uint64
}

// Holding is what a store keeps per holder of a shared limit: its current
// share, its demand and when its share is reclaimed (Unix ms).
type Holding struct {
	Share, Demand uint64
	Expires       int64
}

// Divide is the rule every store applies to one Claim, atomically per
// shared limit: given the limit's holdings (by holder) at nowMs, it drops the
// expired ones, updates the claimant's demand and expiry (nowMs + Hold), and
// sets its share. It returns the Share and the holdings to store; held is
// modified and returned.
//
// A holder's target is its fair part of the Limit: when the live holders'
// total demand D (in thousandths) is at most the limit, its demand plus an
// equal part of the headroom, floor((d + (1000*Limit - D)/(n+1))/1000) for n
// holders, so that an idle holder keeps some and one part stays free for
// the next holder that joins (which otherwise gets nothing until the others
// claim again); above the limit, its part in proportion to demand,
// floor(Limit*d/D). The claimant's new share is its
// target, except that it keeps its current share when that is within 10% of
// the target (so Envoy keeps its token bucket instead of starting a new one)
// and either below the target or leaving every other holder room for its
// own target (but a holder that keeps some, Keep above 0, gets a larger
// target at once: the part it keeps serves none of its new demand); it is
// at least the smaller of Keep and its current share, so
// that what the holder handed out stays covered while it is live; and it
// never takes more than the other holders leave free:
// shares always add up to at most the Limit, and a holder whose target grows
// gets the rest once the others shrink, at their next claims. Divide
// computes in float64 in the operation order of the Redis twin (pkg/redis
// quota.lua), so both give the same results.
func Divide(held map[string]Holding, c Claim, nowMs int64) (Share, map[string]Holding) {
	if held == nil {
		held = make(map[string]Holding)
	}
	var total, others uint64
	n := 1
	cur := uint64(0)
	for h, v := range held {
		switch {
		case v.Expires <= nowMs:
			delete(held, h)
		case h == c.Holder:
			cur = v.Share
		default:
			n++
			total += v.Demand
			others += v.Share
		}
	}
	total += c.Demand
	// need is what the others hold once each has at least its target.
	var need uint64
	for h, v := range held {
		if h != c.Holder {
			need += max(v.Share, shareTarget(c.Limit, v.Demand, total, n))
		}
	}
	target := shareTarget(c.Limit, c.Demand, total, n)
	free := uint64(0)
	if others < c.Limit {
		free = c.Limit - others
	}
	next := target
	if absDiff(target, cur)*10 <= cur && (cur < target || cur+need <= c.Limit) && (c.Keep == 0 || cur >= target) {
		next = cur
	}
	next = max(next, min(c.Keep, cur))
	next = min(next, free)
	held[c.Holder] = Holding{Share: next, Demand: c.Demand, Expires: nowMs + c.Hold.Milliseconds()}
	return Share{Requests: next, Holders: n, Demand: total}, held
}

// shareTarget is Divide's target for a demand d out of a total over n
// holders, in the float64 operations of quota.lua.
func shareTarget(limit, d, total uint64, n int) uint64 {
	l, fd, ft := float64(limit), float64(d), float64(total)
	var t float64
	if ft <= l*1000 {
		t = math.Floor((fd + (l*1000-ft)/float64(n+1)) / 1000)
	} else {
		t = math.Floor(l * fd / ft)
	}
	if t >= l {
		return limit
	}
	return uint64(t)
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}
