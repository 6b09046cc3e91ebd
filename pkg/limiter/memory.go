package limiter

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"time"
)

// DefaultMaxCounters is the MaxCounters of a MemoryStore whose options leave
// it zero: 131,072 live counters. A counter costs about 210 bytes of heap
// with a state of plain words (a sliding window of one sub-window, a fixed
// window, a token bucket), plus its key's bytes (Sluice's keys: the domain
// and the descriptor's entries, a few dozen bytes), plus 8 per count of a
// state with several (a sliding window of N sub-windows holds N+1); the
// process holds about 1.5x its heap in RSS (the garbage collector's
// headroom). Measured in the sluice binary with keys of 16-byte values: 250
// bytes of heap and 370 of RSS per counter of one sub-window, 680 and 890
// with the default 50 sub-windows; so about 145 MB of RSS at this cap, and
// 270 MB after a flood of 2M new keys churned it (freed states leave the
// heap fragmented). Size MaxCounters to the keys live over two windows, and
// the memory to it (GOMEMLIMIT makes the collector keep under a limit).
const DefaultMaxCounters = 1 << 17

// DefaultMemoryShards is the Shards of a MemoryStore whose options leave it
// zero.
const DefaultMemoryShards = 64

// maxMemoryShards bounds Shards so that the set of shards one request locks
// stays small to scan.
const maxMemoryShards = 1 << 12

// evictionSample is how many counters eviction compares to find the one
// whose loss admits least. Redis approximates its LRU the same way
// (maxmemory-samples).
const evictionSample = 16

// MemoryOptions configures NewMemoryStore. The zero value is valid: the
// process clock, DefaultMaxCounters and DefaultMemoryShards.
type MemoryOptions struct {
	// Now is the clock. nil means time.Now. Tests inject a fake clock here.
	// It must be safe for concurrent use. The store's time, in Unix ms, is
	// Now().UnixMilli() at NewMemoryStore plus the time elapsed since then
	// by Now().Sub: with time.Now that is the monotonic clock, so a step of
	// the wall clock (NTP, an operator) neither rolls counters back into an
	// earlier window nor skips windows (they stay aligned to the wall clock
	// as it was at NewMemoryStore); a fake clock without a monotonic reading
	// is used as is, to the millisecond.
	Now func() time.Time
	// MaxCounters caps the number of live counters. 0 or less means
	// DefaultMaxCounters. The cap is split evenly across the shards (each
	// holds at most MaxCounters/Shards), so the total never exceeds it,
	// except as MemoryStore's doc says for a single request with more new
	// counters than a shard holds.
	MaxCounters int
	// Shards is the number of independently locked maps, rounded up to a
	// power of two and at most 4096; more shards means less lock contention
	// between requests on different keys. 0 or less means
	// DefaultMemoryShards. It is lowered when MaxCounters is smaller, so that
	// every shard holds at least one counter.
	Shards int
}

// MemoryStore is a Store that keeps its counters in process memory: the
// embedded default when no Redis is configured, and the Store of a plain Go
// library user. Counters are not shared between processes and are lost on
// restart. A MemoryStore is safe for concurrent use; create one with
// NewMemoryStore. It starts no goroutine and needs no Close.
//
// Counters are held in sharded maps, each behind its own mutex. Apply locks
// every shard its hits touch, in ascending order (so concurrent requests
// cannot deadlock), reads the clock, evaluates with Evaluate and writes the
// new states before unlocking: one request is atomic. The clock is also made
// monotonic per shard (see MemoryOptions.Now for the process clock): a
// request never evaluates at an earlier millisecond than one already applied
// to a shard it touches, so even an injected clock that steps back cannot
// roll a counter into an earlier window, where Evaluate would forget it.
//
// A counter whose state no longer matters (as its algorithm says: for the
// sliding window, two windows after its last one, or once it is back to zero)
// is dropped. Expired counters are swept from a shard
// when a new counter is inserted into it and the clock has passed the
// earliest expiry the shard may hold; since windows are aligned to the Unix
// epoch, that is about once per window boundary, so the sweep's cost is
// amortised over the window's inserts.
//
// When a shard is full and nothing in it has expired, a new counter competes
// with a sample of 16 of the shard's counters (all of them when the shard
// holds no more), and the one whose loss admits least is forgotten: the new
// counter itself, when it is the one (it is then not stored). A forgotten
// counter restarts from zero, so its key may be admitted again what it held:
// a fail-open, so it falls on the emptiest counters. The measure is what a
// counter held against its limit when last written (its algorithm's
// Capacity minus the Remaining it reported: see algorithm), an upper bound
// of what it holds now, since a counter left alone never gets fuller.
// Counters below their limit go first, the one holding the smallest share of
// its limit first (nearly empty ones, such as the single hit of each value
// of a flood), and a counter at or over its limit (a hot key being denied)
// goes only when no counter of the shard is below its own; among those, the
// one holding fewest hits; ties go to the earliest expiry. When the sample
// holds only counters at their limit, the rest of the shard is searched for
// one below its limit, but only while the shard holds one (a count of the
// counters at their limit when last written says so), so a shard full of
// counters at their limit costs no search. Refusing new counters instead
// (ErrStoreUnavailable) would let anyone who can mint new keys (an end
// client choosing header values or addresses) switch every request of every
// domain into its failure mode, which is worse. Counters of the request
// being applied are never evicted by that request; if it alone has more new
// counters than a shard holds, the shard goes over its cap until later
// inserts evict it back under.
type MemoryStore struct {
	now      func() time.Time
	start    time.Time // now() at NewMemoryStore
	startMs  int64     // start.UnixMilli()
	startSub int64     // start's nanoseconds past startMs
	shards   []memShard
	mask     uint64
	shardCap int
	seed     maphash.Seed
	scratch  sync.Pool // *memScratch
}

var _ Store = (*MemoryStore)(nil)

// memEntry is a stored counter: its state, the Unix ms from which it no
// longer matters (its algorithm's expires), and what it held against its
// limit when written, which eviction weighs it by (see weight): a counter
// left alone never gets fuller (the algorithm contract), so that is an upper
// bound of what it holds now, and eviction reads no state, which for some
// algorithms (sub-windows, logs) would cost a cache miss per sampled
// counter.
type memEntry struct {
	s       memState
	expires int64
	// held is, for a counter below its limit, the share of its capacity it
	// held (0 to 1); for one at or over its limit (full), the hits it held.
	held float32
	full bool
	// blocked says the shard's blocks holds the counter's Penalty state.
	blocked bool
}

// memState is a State without its Penalty state (BlockUntil, BlockLevel),
// which the shard keeps apart for the few counters that have one, so that
// every other counter does not pay the 16 bytes.
type memState struct {
	At     int64
	N1, N2 uint64
	Slots  []int64
}

// penaltyState is the Penalty state of a State.
type penaltyState struct {
	until int64
	level uint8
}

// state returns e's State at id in sh, its Penalty state included.
func (sh *memShard) state(id counterID) State {
	e := sh.m[id]
	s := State{At: e.s.At, N1: e.s.N1, N2: e.s.N2, Slots: e.s.Slots}
	if e.blocked {
		p := sh.blocks[id]
		s.BlockUntil, s.BlockLevel = p.until, p.level
	}
	return s
}

// newEntry returns the entry of state s, just written at nowMs under l, for
// a hit whose Result r was computed on s (Evaluate reports on the new state,
// Remaining for an Allowed hit).
func newEntry(s State, nowMs int64, l Limit, r Result) memEntry {
	a := algorithms[l.Algorithm]
	rem := r.Remaining
	if l.Ceiling != 0 {
		// A pool's class reports against its ceiling; the counter is
		// weighed by what it holds against the whole limit.
		l.Ceiling = 0
		r.Allowed = false
	}
	if !r.Allowed { // Remaining was not computed: report it
		rem, _ = a.report(a.roll(s, nowMs, l), nowMs, l, true)
	}
	c := a.capacity(l)
	held := c - min(rem, c)
	e := memEntry{s: memState{At: s.At, N1: s.N1, N2: s.N2, Slots: s.Slots}, expires: max(a.expires(s, l), penaltyExpires(s, l.Penalty)),
		full: rem == 0 && held > 0, blocked: s.BlockUntil != 0}
	switch {
	case e.full:
		e.held = float32(held)
	case c > 0:
		e.held = float32(held) / float32(c)
	}
	return e
}

type memShard struct {
	mu sync.Mutex
	m  map[counterID]memEntry
	// blocks holds the Penalty state of the entries of m whose blocked is
	// set.
	blocks map[counterID]penaltyState
	// minExpires is at most the earliest expires in m: no sweep is needed
	// before the clock reaches it.
	minExpires int64
	// highMs is the latest clock (Unix ms) a request applied to this shard.
	highMs int64
	// full counts the entries of m whose full is set.
	full int
	_    [24]byte // keep shards on separate cache lines
}

// memScratch is the working memory of one Apply, pooled so that an Apply
// that inserts no new counter allocates only its results.
type memScratch struct {
	ids    []counterID
	shard  []int
	states []State
	next   []State
	locked []uint64 // bit set of shards this request locks
	ev     evalScratch
}

// NewMemoryStore returns an empty MemoryStore configured by opts.
func NewMemoryStore(opts MemoryOptions) *MemoryStore {
	maxCounters := opts.MaxCounters
	if maxCounters <= 0 {
		maxCounters = DefaultMaxCounters
	}
	n := opts.Shards
	if n <= 0 {
		n = DefaultMemoryShards
	}
	n = min(n, maxMemoryShards)
	n = 1 << bits.Len(uint(n-1)) // round up to a power of two
	for n > maxCounters {
		n /= 2
	}
	s := &MemoryStore{
		now:      opts.Now,
		shards:   make([]memShard, n),
		mask:     uint64(n - 1),
		shardCap: maxCounters / n,
		seed:     maphash.MakeSeed(),
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.start = s.now()
	s.startMs = s.start.UnixMilli()
	s.startSub = int64(s.start.Nanosecond() % int(time.Millisecond))
	for i := range s.shards {
		s.shards[i].m = make(map[counterID]memEntry)
		s.shards[i].minExpires = math.MaxInt64
		s.shards[i].highMs = math.MinInt64
	}
	words := (n + 63) / 64
	s.scratch.New = func() any { return &memScratch{locked: make([]uint64, words)} }
	return s
}

// Apply implements Store: it evaluates hits with Evaluate at the store's
// clock (see MemoryOptions.Now) and, if the request is admitted, stores the
// new counter states, atomically with respect to every other Apply. It
// returns an error, and consumes nothing, when ctx is already canceled
// (wrapping context.Canceled) or when a hit does not Validate. It
// never returns ErrStoreUnavailable.
//
// A passed deadline is not an error: the work is in memory and takes
// microseconds, so a deadline can only have passed while the caller's
// goroutine waited for a CPU, and failing then would hand a busy server's
// requests to Envoy's failure mode for no benefit.
func (s *MemoryStore) Apply(ctx context.Context, hits []Hit) ([]Result, error) {
	if err := ctx.Err(); errors.Is(err, context.Canceled) {
		return nil, fmt.Errorf("limiter: apply %d hits in memory: %w", len(hits), err)
	}
	for i := range hits {
		if err := hits[i].Validate(); err != nil {
			return nil, fmt.Errorf("limiter: apply hit %d of %d: %w", i, len(hits), err)
		}
	}
	results := make([]Result, len(hits))
	if len(hits) == 0 {
		return results, nil
	}

	sc := s.scratch.Get().(*memScratch)
	n := len(hits)
	sc.ids = grow(sc.ids, n)
	sc.shard = grow(sc.shard, n)
	sc.states = grow(sc.states, n)
	sc.next = grow(sc.next, n)
	for i := range hits {
		id := idOf(hits[i])
		sh := s.shardOf(id)
		sc.ids[i] = id
		sc.shard[i] = sh
		sc.locked[sh/64] |= 1 << (sh % 64)
	}

	s.lockAll(sc.locked)
	s.applyLocked(hits, results, sc)

	clear(sc.locked)
	clear(sc.ids) // do not keep keys alive in the pool
	s.scratch.Put(sc)
	return results, nil
}

// applyLocked is the critical section of Apply, run with every shard in
// sc.locked locked; it unlocks them even if the injected clock panics.
func (s *MemoryStore) applyLocked(hits []Hit, results []Result, sc *memScratch) {
	defer s.unlockAll(sc.locked)
	// Read the clock under the locks, so that requests on one counter are
	// evaluated in the order they were applied.
	nowMs := s.nowMs()
	forEachBit(sc.locked, func(sh int) { nowMs = max(nowMs, s.shards[sh].highMs) })
	forEachBit(sc.locked, func(sh int) { s.shards[sh].highMs = nowMs })
	for i := range hits {
		sc.states[i] = s.shards[sc.shard[i]].state(sc.ids[i])
	}
	admitted := evaluate(nowMs, hits, sc.states, results, sc.next, &sc.ev)
	for i, h := range hits {
		// A denied request changes only the counters its overdraw and
		// CountDenied hits grew.
		if sc.ev.leader[i] == i && (admitted || sc.ev.overdrawn(i)) {
			e := newEntry(sc.next[i], nowMs, h.Limit, results[i])
			p := penaltyState{sc.next[i].BlockUntil, sc.next[i].BlockLevel}
			s.shards[sc.shard[i]].put(sc.ids[i], e, p, nowMs, s.shardCap, request{sc.ids, sc.shard, sc.shard[i]})
		}
	}
}

// Len returns the number of counters the store holds, expired ones not yet
// swept included. It is safe for concurrent use; the count is not a snapshot
// when Apply runs concurrently.
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// nowMs is the store's clock in Unix ms: see MemoryOptions.Now.
func (s *MemoryStore) nowMs() int64 {
	return s.startMs + floorDiv(s.startSub+int64(s.now().Sub(s.start)), int64(time.Millisecond))
}

func (s *MemoryStore) shardOf(id counterID) int {
	h := maphash.String(s.seed, id.key)
	h ^= (uint64(id.window)<<8 | uint64(id.alg)) * 0x9e3779b97f4a7c15
	h ^= h >> 32
	return int(h & s.mask)
}

func (s *MemoryStore) lockAll(set []uint64) {
	forEachBit(set, func(sh int) { s.shards[sh].mu.Lock() })
}

func (s *MemoryStore) unlockAll(set []uint64) {
	forEachBit(set, func(sh int) { s.shards[sh].mu.Unlock() })
}

// forEachBit calls f with the index of every set bit, in ascending order.
func forEachBit(set []uint64, f func(int)) {
	for w, word := range set {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			f(w*64 + b)
			word &= word - 1
		}
	}
}

// put stores e as the entry of id at nowMs. An entry that no longer matters
// at nowMs (an empty state) is deleted. A new counter first sweeps expired
// ones (when any may have expired) and, if the shard is still at capacity,
// evicts the counter whose loss admits least, which may be the new counter
// itself (then not stored); it never evicts a counter of req (the current
// request's).
func (sh *memShard) put(id counterID, e memEntry, p penaltyState, nowMs int64, capacity int, req request) {
	old, ok := sh.m[id]
	if e.expires <= nowMs {
		if ok {
			sh.remove(id, old)
		}
		return
	}
	if !ok {
		if nowMs >= sh.minExpires {
			sh.sweep(nowMs)
		}
		for len(sh.m) >= capacity {
			// Over the cap (after a request with more new counters than a
			// shard holds), e competes only once the shard is back at it.
			stored, evicted := sh.evict(e, len(sh.m) == capacity, req)
			if !stored {
				return
			}
			if !evicted {
				break // only the request's own counters: go over the cap
			}
		}
		sh.minExpires = min(sh.minExpires, e.expires)
	} else if old.full {
		sh.full--
	}
	if e.full {
		sh.full++
	}
	sh.m[id] = e
	switch {
	case e.blocked:
		if sh.blocks == nil {
			sh.blocks = make(map[counterID]penaltyState)
		}
		sh.blocks[id] = p
	case ok && old.blocked:
		delete(sh.blocks, id)
	}
}

// remove deletes id, whose entry is e, from the shard.
func (sh *memShard) remove(id counterID, e memEntry) {
	delete(sh.m, id)
	if e.full {
		sh.full--
	}
	if e.blocked {
		delete(sh.blocks, id)
	}
}

// sweep drops every counter expired at nowMs and recomputes minExpires.
func (sh *memShard) sweep(nowMs int64) {
	earliest := int64(math.MaxInt64)
	for id, e := range sh.m {
		if e.expires <= nowMs {
			sh.remove(id, e)
			continue
		}
		earliest = min(earliest, e.expires)
	}
	sh.minExpires = earliest
}

// evict makes room for the new entry e at nowMs: among a sample of the
// shard's counters outside req (Go randomises where a map iteration
// starts), and e itself when it competes, it forgets the one whose loss
// admits least (see weight). When every one sampled is at or over its limit
// and the shard holds counters that are not, it searches on for one of
// those. It reports whether e is to be stored (false: e was the one
// forgotten) and whether it evicted a stored counter (false with stored
// true: every counter is protected).
func (sh *memShard) evict(e memEntry, compete bool, req request) (stored, evicted bool) {
	var (
		victim counterID
		found  bool
		best   = weight{full: true, held: math.MaxFloat32, expires: math.MaxInt64}
		seen   int
		other  bool // a counter outside req was seen
		// search: the shard holds a counter that was below its limit when
		// written, so still is; keep looking while the best is not.
		search = sh.full < len(sh.m)
	)
	if compete {
		best = e.weigh()
	}
	for id, c := range sh.m {
		// req.holds costs a scan of the request: ask it only of a counter
		// that would be the victim, and until one outside req is seen.
		if w := c.weigh(); w.less(best) {
			if !req.holds(id) {
				victim, best, found, other = id, w, true, true
			}
		} else if !other {
			other = !req.holds(id)
		}
		if seen++; seen >= evictionSample && (!best.full || !search) {
			break
		}
	}
	if !found {
		// e is the lightest, unless only the request's counters were seen.
		return !other || !compete, false
	}
	sh.remove(victim, sh.m[victim])
	return true, true
}

// weight orders counters for eviction: what forgetting one would admit
// again, as it held when written. A counter below its limit (full false)
// weighs held, the share of its limit (0 to 1); one at or over its limit
// weighs held, the hits it holds; expires breaks ties. The lighter goes
// first.
type weight struct {
	full    bool
	held    float32
	expires int64
}

// weigh returns e's weight.
func (e memEntry) weigh() weight {
	return weight{full: e.full, held: e.held, expires: e.expires}
}

// less reports whether w goes before o.
func (w weight) less(o weight) bool {
	switch {
	case w.full != o.full:
		return !w.full
	case w.held != o.held:
		return w.held < o.held
	}
	return w.expires < o.expires
}

// request is the counters of the request being applied, which its own
// inserts never evict: ids[i] is in shard shards[i]; shard is the shard
// being written.
type request struct {
	ids    []counterID
	shards []int
	shard  int
}

// holds reports whether id, a counter of r.shard, is one of r's. It compares
// shards first: most of a large request's counters are in other shards.
func (r request) holds(id counterID) bool {
	for i, p := range r.ids {
		if r.shards[i] == r.shard && p == id {
			return true
		}
	}
	return false
}
