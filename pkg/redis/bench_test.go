package redis

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// benchStore returns a Store on the shared Redis with a pool large enough for
// 64 callers and the production call timeout raised (the benchmark measures
// latency; it must not fail requests that are merely slow), leasing hot
// counters as the server does (DefaultLeaseRate).
func benchStore(b *testing.B) *Store {
	b.Helper()
	addr := redistest.Addr(b)
	prefix := redistest.Prefix(b.Name())
	if p := os.Getenv("SLUICE_BENCH_PREFIX"); p != "" {
		// Keys kept from run to run (under callgrind: only the decisions
		// are measured, on counters that exist).
		prefix = p
	}
	// A read timeout of 30 s: under callgrind (bench/script-cost.sh) on a
	// busy host, loading the library takes longer than go-redis's 3 s.
	c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 128, ContextTimeoutEnabled: true, MaxRetries: -1,
		ReadTimeout: 30 * time.Second})
	s := New(c, Options{Prefix: prefix, CallTimeout: time.Second, LeaseRate: DefaultLeaseRate})
	b.Cleanup(func() {
		if prefix != os.Getenv("SLUICE_BENCH_PREFIX") {
			deletePrefix(b, newClient(b, addr), prefix)
		}
		_ = s.Close()
	})
	return s
}

// benchHits is one typical request: two descriptors (per-client and global).
// The limits are high enough that every request is admitted and writes.
func benchHits(i int) []limiter.Hit {
	l := limiter.Limit{Requests: 1 << 40, Window: time.Minute}
	return []limiter.Hit{
		{Key: "\x06domain\x0bremote_addr\x0a10.0.0." + strconv.Itoa(i%256), Limit: l, Hits: 1},
		{Key: "\x06domain\x04path\x04/api", Limit: l, Hits: 1},
	}
}

// BenchmarkStoreApply is one caller, one request of two descriptors per op.
func BenchmarkStoreApply(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	hits := benchHits(0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Apply(ctx, hits); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(hits)*b.N)/b.Elapsed().Seconds(), "descriptors/s")
}

// BenchmarkStoreApplyConcurrent runs 1, 16 and 64 concurrent callers, each
// sending one request (two descriptors) at a time, and reports decisions
// (requests) per second and the p50/p99 latency of one Apply.
func BenchmarkStoreApplyConcurrent(b *testing.B) {
	for _, callers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			s := benchStore(b)
			ctx := context.Background()
			var next atomic.Int64
			lat := make([][]time.Duration, callers)
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for c := range callers {
				wg.Go(func() {
					hits := benchHits(c)
					for next.Add(1) <= int64(b.N) {
						start := time.Now()
						if _, err := s.Apply(ctx, hits); err != nil {
							b.Error(err)
							return
						}
						lat[c] = append(lat[c], time.Since(start))
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			all := slices.Concat(lat...)
			slices.Sort(all)
			if len(all) == 0 {
				return
			}
			pct := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Microseconds()) }
			b.ReportMetric(float64(len(all))/b.Elapsed().Seconds(), "decisions/s")
			b.ReportMetric(pct(0.50), "p50_µs")
			b.ReportMetric(pct(0.99), "p99_µs")
			b.ReportMetric(0, "ns/op") // meaningless across callers: see decisions/s
		})
	}
}

// BenchmarkCounterKey is the key encoding alone.
func BenchmarkCounterKey(b *testing.B) {
	h := benchHits(1)[0]
	b.ReportAllocs()
	for b.Loop() {
		_ = counterKey(DefaultPrefix, h)
	}
}

// BenchmarkStoreApplyCluster is one caller on the 3-master Cluster: a request
// of two descriptors on one counter (one slot, one script call) and one of
// two descriptors on counters in two slots (two calls, one after the other).
func BenchmarkStoreApplyCluster(b *testing.B) {
	addrs := redistest.Cluster(b)
	prefix := redistest.Prefix(b.Name())
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, MaxRetries: -1})
	s := New(c, Options{Prefix: prefix, CallTimeout: time.Second, LeaseRate: DefaultLeaseRate})
	b.Cleanup(func() {
		deletePrefix(b, newClusterClient(b, addrs), prefix)
		_ = s.Close()
	})
	l := limiter.Limit{Requests: 1 << 40, Window: time.Minute}
	one := []limiter.Hit{{Key: "a", Limit: l, Hits: 1}, {Key: "a", Limit: limiter.Limit{Requests: 1 << 39, Window: time.Minute}, Hits: 1}}
	var two []limiter.Hit
	for i := 0; len(two) < 2; i++ {
		h := limiter.Hit{Key: strconv.Itoa(i), Limit: l, Hits: 1}
		if len(two) == 0 || slot(counterKey(s.prefix, h)) != slot(counterKey(s.prefix, two[0])) {
			two = append(two, h)
		}
	}
	for _, tc := range []struct {
		slots int
		hits  []limiter.Hit
	}{{1, one}, {2, two}} {
		b.Run(fmt.Sprintf("slots=%d", tc.slots), func(b *testing.B) {
			if groups, _ := s.split(tc.hits); len(groups) != tc.slots {
				b.Fatalf("the request spans %d slots, want %d", len(groups), tc.slots)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Apply(ctx, tc.hits); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScriptBatch is the script alone: one call deciding batch
// single-hit requests on distinct counters (20,000 of them, cycling), for
// the default sliding window (50 sub-windows), the classic one and the
// fixed window. Run it against a Redis under callgrind
// (RLS_TEST_REDIS_ADDR) to count Redis's instructions per decision.
func BenchmarkScriptBatch(b *testing.B) {
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_KEYS")); err == nil {
		benchKeys = v
	}
	algs := map[string]limiter.Limit{
		"sw50":  {Requests: 1 << 40, Window: time.Minute, SubWindows: 50},
		"sw1":   {Requests: 1 << 40, Window: time.Minute},
		"fixed": {Requests: 1 << 40, Window: time.Minute, Algorithm: limiter.FixedWindow},
	}
	for _, name := range []string{"sw50", "sw1", "fixed"} {
		for _, batch := range []int{1, 8, 32} {
			b.Run(fmt.Sprintf("%s/batch=%d", name, batch), func(b *testing.B) {
				s := benchStore(b)
				if err := s.Warm(context.Background()); err != nil {
					b.Fatal(err)
				}
				n := 0
				b.ReportAllocs()
				for b.Loop() {
					ps := make([]*pending, batch)
					for i := range ps {
						h := limiter.Hit{Key: strconv.Itoa(n % benchKeys), Limit: algs[name], Hits: 1}
						n++
						gs, _ := s.split([]limiter.Hit{h})
						ps[i] = &pending{e: gs[0].e}
					}
					for _, err := range runEntries(context.Background(), s.d.ns.one.c, s.d.ns.one.caller, "", ps) {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "decisions/s")
			})
		}
	}
}

// benchKeys is how many counters BenchmarkScriptBatch cycles through.
var benchKeys = 20000

// BenchmarkScriptSteady is the script alone in the load test's steady state
// (bench/loadtest.yaml under 16,000 decisions/s on 10,000 values): batches
// of SLUICE_BENCH_BATCH (12: what a call carries at 64 callers) requests of
// SLUICE_BENCH_HITS (1) descriptors, on
// SLUICE_BENCH_KEYS counters (10,000) in turn, of the default sliding window
// (a minute, 50 sub-windows; SLUICE_BENCH_ALG names another algorithm of a
// minute, e.g. fixed_window; SLUICE_BENCH_CEILING makes every request a
// pool's class of that ceiling in permille, e.g. 800, never reached), on a
// clock of its own on which each counter is
// hit every 625 ms (as at 16,000 decisions/s on 10,000 counters), so that
// every counter holds a hit or two in each of its sub-windows. The clock is kept in Redis under the prefix, so that a run
// with SLUICE_BENCH_PREFIX continues the last: warm the counters up with a
// long run on a plain Redis, then count Redis's instructions per decision
// under callgrind (bench/script-cost.sh), a figure the machine's noise does
// not move.
//
// For concurrency a request is an acquire under a slot token of its own
// (its clock's ms) and, as a second entry of the call, the release of the
// slot its counter's last request took (625 ms before): each counter holds
// one slot in flight, as when every request ends before the next begins.
// A run that continues the last releases that run's last slots when its
// calls times batch is a multiple of the counters (as script-cost.sh's are).
func BenchmarkScriptSteady(b *testing.B) {
	keys := 10000
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_KEYS")); err == nil {
		keys = v
	}
	batch, perRequest := 12, 1
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_BATCH")); err == nil {
		batch = v
	}
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_HITS")); err == nil {
		perRequest = v
	}
	s := benchStore(b)
	ctx := context.Background()
	// Under callgrind on a busy host, loading the library may outlast
	// Warm's PingTimeout: a load that timed out is tried again (the
	// library is the same, so one that did land is taken as loaded).
	err := s.Warm(ctx)
	for try := 1; err != nil && try < 10; try++ {
		err = s.Warm(ctx)
	}
	if err != nil {
		b.Fatal(err)
	}
	rdb := newClient(b, redistest.Addr(b))
	clock := s.prefix + "bench-clock"
	start, err := rdb.Get(ctx, clock).Int64()
	if err != nil {
		start = time.Now().UnixMilli()
	}
	l := steadyLimit(b)
	n := 0
	for b.Loop() {
		ps := make([]*pending, 0, 2*batch)
		for range batch {
			at := start + int64(n*625/keys)
			hits := make([]limiter.Hit, perRequest)
			for d := range hits {
				hits[d] = limiter.Hit{Key: "d" + strconv.Itoa(d) + "k" + strconv.Itoa(n%keys), Limit: l, Hits: 1}
			}
			if l.Algorithm == limiter.Concurrency {
				ps = append(ps, steadyEntry(s, hits, uint64(at), true))
				ps = append(ps, steadyEntry(s, hits, uint64(at-625), false))
			} else {
				ps = append(ps, steadyEntry(s, hits, 0, true))
			}
			n++
		}
		now := strconv.FormatInt(start+int64(n*625/keys), 10)
		for _, err := range runEntries(ctx, s.d.ns.one.c, s.d.ns.one.caller, now, ps) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := rdb.Set(ctx, clock, start+int64(n*625/keys), 0).Err(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "decisions/s")
}

// steadyEntry is the entry of a request of hits (copied) under slot token
// token, an acquire, or, when not acquire, a release of it.
func steadyEntry(s *Store, hits []limiter.Hit, token uint64, acquire bool) *pending {
	hs := slices.Clone(hits)
	for i := range hs {
		hs[i].SlotToken, hs[i].Refund = token, !acquire
	}
	gs, _ := s.split(hs)
	return &pending{e: gs[0].e}
}

// steadyLimit is BenchmarkScriptSteady's Limit: SLUICE_BENCH_ALG's
// algorithm (the default sliding window of 50 sub-windows if unset) of a
// minute, never reached, a pool's class of SLUICE_BENCH_CEILING if set.
func steadyLimit(b *testing.B) limiter.Limit {
	l := limiter.Limit{Requests: 1 << 40, Window: time.Minute, SubWindows: 50}
	if v := os.Getenv("SLUICE_BENCH_ALG"); v != "" {
		a, ok := limiter.ParseAlgorithm(v)
		if !ok {
			b.Fatalf("SLUICE_BENCH_ALG=%q: not an algorithm", v)
		}
		l.Algorithm = a
		if a != limiter.SlidingWindow {
			l.SubWindows = 0
		}
		if a == limiter.SlidingLog || a == limiter.Concurrency {
			l.Requests = limiter.MaxLogRequests
		}
	}
	if v := os.Getenv("SLUICE_BENCH_CEILING"); v != "" {
		c, err := strconv.ParseUint(v, 10, 16)
		if err != nil || c > limiter.MaxCeiling {
			b.Fatalf("SLUICE_BENCH_CEILING=%q: want a ceiling in permille, 0 to %d", v, limiter.MaxCeiling)
		}
		l.Ceiling = uint16(c)
	}
	return l
}
