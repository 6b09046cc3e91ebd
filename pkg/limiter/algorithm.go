package limiter

import (
	"fmt"
	"math"
)

// Algorithm names the counting algorithm of a Limit. The zero value is
// SlidingWindow, the default. The numbers are part of the protocol between
// Go and the Lua script of pkg/redis, which dispatches on them (each Lua file
// registers under its config spelling, and pkg/redis gives the script the
// numbers from this registry): never renumber one.
type Algorithm uint8

const (
	// SlidingWindow is the sliding window counter (sliding.go): with one
	// sub-window, the count of the current fixed window plus the count of
	// the previous one weighted by the share of it that still overlaps the
	// sliding window; with N > 1 (Limit.SubWindows), the counts of the N+1
	// sub-windows that overlap the sliding window, each counted whole.
	SlidingWindow Algorithm = iota
	// TokenBucket is GCRA (token.go): a bucket of Limit.Burst tokens (default
	// Requests) refilled at Requests per Window, stored as one theoretical
	// arrival time.
	TokenBucket
	// FixedWindow is envoyproxy/ratelimit's counter (fixed.go): one count per
	// epoch-aligned Window, but a denied request consumes nothing.
	FixedWindow
	// SlidingLog is the exact sliding log (log.go): the time of every
	// admitted hit in the last Window. Requests is at most MaxLogRequests.
	SlidingLog
	// Concurrency counts requests in flight (log.go): an acquire takes hits
	// slots under its Hit.SlotToken, a refund (Envoy's is_negative_hits,
	// sent when the stream ends) releases slots of its SlotToken only, and
	// a slot never released frees itself one Window after its acquire.
	// Requests is at most MaxLogRequests.
	Concurrency
)

// Traits is one algorithm's row in the registry beyond its Go code: its
// config spelling, what it can do and how stores lay out its counters. Every
// package whose behaviour depends on the algorithm (the config builder, the
// decision's plan, pkg/redis's keys and leases, pkg/rlqs) reads these fields
// instead of naming algorithms, so that an algorithm is added by one row.
// The zero Traits is that of a number that names no algorithm.
type Traits struct {
	// Name is the config spelling (rate_limit.algorithm).
	Name string
	// Code names the algorithm inside a store's counter keys (pkg/redis:
	// "sw"), so that two algorithms' counters never share a key. A code
	// never changes once keys exist under it: live counters would be lost
	// in an upgrade.
	Code string
	// Packed says that pkg/redis keeps a counter as one packed string (read
	// by a call's one MGET), which its key marks; a SlidingWindow of N > 1
	// sub-windows is packed too (SubWindows), whatever this says.
	Packed bool
	// Lease says a hot counter's permits may be leased: permits counted at
	// once in the current window (or sub-window) can be spent until it ends
	// without overrunning any window.
	Lease bool
	// Overdraw says Limit.Overdraw is allowed (and the service's overdraw
	// default applies to it).
	Overdraw bool
	// CountDenied says Limit.CountDenied is allowed (and the service's
	// default of counting denied hits applies to it).
	CountDenied bool
	// Burst says Limit.Burst is read: the capacity, Requests by default.
	Burst bool
	// SubWindows says Limit.SubWindows is read (and is part of the
	// counter's identity).
	SubWindows bool
	// Shares says pkg/rlqs can divide the limit among Envoy holders, each
	// enforcing its share itself: false for what Envoy cannot count.
	Shares bool
	// InFlight says the algorithm counts requests in flight, released by a
	// refund (is_negative_hits) when the stream ends, not requests.
	InFlight bool
	// MaxRequests is the largest Requests it counts, 0 for MaxCount (it
	// keeps one entry per hit).
	MaxRequests uint64
}

// change is what one request does to one counter (Evaluate's growth):
// inc, the largest Hits among its non-refund hits, then dec, the largest
// among its refunds; for an algorithm that counts requests in flight,
// acquire names the slots inc takes and release the slots dec frees (the
// largest SlotToken among the counter's acquires, and among its releases).
type change struct {
	inc, dec         uint64
	acquire, release uint64
}

// registered is one row of the registry: the Traits and the Go twin.
type registered struct {
	Traits
	algorithm
}

// algorithms is the registry of algorithms, indexed by Algorithm: the one
// place that lists them. Everything that depends on the algorithm (Evaluate,
// Limit.Validate, MemoryStore's expiry and eviction, OverLimitCache, and
// outside the package every reader of Traits) goes through it.
var algorithms = [...]registered{
	SlidingWindow: {Traits{Name: "sliding_window", Code: "sw", Lease: true, Overdraw: true, CountDenied: true, SubWindows: true, Shares: true},
		slidingWindow{}},
	TokenBucket: {Traits{Name: "token_bucket", Code: "tb", Packed: true, Overdraw: true, CountDenied: true, Burst: true, Shares: true},
		tokenBucket{}},
	FixedWindow: {Traits{Name: "fixed_window", Code: "fw", Packed: true, Lease: true, Overdraw: true, CountDenied: true, Shares: true},
		fixedWindow{}},
	SlidingLog: {Traits{Name: "sliding_log", Code: "sl", Shares: true, MaxRequests: MaxLogRequests},
		slidingLog{}},
	Concurrency: {Traits{Name: "concurrency", Code: "cc", InFlight: true, MaxRequests: MaxLogRequests},
		slidingLog{inFlight: true}},
}

// Traits returns a's row of the registry, the zero Traits for a number
// that names no algorithm.
func (a Algorithm) Traits() Traits {
	if !a.valid() {
		return Traits{}
	}
	return algorithms[a].Traits
}

// AlgorithmsWith returns, in order, every Algorithm whose Traits has, for
// messages that list which algorithms take a parameter ("only token_bucket
// has a burst"). The slice is the caller's.
func AlgorithmsWith(has func(Traits) bool) []Algorithm {
	var all []Algorithm
	for i := range algorithms {
		if has(algorithms[i].Traits) {
			all = append(all, Algorithm(i))
		}
	}
	return all
}

// algorithm is the Go twin of one algorithm: how it reads, decides and
// changes the State of one counter. Every method is pure and must agree with
// the algorithm's section of the Lua script in pkg/redis on every input. The
// shared code calls them as Evaluate does:
//
//  1. roll each hit's stored State to now (the state the decision reads);
//  2. for each hit that is neither a refund nor over the Limit's Capacity,
//     decide whether n more hits fit, n being the growth its counter takes;
//  3. if the request is admitted, consume once per counter;
//  4. report Remaining and ResetAfter from the resulting State.
//
// The steps are few and coarse on purpose: each is an indirect call, and the
// Lua section groups them the same way (read, decide, write, report).
//
// decide and report apply l's Ceiling (a pool's class): they read the
// algorithm's limit (Requests, a token bucket's burst) through
// l.CeilingOf, so a class is admitted only while the counter stays within
// its ceiling, and Remaining and the resets are relative to it. capacity,
// roll, consume and expires ignore it: counting, refill and expiry are the
// counter's, whichever class sends the hit.
//
// l is the hit's own Limit, except in consume and expires, which act once
// per counter and get the Limit of the counter's first hit in the request
// (hits on one counter share Window and Algorithm, not Requests). Times are
// Unix ms; durations are ms.
type algorithm interface {
	// validate reports what is wrong with l's algorithm parameters, naming
	// the field. Window and Algorithm are already valid, and Limit.Validate
	// has refused the parameters its Traits do not take.
	validate(l Limit) error
	// capacity is the most hits l can ever admit at once without its
	// Ceiling (Limit.Capacity applies it).
	capacity(l Limit) uint64
	// roll returns s as seen at nowMs. It may read l only through the
	// counter's identity (Window, Algorithm, Calendar), since every hit on a counter
	// must roll its State alike (and the Lua read step sees no Requests).
	roll(s State, nowMs int64, l Limit) State
	// decide reports whether n more hits fit under l on the rolled s, and if
	// not, the time until they would with no further traffic (at least 1).
	// n <= l.Capacity() (the capacity under the Ceiling).
	decide(s State, nowMs int64, l Limit, n uint64) (ok bool, retryMs int64)
	// consume returns the rolled s after the change c: admitting c.inc hits
	// and then refunding c.dec (the newest hits first, never below empty),
	// or for an algorithm that counts requests in flight, releasing c.dec
	// of the slots of token c.release.
	consume(s State, nowMs int64, l Limit, c change) State
	// report returns how many more hits l admits on s right now (0 unless
	// allowed: it is computed for an allowed hit only) and the time until s
	// admits the full l with no further traffic.
	//
	// MemoryStore's eviction weighs a counter by it too, when the counter
	// is written: with allowed true, capacity(l) - remaining is what the
	// counter holds against l, which forgetting it would admit again, and it
	// is at its limit when remaining is 0. So remaining must be at most
	// capacity(l), and must not decrease as nowMs grows while s is left
	// alone (a counter nobody writes never gets fuller): what a counter held
	// when written then bounds what it holds until its next write, and one
	// below its limit then is still below it (TestEvictionReadsOfEveryAlgorithm
	// checks both on every algorithm).
	report(s State, nowMs int64, l Limit, allowed bool) (remaining uint64, resetAfterMs int64)
	// expires returns the Unix ms from which s, with no further traffic, is
	// equivalent to the zero State, and math.MinInt64 when it already is.
	// MemoryStore drops a counter then, and the Lua section sets the same
	// expiry as the key's TTL (at most two windows for the windows and logs;
	// a token bucket's when it is full again).
	expires(s State, l Limit) int64
	// denialsHold reports whether a denial, once answered, holds until its
	// RetryAfter whatever other requests do (refunds aside): true when other
	// traffic can only fill counters further. OverLimitCache answers a
	// repeated denial from memory only then.
	denialsHold() bool
}

// State is the stored state of one counter, which the counter's Algorithm
// interprets. The zero value is an empty counter under every algorithm, and
// every algorithm maps a state that no longer holds anything back to an
// equivalent of it (see expires), so a store may drop such a counter.
//
// The algorithms use it as follows:
//   - sliding_window, one sub-window: At is the window index
//     floor(now_ms / window_ms); N1 counts the hits in window At (cur) and
//     N2 those in window At-1 (prev).
//   - sliding_window, N > 1 sub-windows: At is the sub-window index
//     floor(now_ms / (window_ms/N)); Slots holds the counts of sub-windows
//     At-N to At, oldest first (nil when all are zero).
//   - token_bucket (GCRA): the theoretical arrival time TAT, the time at
//     which the bucket is full again, is At + N1/N2 ms: At whole ms, N1 the
//     fraction in units of 1/N2 ms, N2 the refill's denominator (see
//     token.go).
//   - fixed_window: At the window index (with a Calendar, the period's
//     start in Unix ms), N1 the count.
//   - sliding_log: Slots holds the Unix ms time of every counted hit
//     still in the window, ascending, one element per hit.
//   - concurrency: Slots holds two elements per slot still in the window,
//     its acquire's Unix ms time and its slot token (Hit.SlotToken),
//     ascending by time, slots of one time in the order they were taken.
//
// Shared code never compares States and Evaluate never changes a State it is
// given, so the slice field works: its algorithm returns a new slice
// whenever the state changes. The fields are plain words, not an array: Go
// passes a struct holding an array in memory, not in registers, which made
// every step of Evaluate several times slower.
//
// The Lua script holds the same state in the key's own layout (a hash, or a
// sorted set for the logs); each section says how.
type State struct {
	// At places the state in time: a window index or a Unix ms time.
	At int64
	// N1 and N2 are the algorithm's counts, in hits.
	N1, N2 uint64
	// Slots holds a variable number of counts or times, as the algorithm
	// says; nil for the others.
	Slots []int64
	// BlockUntil and BlockLevel are a Penalty's state, beside the
	// algorithm's: the Unix ms at which the counter's last block ends (0:
	// none) and that block's level. The algorithms leave them alone.
	BlockUntil int64
	BlockLevel uint8
}

// MaxCount caps a stored count. Counts saturate there so that the Lua twin,
// whose numbers are IEEE doubles, holds every count exactly and both
// implementations compute the same results.
const MaxCount = 1 << 52

// String returns the algorithm's config spelling ("sliding_window"), or
// "algorithm(N)" for a number that names none.
func (a Algorithm) String() string {
	if int(a) < len(algorithms) {
		return algorithms[a].Name
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// ParseAlgorithm returns the Algorithm whose config spelling
// (rate_limit.algorithm) is s, and false when there is none. The empty
// string is not a spelling: callers map an unset field to the zero value.
func ParseAlgorithm(s string) (Algorithm, bool) {
	for i := range algorithms {
		if algorithms[i].Name == s {
			return Algorithm(i), true
		}
	}
	return 0, false
}

// Algorithms returns every Algorithm, in order, for messages that list the
// valid spellings. The slice is the caller's.
func Algorithms() []Algorithm {
	all := make([]Algorithm, len(algorithms))
	for i := range all {
		all[i] = Algorithm(i)
	}
	return all
}

// valid reports whether a names a registered algorithm.
func (a Algorithm) valid() bool { return int(a) < len(algorithms) }

// grow returns s resliced to n elements, all zero, reallocating only when
// its capacity is too small.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}
