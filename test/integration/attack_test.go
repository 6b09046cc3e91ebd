//go:build attack

package integration

// The attacks on the Redis path (window overflow, a shard down, refunds
// under load, eviction floods, a stalled Redis), as load runs that print their figures (they
// assert nothing: hardening_test.go holds the bounds). Run them with
//
//	go test -tags attack -count=1 -v -run Attack ./test/integration/
//
// and against another build with SLUICE_TEST_BINARY=/path/to/sluice.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pkg/limiter"
)

const hardening = "test/integration/testdata/hardening"

// tally counts answers by outcome.
type tally struct {
	mu   sync.Mutex
	by   map[string]int
	lat  []time.Duration
	okRm int // OK answers with a limit remaining > 0: decided by the store
}

func (ta *tally) add(resp *rlsv3.RateLimitResponse, err error, took time.Duration) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	if ta.by == nil {
		ta.by = map[string]int{}
	}
	ta.lat = append(ta.lat, took)
	if err != nil {
		msg := status.Convert(err).Message()
		switch {
		case strings.Contains(msg, "answered nothing"):
			msg = "(not sent: stalled)"
		case strings.Contains(msg, "not sent"):
			msg = "(not sent: no time)"
		case strings.Contains(msg, "deadline"), strings.Contains(msg, "timeout"):
			msg = "(sent: timed out)"
		default:
			if i := strings.LastIndex(msg, ": "); i >= 0 {
				msg = msg[i+2:]
			}
			msg = "(sent: " + trim(msg) + ")"
		}
		ta.by[status.Code(err).String()+msg]++
		return
	}
	ta.by[resp.GetOverallCode().String()]++
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK && len(resp.GetStatuses()) > 0 && resp.GetStatuses()[0].GetLimitRemaining() > 0 {
		ta.okRm++
	}
}

func (ta *tally) String() string {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	ds := slices.Clone(ta.lat)
	slices.Sort(ds)
	q := func(p float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(100 * time.Microsecond)
	}
	keys := make([]string, 0, len(ta.by))
	for k := range ta.by {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, ta.by[k])
	}
	fmt.Fprintf(&b, "(%d calls, p50 %v p99 %v max %v)", len(ds), q(0.5), q(0.99), q(1))
	return b.String()
}

// TestAttackOverload (item 6): 400 callers send 5 calls each at once, with
// no deadline of their own, on a healthy Redis; the default store timeout
// (15 ms) and failure mode (error: UNAVAILABLE).
func TestAttackOverload(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t.Name())
	s := startSluice(t, "--config", hardening, "--redis-url", "redis://"+srv.Addr()+"/0", "--redis-prefix", prefix)
	s.call(t, "load", []string{"load", "warm"})
	for round := range 3 {
		value := "round" + strconv.Itoa(round)
		var ta tally
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 400 {
			wg.Go(func() {
				<-start
				for range 5 {
					t0 := time.Now()
					resp, err := s.Client.ShouldRateLimit(context.Background(), request("load", []string{"load", value}))
					ta.add(resp, err, time.Since(t0))
				}
			})
		}
		close(start)
		wg.Wait()
		time.Sleep(500 * time.Millisecond)
		n := counted(t, []string{srv.Addr()}, keyHolding(t, []string{srv.Addr()}, prefix, value))
		t.Logf("overload round %d: 400 callers x 5 calls on one counter: %v; counted %d, %d more than decided", round, &ta, n, int(n)-ta.okRm)
	}
}

// TestAttackPause (item 6): callers on one counter of domain load_deny
// (failure_mode deny): 1 s of load, then Redis is paused (SIGSTOP) and the
// callers go on for 3 s; they stop, Redis resumes, and whatever the counter
// gained since the pause began ran late, for calls answered OVER_LIMIT by
// the failure mode (denied and counted). With 50 and with 400 callers.
func TestAttackPause(t *testing.T) {
	for _, callers := range []int{50, 400} {
		srv := redistest.Start(t)
		prefix := redistest.Prefix(t.Name())
		s := startSluice(t, "--config", hardening, "--redis-url", "redis://"+srv.Addr()+"/0", "--redis-prefix", prefix)
		s.call(t, "load_deny", []string{"load", "paused"})
		key := keyHolding(t, []string{srv.Addr()}, prefix, "paused")
		var before, during tally
		pauseLoad(s, callers, time.Second, &before)
		c0 := counted(t, []string{srv.Addr()}, key)
		srv.Pause(t)
		pauseLoad(s, callers, 3*time.Second, &during)
		srv.Resume(t)
		time.Sleep(time.Second)
		c1 := counted(t, []string{srv.Addr()}, key)
		t.Logf("%d callers: before the pause %v; during the 3 s pause %v; counted after the pause began: %d", callers, &before, &during, c1-c0)
	}
}

// pauseLoad runs callers on [load=paused] of load_deny for d, recording into ta,
// and returns once every call has been answered.
func pauseLoad(s *sluice, callers int, d time.Duration, ta *tally) {
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for time.Now().Before(stop) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				t0 := time.Now()
				resp, err := s.Client.ShouldRateLimit(ctx, request("load_deny", []string{"load", "paused"}))
				cancel()
				ta.add(resp, err, time.Since(t0))
			}
		})
	}
	wg.Wait()
}

// TestAttackClusterRefunds (items 4 and 5): on the 3-master Cluster, 100
// then 400 callers send [parent][sibling][tight] with hits 2, 3 and 5 (10
// calls each); tight (30 an hour) is decided last. Every counter must end at
// hits x admitted; it also counts the refund warnings logged.
func TestAttackClusterRefunds(t *testing.T) {
	addrs := redistest.Cluster(t)
	prefix := redistest.Prefix(t.Name())
	s := startSluice(t, "--config", hardening, "--redis-cluster-addrs", strings.Join(addrs, ","), "--redis-prefix", prefix)
	run := 0
	for _, callers := range []int{100, 400} {
		for _, hits := range []uint64{2, 3, 5} {
			run++
			vals, keys := refundValues(t, s, addrs, prefix, fmt.Sprintf("r%d", run))
			logBefore := strings.Count(s.Log(), "refund after")
			var admitted, denied, failed atomic.Int64
			var ta tally
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range callers {
				wg.Go(func() {
					<-start
					for range 10 {
						req := request("refund", []string{"parent", vals[0]}, []string{"sibling", vals[1]}, []string{"tight", vals[2]})
						req.HitsAddend = uint32(hits)
						t0 := time.Now()
						resp, err := s.Client.ShouldRateLimit(context.Background(), req)
						ta.add(resp, err, time.Since(t0))
						switch {
						case err != nil:
							failed.Add(1)
						case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
							admitted.Add(1)
						default:
							denied.Add(1)
						}
					}
				})
			}
			close(start)
			wg.Wait()
			// The refunds the binary retries in the background (each until
			// Redis answers it, for at most 10 s) are all sent: the counters
			// are final.
			if !eventually(15*time.Second, 20*time.Millisecond, func() bool {
				v, ok := metrics(t, s)["sluice_redis_refunds_pending"]
				return ok && v == 0
			}) {
				t.Errorf("refunds pending 15 s after the load: %v", metrics(t, s)["sluice_redis_refunds_pending"])
			}
			var got [3]uint64
			for i, k := range keys {
				got[i] = counted(t, addrs, k)
			}
			warnings := strings.Count(s.Log(), "refund after") - logBefore
			t.Logf("%d callers, hits %d: admitted %d, denied %d, errors %d; want each counter %d; parent %d, sibling %d, tight %d; %d refund warnings; %v",
				callers, hits, admitted.Load(), denied.Load(), failed.Load(), hits*uint64(admitted.Load()), got[0], got[1], got[2], warnings, &ta)
		}
	}
}

// TestAttackShardDown (item 2): on a private Cluster, col fills (2 an hour),
// then the master of big's slot (decided after col's) is killed; a request
// [col][big] must still be OVER_LIMIT, as [col] alone is.
func TestAttackShardDown(t *testing.T) {
	nodes, addrs := redistest.StartCluster(t)
	prefix := redistest.Prefix(t.Name())
	s := startSluice(t, "--config", hardening, "--redis-cluster-addrs", strings.Join(addrs, ","), "--redis-prefix", prefix)
	col, big := shardValues(t, s, addrs, prefix)
	s.call(t, "shard", []string{"col", col.value})
	s.call(t, "shard", []string{"col", col.value})
	for _, n := range nodes {
		if n.Addr() == big.master {
			n.Stop()
		}
	}
	for _, descs := range [][][]string{{{"col", col.value}, {"big", big.value}}, {{"col", col.value}}} {
		var ta tally
		for range 3 {
			t0 := time.Now()
			resp, err := s.Client.ShouldRateLimit(context.Background(), request("shard", descs...))
			ta.add(resp, err, time.Since(t0))
		}
		t.Logf("%v with big's master down: %v", descs, &ta)
	}
}

// TestAttackEviction (item 3): the in-memory store at its default cap; a
// hot key under 50 a minute is hit every 20 ms while 2M distinct values
// flood the store, then (control) for as long again without the flood.
func TestAttackEviction(t *testing.T) {
	s := startSluice(t, "--config", hardening)
	flood := func(n int) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Go(func() {
				for {
					base := next.Add(64) - 64
					if base >= int64(n) {
						return
					}
					descs := make([][]string, 64)
					for i := range descs {
						descs[i] = []string{"flood", "f" + strconv.Itoa(w) + "-" + strconv.FormatInt(base+int64(i), 10)}
					}
					if _, err := s.Client.ShouldRateLimit(context.Background(), request("evict", descs...)); err != nil {
						t.Errorf("flood: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	hot := func(value string, stop <-chan struct{}) (admitted int) {
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return admitted
			case <-tk.C:
			}
			resp, err := s.Client.ShouldRateLimit(context.Background(), request("evict", []string{"hot", value}))
			if err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
				admitted++
			}
		}
	}
	// Start 10 s before a minute begins, so that the run crosses a window
	// boundary: there, every counter a denied request leaves unwritten is
	// the closest to expiry.
	time.Sleep((50*time.Second - time.Duration(time.Now().UnixNano())%time.Minute + time.Minute) % time.Minute)
	stop := make(chan struct{})
	got := make(chan int)
	go func() { got <- hot("flooded", stop) }()
	t0 := time.Now()
	flood(2_000_000)
	took := time.Since(t0)
	close(stop)
	flooded := <-got
	stop = make(chan struct{})
	go func() { got <- hot("control", stop) }()
	time.Sleep(took)
	close(stop)
	t.Logf("hot key 50/minute hit every 20 ms for %v: %d admitted while 2M distinct values flooded, %d without (control); metrics %s",
		took.Round(100*time.Millisecond), flooded, <-got, memoryFigures(t, s))
}

// memoryFigures returns the process's resident memory, heap in use and
// goroutines, from /metrics after a forced GC (/debug/pprof/heap?gc=1).
func memoryFigures(t *testing.T, s *sluice) string {
	t.Helper()
	if r, err := http.Get("http://" + s.DebugAddr + "/debug/pprof/heap?gc=1"); err == nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	m := metrics(t, s)
	return fmt.Sprintf("rss %.0f MB, heap in use %.0f MB, goroutines %.0f",
		m["process_resident_memory_bytes"]/1e6, m["go_memstats_heap_inuse_bytes"]/1e6, m["go_goroutines"])
}

// TestAttackMemory (item 9): the in-memory store filled to its cap with
// counters of 16-byte values (one descriptor each, in domain evict): heap and
// RSS per counter, at the default cap and at 1 Mi counters.
func TestAttackMemory(t *testing.T) {
	for _, tc := range []struct {
		n     int
		entry string
	}{{0, "flood"}, {0, "flood1"}, {1 << 20, "flood1"}} {
		n := tc.n
		args := []string{"--config", hardening}
		if n != 0 {
			args = append(args, "--max-counters", strconv.Itoa(n))
		} else {
			n = limiter.DefaultMaxCounters
		}
		s := startSluice(t, args...)
		memoryFigures(t, s)
		before := metrics(t, s)
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				for {
					base := next.Add(64) - 64
					if base >= int64(n) {
						return
					}
					descs := make([][]string, 64)
					for i := range descs {
						descs[i] = []string{tc.entry, fmt.Sprintf("%016d", base+int64(i))}
					}
					if _, err := s.Client.ShouldRateLimit(context.Background(), request("evict", descs...)); err != nil {
						t.Errorf("fill: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		fig := memoryFigures(t, s)
		after := metrics(t, s)
		heap := after["go_memstats_heap_inuse_bytes"] - before["go_memstats_heap_inuse_bytes"]
		rss := after["process_resident_memory_bytes"] - before["process_resident_memory_bytes"]
		t.Logf("%d counters of 16-byte values (%s): %s; per counter: heap %.0f B, rss %.0f B", n, tc.entry, fig, heap/float64(n), rss/float64(n))
	}
}

// TestAttackIdleGRPC (item 7): 2000 idle HTTP/2 connections to the gRPC
// listener: goroutines and memory they hold.
func TestAttackIdleGRPC(t *testing.T) {
	s := startSluice(t, "--config", hardening)
	memoryFigures(t, s)
	before := metrics(t, s)
	var conns []*grpc.ClientConn
	for range 2000 {
		c, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// One call opens the connection, as an Envoy that then goes idle.
		if _, err := rlsv3.NewRateLimitServiceClient(c).ShouldRateLimit(context.Background(), request("evict", []string{"hot", "idle"})); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	time.Sleep(time.Second)
	fig := memoryFigures(t, s)
	after := metrics(t, s)
	t.Logf("2000 idle gRPC connections: %s; held: %.0f goroutines, %.1f MB rss, %.1f MB heap (%.1f KB rss per connection)", fig,
		after["go_goroutines"]-before["go_goroutines"], (after["process_resident_memory_bytes"]-before["process_resident_memory_bytes"])/1e6,
		(after["go_memstats_heap_inuse_bytes"]-before["go_memstats_heap_inuse_bytes"])/1e6,
		(after["process_resident_memory_bytes"]-before["process_resident_memory_bytes"])/2000/1e3)
}
