package limiter

import (
	"cmp"
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultCachePeriod is CacheOptions.Period when zero: how often a Cache
// adds its pending hits to the shared counters and reads them back.
const DefaultCachePeriod = 100 * time.Millisecond

// DefaultCacheCounters is CacheOptions.MaxCounters when zero.
const DefaultCacheCounters = 1 << 16

// cacheIdle is how long a counter without a decision here stays in a
// Cache: long enough for a counter decided every few seconds to stay warm
// (on Zipf traffic over 100k values, 2 s left a quarter of the decisions
// on counters evicted between two of them, 10 s about a sixth), short
// enough that a cold key's entry does not outlive its traffic for long.
const cacheIdle = 10 * time.Second

// maxSyncHits is the most hits one sync call carries; a sync of more sends
// several calls at once, which the store coalesces per node.
const maxSyncHits = 256

// CacheOptions configures NewCache. The zero value is usable.
type CacheOptions struct {
	// Period is how often the pending hits are synced. Zero means
	// DefaultCachePeriod.
	Period time.Duration
	// MaxCounters caps the counters the Cache holds; when full, a new
	// counter's hits are decided by the store, uncached. Zero means
	// DefaultCacheCounters.
	MaxCounters int
	// Instances returns how many instances share the store, this one
	// included (at least 1): the others' rate on a counter is estimated at
	// least at this instance's own times the others' number. nil means 1:
	// only the counters' measured growth estimates it.
	Instances func() int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Cache is a Store that decides the hits of a cached limit (Limit.Cache) in
// process: from its counter's shared count, as last read from the store,
// plus this instance's hits since. Every Period, Run adds the pending hits
// of every counter that has some to the store, in one call (several of at
// most 256 hits, sent at once, which the store coalesces per node), each as
// a shadow hit (it counts whatever the limit says: it was admitted here
// already), and reads back the counters' shared counts.
//
// A hit is decided here only when it fits with a margin for what the other
// instances may have added unseen: with C the count last read (at t0, the
// Capacity less the Result's Remaining), P this instance's hits not yet
// read back, R the others' rate on the counter and T the Period, a hit of n
// is admitted here iff C + P + n + R*(now - t0 + T) <= Capacity. R is the
// largest of the counter's measured growth less this instance's own hits,
// per second over at least one Period (halving at each measure that finds
// less), and this instance's own rate times the other instances
// (CacheOptions.Instances). Otherwise the hit goes to the store, as an
// uncached hit would, after this instance's pending hits on the counter
// were added: near the limit the store decides, exactly. So the fleet
// admits more than the limit only when the others add more than R*(now - t0
// + T) unseen: at most what their rate grew by within one such span.
//
// Only admissions are decided here (a denial always comes from the store,
// so denied hits consume nothing). A hit that refunds, is in a quota group,
// exceeds its Capacity or shares its counter with another hit of the
// request goes to the store, as does every hit of a counter until it has
// been read twice at least a Period apart (its rate unknown). A request
// mixing hits decided here and hits for the store sends only the latter;
// the former are consumed only if the request is admitted. A counter's
// Limit may change (a reload): the next decision compares the shared count
// with the new Capacity at once.
//
// A sync that fails keeps its hits pending, to be sent again: a call the
// store ran before failing then counts them twice (fewer admitted, never
// more). Flush adds the pending hits at once (a reload, shutdown). Cache
// is safe for concurrent use.
type Cache struct {
	store Store
	o     CacheOptions

	mu    sync.Mutex
	m     map[counterID]*cacheEntry
	dirty []*cacheEntry // entries with pending hits, each once
	swept time.Time     // when idle entries were last dropped

	decided, near, syncs, synced atomic.Int64
}

// cacheEntry is one counter's state in a Cache.
type cacheEntry struct {
	mu       sync.Mutex
	hit      Hit       // the key and the latest Limit decided: a sync's
	count    uint64    // the shared count last read, in hits
	readAt   time.Time // when
	pending  uint64    // admitted here, not yet sent
	flushing uint64    // sent by a sync, not yet read back
	reserved uint64    // admitted here by requests still deciding
	dirty    bool      // in Cache.dirty
	used     time.Time // the last decision on the counter here

	// The rate base: the count read at baseAt, and this instance's hits
	// that reached the store since.
	baseCount uint64
	baseAt    time.Time
	baseOwn   uint64
	others    float64 // the others' rate, hits per second
	mine      float64 // this instance's, hits per second
	warm      bool    // the rates were measured over a Period at least
	resetAt   time.Time
}

var _ Store = (*Cache)(nil)

// NewCache returns a limiter cache in front of s. Run must be running for
// its pending hits to reach s.
func NewCache(s Store, o CacheOptions) *Cache {
	if o.Period <= 0 {
		o.Period = DefaultCachePeriod
	}
	if o.MaxCounters <= 0 {
		o.MaxCounters = DefaultCacheCounters
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Instances == nil {
		o.Instances = func() int { return 1 }
	}
	return &Cache{store: s, o: o, m: make(map[counterID]*cacheEntry)}
}

// Partitioner is a Store that says which hits it decides in one unit (a
// Redis Cluster slot): a Cache syncs each part in calls of its own, sent at
// once, so that none waits for another's node.
type Partitioner interface {
	// Partition returns the indexes of hits, grouped; every index once.
	Partition(hits []Hit) [][]int
}

// CacheStats counts what a Cache did since it was made.
type CacheStats struct {
	// Decided is the hits decided in process.
	Decided int64
	// Near is the hits of a warm counter sent to the store because they
	// did not fit with the margin (near the limit).
	Near int64
	// Syncs is the sync calls made; SyncedHits the hits they added.
	Syncs, SyncedHits int64
}

// Stats returns the Cache's counts so far.
func (c *Cache) Stats() CacheStats {
	return CacheStats{Decided: c.decided.Load(), Near: c.near.Load(), Syncs: c.syncs.Load(), SyncedHits: c.synced.Load()}
}

// Len is how many counters the Cache holds; 0 for a nil Cache.
func (c *Cache) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// cacheable reports whether h may be decided by a Cache.
func cacheable(h *Hit) bool {
	return h.Limit.Cache && !h.Refund && !(h.Quota && !h.Shadow) && h.Limit.Ceiling == 0 && !h.Limit.Algorithm.Traits().InFlight
}

// Apply implements Store: the hits of cached limits that fit (see Cache)
// are decided here, the others by the store in one call.
func (c *Cache) Apply(ctx context.Context, hits []Hit) ([]Result, error) {
	cached := false
	for i := range hits {
		cached = cached || cacheable(&hits[i])
	}
	if !cached || sharesCounter(hits) {
		return c.store.Apply(ctx, hits)
	}
	for i := range hits {
		if err := hits[i].Validate(); err != nil {
			return c.store.Apply(ctx, hits) // the store names the hit
		}
	}
	now := c.o.Now()
	entries := make([]*cacheEntry, len(hits))
	local := make([]bool, len(hits))
	results := make([]Result, len(hits))
	var rest []int // indexes of the hits for the store
	for i := range hits {
		h := &hits[i]
		if !cacheable(h) {
			rest = append(rest, i)
			continue
		}
		e := c.entry(h, now)
		entries[i] = e
		local[i] = e != nil && e.reserve(h, now, c, &results[i])
		if !local[i] {
			rest = append(rest, i)
		}
	}
	if len(rest) == 0 {
		c.commit(hits, entries, local, true)
		MarkOverLimit(hits, results)
		return results, nil
	}
	if err := c.flushFor(ctx, hits, entries, rest); err != nil {
		c.commit(hits, entries, local, false)
		return nil, err
	}
	sub := make([]Hit, len(rest))
	for j, i := range rest {
		sub[j] = hits[i]
	}
	got, err := c.store.Apply(ctx, sub)
	if err == nil && len(got) != len(sub) {
		err = ErrStoreUnavailable
	}
	if err != nil {
		c.commit(hits, entries, local, false)
		return nil, err
	}
	for j, i := range rest {
		results[i] = got[j]
	}
	admitted := MarkOverLimit(hits, results)
	c.commit(hits, entries, local, admitted)
	for _, i := range rest {
		if e := entries[i]; e != nil && !results[i].ExceedsLimit {
			own := uint64(0)
			if admitted {
				own = hits[i].Hits
			}
			e.read(hits[i].Limit, results[i], own, 0, now, c.o.Period)
		}
	}
	return results, nil
}

// sharesCounter reports whether two hits share a counter: the store then
// merges their growth, which a Cache does not, so it leaves the request to
// the store.
func sharesCounter(hits []Hit) bool {
	for i := range hits {
		for j := range i {
			if idOf(hits[i]) == idOf(hits[j]) {
				return true
			}
		}
	}
	return false
}

// entry returns h's counter's entry, made at now when missing; nil when
// the Cache is full.
func (c *Cache) entry(h *Hit, now time.Time) *cacheEntry {
	id := idOf(*h)
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[id]
	if e == nil {
		if len(c.m) >= c.o.MaxCounters {
			return nil
		}
		e = &cacheEntry{hit: Hit{Key: h.Key, Limit: h.Limit}}
		c.m[id] = e
	}
	return e
}

// reserve decides h on e at now: when it fits with the margin, it reserves
// its hits, writes its Result to r and reports true.
func (e *cacheEntry) reserve(h *Hit, now time.Time, c *Cache, r *Result) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hit.Limit, e.used = h.Limit, now
	capacity := h.Limit.Capacity()
	if !e.warm || h.Hits > capacity {
		return false
	}
	rate := max(e.others, e.mine*float64(c.o.Instances()-1))
	margin := rate * (now.Sub(e.readAt) + c.o.Period).Seconds()
	used := e.count + e.pending + e.flushing + e.reserved + h.Hits
	if float64(used)+math.Ceil(margin) > float64(capacity) {
		c.near.Add(1)
		return false
	}
	e.reserved += h.Hits
	c.decided.Add(1)
	*r = Result{Allowed: true, Remaining: capacity - used, ResetAfter: max(e.resetAt.Sub(now), 0).Truncate(time.Millisecond)}
	return true
}

// commit ends the reservations of the hits decided here: pending when the
// request is admitted, released when not.
func (c *Cache) commit(hits []Hit, entries []*cacheEntry, local []bool, admitted bool) {
	for i, e := range entries {
		if !local[i] {
			continue
		}
		e.mu.Lock()
		n := hits[i].Hits
		e.reserved -= n
		mark := false
		if admitted {
			e.pending += n
			mark = !e.dirty && e.pending > 0
			e.dirty = e.dirty || mark
		}
		e.mu.Unlock()
		if mark {
			c.mu.Lock()
			c.dirty = append(c.dirty, e)
			c.mu.Unlock()
		}
	}
}

// read records a count read from the store at now: r, the Result of a hit
// under l, which added own hits of this instance (and its call ended
// flushed ones in flight). Over a Period at least since the rate base, it
// measures the rates and makes e warm.
func (e *cacheEntry) read(l Limit, r Result, own, flushed uint64, now time.Time, period time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	capacity := l.Capacity()
	e.count = capacity - min(r.Remaining, capacity)
	e.readAt, e.resetAt = now, now.Add(r.ResetAfter)
	e.flushing -= min(e.flushing, flushed)
	e.baseOwn += own + flushed
	if e.baseAt.IsZero() {
		e.baseCount, e.baseAt, e.baseOwn = e.count, now, 0
		return
	}
	el := now.Sub(e.baseAt)
	if el < period {
		return
	}
	grew := float64(e.count) - float64(e.baseCount) - float64(e.baseOwn)
	e.others = max(max(grew, 0)/el.Seconds(), e.others/2)
	e.mine = float64(e.baseOwn) / el.Seconds()
	e.baseCount, e.baseAt, e.baseOwn = e.count, now, 0
	e.warm = true
}

// flushFor adds, before the store decides the hits rest of a request, the
// pending hits of their counters, so that the store counts them.
func (c *Cache) flushFor(ctx context.Context, hits []Hit, entries []*cacheEntry, rest []int) error {
	var es []*cacheEntry
	for _, i := range rest {
		if e := entries[i]; e != nil {
			e.mu.Lock()
			if e.pending > 0 {
				es = append(es, e)
			}
			e.mu.Unlock()
		}
	}
	if len(es) == 0 {
		return nil
	}
	return c.send(ctx, es)
}

// send adds the pending hits of es to the store in one call (es holds at
// most maxSyncHits entries) and reads their counts back. On failure the
// hits are pending again.
func (c *Cache) send(ctx context.Context, es []*cacheEntry) error {
	hits := make([]Hit, 0, len(es))
	sent := make([]uint64, 0, len(es))
	for _, e := range es {
		e.mu.Lock()
		n := e.pending
		e.pending, e.flushing = 0, e.flushing+n
		h := e.hit
		e.mu.Unlock()
		h.Hits, h.Shadow, h.Limit.Cache = n, true, false
		hits, sent = append(hits, h), append(sent, n)
	}
	now := c.o.Now()
	res, err := c.store.Apply(ctx, hits)
	c.syncs.Add(1)
	if err == nil && len(res) != len(hits) {
		err = ErrStoreUnavailable
	}
	if err != nil {
		for i, e := range es {
			e.mu.Lock()
			e.flushing -= min(e.flushing, sent[i])
			e.pending += sent[i]
			e.mu.Unlock()
		}
		return err
	}
	var total uint64
	for i, e := range es {
		e.read(hits[i].Limit, res[i], 0, sent[i], now, c.o.Period)
		total += sent[i]
	}
	c.synced.Add(int64(total))
	return nil
}

// Flush adds every pending hit to the store now, in calls of at most
// maxSyncHits hits sent at once, and returns the first error; the hits of
// a failed call stay pending. A reload and shutdown call it.
func (c *Cache) Flush(ctx context.Context) error {
	c.mu.Lock()
	dirty := c.dirty
	c.dirty = nil
	c.mu.Unlock()
	var es []*cacheEntry
	for _, e := range dirty {
		e.mu.Lock()
		if e.pending > 0 {
			es = append(es, e)
		}
		e.dirty = false
		e.mu.Unlock()
	}
	parts := c.parts(es)
	var wg sync.WaitGroup
	errs := make([]error, len(parts))
	for k, part := range parts {
		wg.Go(func() { errs[k] = c.send(ctx, part) })
	}
	wg.Wait()
	var first error
	for k, err := range errs {
		if err != nil {
			c.redirty(parts[k])
			first = cmp.Or(first, err)
		}
	}
	return first
}

// parts splits es into the store's parts (Partitioner), each in pieces of
// at most maxSyncHits.
func (c *Cache) parts(es []*cacheEntry) [][]*cacheEntry {
	groups := [][]*cacheEntry{es}
	if p, ok := c.store.(Partitioner); ok && len(es) > 1 {
		hits := make([]Hit, len(es))
		for i, e := range es {
			e.mu.Lock()
			hits[i] = e.hit
			e.mu.Unlock()
		}
		groups = groups[:0]
		for _, idx := range p.Partition(hits) {
			g := make([]*cacheEntry, len(idx))
			for j, i := range idx {
				g[j] = es[i]
			}
			groups = append(groups, g)
		}
	}
	var out [][]*cacheEntry
	for _, g := range groups {
		for len(g) > maxSyncHits {
			out, g = append(out, g[:maxSyncHits]), g[maxSyncHits:]
		}
		if len(g) > 0 {
			out = append(out, g)
		}
	}
	return out
}

// redirty lists es again as dirty, for the next sync.
func (c *Cache) redirty(es []*cacheEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range es {
		e.mu.Lock()
		if !e.dirty && e.pending > 0 {
			e.dirty = true
			c.dirty = append(c.dirty, e)
		}
		e.mu.Unlock()
	}
}

// Run syncs every Period until ctx ends, then flushes what is pending
// within timeout. Its owner runs it in one goroutine and waits for it.
func (c *Cache) Run(ctx context.Context, timeout time.Duration) {
	t := time.NewTicker(c.o.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
			_ = c.Flush(fctx) // what fails stays counted nowhere: the process ends
			cancel()
			return
		case <-t.C:
			sctx, cancel := context.WithTimeout(ctx, c.o.Period)
			_ = c.Flush(sctx) // kept pending, sent again at the next tick
			cancel()
			c.sweep()
		}
	}
}

// sweep drops, about once per cacheIdle, the entries without a decision
// for cacheIdle and with nothing pending or in flight.
func (c *Cache) sweep() {
	now := c.o.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.swept) < cacheIdle {
		return
	}
	c.swept = now
	for id, e := range c.m {
		e.mu.Lock()
		if now.Sub(e.used) >= cacheIdle && e.pending == 0 && e.flushing == 0 && e.reserved == 0 {
			delete(c.m, id)
		}
		e.mu.Unlock()
	}
}
