package limiter

import (
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultOverLimitEntries is OverLimitOptions.MaxEntries when zero.
const DefaultOverLimitEntries = 1 << 16

// OverLimitOptions configures NewOverLimitCache. The zero value is usable.
type OverLimitOptions struct {
	// Now is the clock; nil means time.Now. It must be safe for concurrent
	// use.
	Now func() time.Time
	// MaxEntries caps the cached denials; when full, a new denial replaces
	// an arbitrary entry. Zero means DefaultOverLimitEntries.
	MaxEntries int
}

// OverLimitCache is a Store that answers a repeated denied request locally
// until its RetryAfter runs out, so an abusive client that keeps retrying
// costs no store call. It wraps another Store and is safe for concurrent use.
//
// It is exact for algorithms whose denials hold (every one but concurrency):
// a denied request consumed nothing, and with no further traffic the estimate
// of a denying counter only falls, reaching the point where the same hits fit
// exactly after RetryAfter; other traffic (from any Sluice instance) only
// raises it. So the same request (the same hits on the same counters with the
// same limits and flags) is denied at least until the denial's hold has
// passed: the longest RetryAfter among its OverLimit hits that are not in the
// quota group, and the shortest among its quota hits when the quota group
// denied (the group admits again once one of them fits). A denial that any
// OverLimit hit of an algorithm without that property caused is not cached.
// The Results of a cached answer are those of the denial it repeats, with
// RetryAfter and ResetAfter lowered by the time elapsed since, a hit whose
// RetryAfter has passed Allowed again and OverLimit recomputed by
// MarkOverLimit; the Remaining of the hits that did not deny may be stale.
//
// A request holding an Overdraw or CountDenied hit always goes to the
// store: its hits count even when denied, on every counter of the request
// (envoyproxy/ratelimit's local cache skips only the key over its limit,
// and still counts the request's others). Refunds raise what a counter admits, so a request holding a refund drops
// the cached denials that touch a refunded counter (a scan of the cache:
// refunds are rare next to decisions); a refund made through another instance is not seen, and a
// cached denial can then outlive it by at most its RetryAfter. A changed limit
// or a limit override is a different request and is never answered from a
// denial under the old limit.
type OverLimitCache struct {
	store Store
	now   func() time.Time
	max   int
	hits  atomic.Int64 // answers from the cache
	size  atomic.Int64 // len(m), so that an empty cache is skipped without mu

	mu sync.Mutex
	m  map[string]cachedDenial
}

type cachedDenial struct {
	at      time.Time
	until   time.Time
	hits    []Hit // the request, compared in full on every lookup
	results []Result
}

var _ Store = (*OverLimitCache)(nil)

// NewOverLimitCache returns a cache of denials in front of s.
func NewOverLimitCache(s Store, o OverLimitOptions) *OverLimitCache {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultOverLimitEntries
	}
	return &OverLimitCache{store: s, now: o.Now, max: o.MaxEntries, m: make(map[string]cachedDenial)}
}

// Hits returns how many Apply calls were answered from the cache.
func (c *OverLimitCache) Hits() int64 { return c.hits.Load() }

// Apply answers hits from a cached denial of the same request while it
// holds, and otherwise asks the wrapped Store, caching the answer when it is
// a denial that holds. Errors are the wrapped Store's.
func (c *OverLimitCache) Apply(ctx context.Context, hits []Hit) ([]Result, error) {
	if slices.ContainsFunc(hits, func(h Hit) bool { return h.Refund }) {
		c.dropRefunded(hits)
		return c.store.Apply(ctx, hits)
	}
	if slices.ContainsFunc(hits, func(h Hit) bool { return h.Limit.Overdraw || h.Limit.CountDenied }) {
		// Overdraw and CountDenied hits count even when denied: never
		// answered from memory, and a counter they grow holds no cached
		// denial of ours wrongly (it only grows).
		return c.store.Apply(ctx, hits)
	}
	// The signature is built on the stack: only a denial that is cached
	// keeps it (a lookup with string(sig) does not copy it).
	var buf [256]byte
	sig := appendSignature(buf[:0], hits)
	now := c.now()
	if c.size.Load() > 0 {
		if r, ok := c.lookup(sig, hits, now); ok {
			return r, nil
		}
	}
	results, err := c.store.Apply(ctx, hits)
	if err != nil || len(results) != len(hits) {
		return results, err
	}
	MarkOverLimit(hits, results) // the rule, whatever the wrapped Store set
	if hold := denialHold(hits, results); hold > 0 {
		d := cachedDenial{at: now, until: now.Add(hold), hits: slices.Clone(hits), results: slices.Clone(results)}
		c.mu.Lock()
		if len(c.m) >= c.max {
			for k := range c.m {
				delete(c.m, k)
				break
			}
		}
		c.m[string(sig)] = d
		c.size.Store(int64(len(c.m)))
		c.mu.Unlock()
	}
	return results, nil
}

// lookup answers hits, whose signature is sig, from a denial cached for
// them that still holds at now; it drops one that no longer does.
func (c *OverLimitCache) lookup(sig []byte, hits []Hit, now time.Time) ([]Result, bool) {
	c.mu.Lock()
	d, ok := c.m[string(sig)]
	if ok && now.Before(d.until) && sameRequest(d.hits, hits) {
		c.mu.Unlock()
		c.hits.Add(1)
		return d.replay(now), true
	}
	if ok {
		delete(c.m, string(sig))
		c.size.Store(int64(len(c.m)))
	}
	c.mu.Unlock()
	return nil, false
}

// sameRequest reports whether hits a and b are the same request: equal but
// for their slot tokens, which a concurrency acquire draws anew every time
// and which a denied request, taking no slot, never uses.
func sameRequest(a, b []Hit) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x := a[i]
		x.SlotToken = b[i].SlotToken
		if x != b[i] {
			return false
		}
	}
	return true
}

// dropRefunded drops the cached denials that touch a counter that hits
// refunds.
func (c *OverLimitCache) dropRefunded(hits []Hit) {
	var refunded []counterID
	for _, h := range hits {
		if h.Refund {
			refunded = append(refunded, idOf(h))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for sig, d := range c.m {
		if slices.ContainsFunc(d.hits, func(h Hit) bool { return slices.Contains(refunded, idOf(h)) }) {
			delete(c.m, sig)
		}
	}
	c.size.Store(int64(len(c.m)))
}

// replay returns d's Results as of now: RetryAfter and ResetAfter lowered by
// the time elapsed, the hits that fit again Allowed, OverLimit recomputed.
func (d cachedDenial) replay(now time.Time) []Result {
	elapsed := now.Sub(d.at).Truncate(time.Millisecond) // Results are whole ms
	out := make([]Result, len(d.results))
	for i, r := range d.results {
		r.ResetAfter = max(r.ResetAfter-elapsed, 0)
		switch {
		case r.Allowed || r.ExceedsLimit:
		case r.RetryAfter <= elapsed:
			// This hit fits again; another one still denies the request.
			r.Allowed, r.RetryAfter = true, 0
		default:
			r.RetryAfter -= elapsed
		}
		out[i] = r
	}
	MarkOverLimit(d.hits, out)
	return out
}

// denialHold returns how long the denial that results report holds (see
// OverLimitCache), or 0 when the request was admitted or the denial may
// not hold.
func denialHold(hits []Hit, results []Result) time.Duration {
	var hold, quota time.Duration
	quotaDenied := false
	for i, h := range hits {
		r := results[i]
		if !r.OverLimit {
			continue
		}
		if !algorithms[h.Limit.Algorithm].denialsHold() {
			return 0
		}
		if h.Quota {
			if !quotaDenied || r.RetryAfter < quota {
				quota = r.RetryAfter
			}
			quotaDenied = true
			continue
		}
		hold = max(hold, r.RetryAfter)
	}
	return max(hold, quota)
}

// appendSignature appends to b what identifies a request: every hit's
// counter, limit, hits and flags, each length-prefixed. Apply also compares
// the hits in full, so a field missing here costs a cache miss, never a
// wrong answer.
func appendSignature(b []byte, hits []Hit) []byte {
	for _, h := range hits {
		b = binary.AppendUvarint(b, uint64(len(h.Key)))
		b = append(b, h.Key...)
		b = binary.AppendUvarint(b, h.Limit.Requests)
		b = binary.AppendVarint(b, int64(h.Limit.Window))
		b = append(b, byte(h.Limit.Algorithm), h.Limit.SubWindows)
		b = binary.AppendUvarint(b, h.Limit.Burst)
		b = binary.AppendUvarint(b, uint64(h.Limit.Ceiling))
		b = binary.AppendUvarint(b, h.Hits)
		f := byte(0)
		if h.Limit.Overdraw {
			f |= 4
		}
		if h.Shadow {
			f |= 1
		}
		if h.Quota {
			f |= 2
		}
		b = append(b, f)
	}
	return b
}
