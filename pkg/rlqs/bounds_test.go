package rlqs_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/pkg/rlqs"
)

// TestMaxTotalBuckets: the buckets of all streams together are bounded; a
// new bucket past the bound, with no idle bucket to take the place of, is
// answered untracked from its rule's overflow limit (never by the failure
// mode), and tracked once a stream that ends frees the bound.
func TestMaxTotalBuckets(t *testing.T) {
	e := newEnv(t, testYAML+"failure_mode: deny\n", rlqs.Options{MaxBuckets: 3, MaxTotalBuckets: 4})
	a, b := e.open(t), e.open(t)
	resp := exchange(t, a, reports("d", usage(1, 0, "api_key", "a1"), usage(1, 0, "api_key", "a2"), usage(1, 0, "api_key", "a3")))
	for i, act := range resp.GetBucketAction() {
		if tokens(t, act) == 0 {
			t.Errorf("a's bucket %d: DENY_ALL, want a share (3 of 4 buckets tracked)", i)
		}
	}
	resp = exchange(t, b, reports("d", usage(1, 0, "api_key", "b1"), usage(1, 0, "api_key", "b2")))
	var got []string
	for _, act := range resp.GetBucketAction() {
		got = append(got, strategy(act))
	}
	// b2's overflow share: its demand, 1/s, and half the headroom of 20/s.
	if want := "tb 10/10 per 1s ttl 10s, tb 10/10 per 1s ttl 10s"; strings.Join(got, ", ") != want {
		t.Errorf("b's buckets past 4 in all: %q, want %q (the 5th from the overflow limit of per_key)", got, want)
	}
	if n := e.gauge(t, "sluice_rlqs_buckets"); n != 4 {
		t.Errorf("sluice_rlqs_buckets = %v, want 4", n)
	}
	if n := e.counter(t, "sluice_rlqs_overflowed_total", "max_total_buckets"); n != 1 {
		t.Errorf("overflowed past max_total_buckets = %v, want 1", n)
	}
	if err := a.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Recv(); err == nil {
		t.Fatal("stream a did not end")
	}
	waitFor(t, "a's buckets freed", func() bool { return e.gauge(t, "sluice_rlqs_buckets") == 1 })
	resp = exchange(t, b, reports("d", usage(1, 0, "api_key", "b1"), usage(1, 0, "api_key", "b2")))
	if n := tokens(t, resp.GetBucketAction()[1]); n == 0 {
		t.Errorf("b2 after a ended: DENY_ALL, want a share")
	}
	if n := e.gauge(t, "sluice_rlqs_buckets"); n != 2 {
		t.Errorf("sluice_rlqs_buckets after a ended = %v, want 2 (b2 tracked)", n)
	}
}

// flood is n usages of buckets {api_key: <prefix><i>}, as an end client
// that chooses the header the bucket id is built from makes them, each
// with requests.
func flood(prefix string, n int, requests uint64) []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	var us []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
	for i := range n {
		us = append(us, usage(requests, 0, "api_key", prefix+strconv.Itoa(i)))
	}
	return us
}

// TestOneClientFillsBound is the regression test of a client that fills
// --rlqs-max-buckets with buckets built from its own header values, every
// one busy: a new tenant's bucket past the bound is still limited (its
// rule's overflow share, not the failure mode's ALLOW_ALL, which Envoy's
// no_assignment_behavior would also give it), as is every bucket past the
// bound; and the overflow shares of two streams add up to at most the
// rule's limit.
func TestOneClientFillsBound(t *testing.T) {
	e := newEnv(t, testYAML+"failure_mode: allow\n", rlqs.Options{MaxBuckets: 4})
	a, b := e.open(t), e.open(t)
	exchange(t, a, reports("d", flood("evil-", 4, 5)...))
	exchange(t, b, reports("d", flood("evil-", 4, 5)...))
	e.clock.Advance(time.Second)
	resp := exchange(t, a, reports("d", append(flood("evil-", 8, 5), usage(1, 0, "api_key", "tenant"))...))
	var got []string
	for _, act := range resp.GetBucketAction()[4:] {
		got = append(got, strategy(act))
	}
	// The overflow limit of per_key (20/s), a's demand the busiest
	// bucket's, 5/s: 5 + 15/2.
	want := strings.Repeat("tb 12/12 per 1s ttl 10s, ", 4) + "tb 12/12 per 1s ttl 10s"
	if strings.Join(got, ", ") != want {
		t.Errorf("a's buckets past the bound of 4 (evil-4 to evil-7, tenant):\n\t%s\nwant\n\t%s", strings.Join(got, ", "), want)
	}
	resp = exchange(t, b, reports("d", append(flood("evil-", 4, 5), usage(1, 0, "api_key", "tenant"))...))
	ta, tb := uint32(12), tokens(t, resp.GetBucketAction()[4])
	if tb == 0 || ta+tb > 20 {
		t.Errorf("tenant's overflow shares on a and b = %d and %d, want both above 0 and at most 20 together (per_key's limit)", ta, tb)
	}
	if n := e.counter(t, "sluice_rlqs_overflowed_total", "max_buckets"); n != 6 {
		t.Errorf("overflowed past max_buckets = %v, want 6 (5 on a, 1 on b)", n)
	}
	if n := e.gauge(t, "sluice_rlqs_buckets"); n != 8 {
		t.Errorf("sluice_rlqs_buckets = %v, want 8 (4 per stream)", n)
	}
}

// TestIdleBucketEvicted is the regression test of a bound that idle buckets
// hold: a new bucket past --rlqs-max-buckets takes the place of the bucket
// idle the longest, which is answered with an AbandonAction (Envoy forgets
// it and subscribes again on its next request) and its share released; a
// bucket busy in the report is never evicted, and one idle for a shorter
// time stays.
func TestIdleBucketEvicted(t *testing.T) {
	e := newEnv(t, testYAML, rlqs.Options{MaxBuckets: 3})
	s := e.open(t)
	exchange(t, s, reports("d", usage(5, 0, "api_key", "k1"), usage(5, 0, "api_key", "k2"), usage(5, 0, "api_key", "k3")))
	e.clock.Advance(time.Second)
	exchange(t, s, reports("d", usage(0, 0, "api_key", "k1"), usage(5, 0, "api_key", "k2"), usage(5, 0, "api_key", "k3")))
	e.clock.Advance(time.Second)
	resp := exchange(t, s, reports("d", usage(1, 0, "api_key", "new"), usage(0, 0, "api_key", "k1"),
		usage(0, 0, "api_key", "k2"), usage(5, 0, "api_key", "k3")))
	var got []string
	for _, act := range resp.GetBucketAction() {
		got = append(got, act.GetBucketId().GetBucket()["api_key"]+" "+strategy(act))
	}
	want := "new tb 10/10 per 1s ttl 10s, k1 abandon, k2 tb 12/12 per 1s ttl 10s, k3 tb 12/12 per 1s ttl 10s"
	if strings.Join(got, ", ") != want {
		t.Errorf("actions:\n\t%s\nwant\n\t%s", strings.Join(got, ", "), want)
	}
	if n := e.counter(t, "sluice_rlqs_evicted_total", "max_buckets"); n != 1 {
		t.Errorf("evicted under max_buckets = %v, want 1", n)
	}
	if n := e.gauge(t, "sluice_rlqs_buckets"); n != 3 {
		t.Errorf("sluice_rlqs_buckets = %v, want 3", n)
	}
	if n := e.shares.Len(); n != 3 {
		t.Errorf("holdings = %d, want 3 (k1's released)", n)
	}
}

// TestIdleEvictedAcrossStreams: a new bucket past --rlqs-max-total-buckets
// on a stream with no idle bucket is answered from the overflow limit, and
// another stream gives up its idle bucket at its next report, so that the
// new bucket is tracked at its own next report.
func TestIdleEvictedAcrossStreams(t *testing.T) {
	e := newEnv(t, testYAML, rlqs.Options{MaxTotalBuckets: 3})
	a, b := e.open(t), e.open(t)
	exchange(t, a, reports("d", flood("a", 2, 5)...))
	exchange(t, b, reports("d", flood("b", 1, 5)...))
	e.clock.Advance(time.Second)
	resp := exchange(t, b, reports("d", usage(5, 0, "api_key", "b0"), usage(1, 0, "api_key", "tenant")))
	if acts := resp.GetBucketAction(); len(acts) != 2 || strategy(acts[1]) != "tb 10/10 per 1s ttl 10s" {
		t.Errorf("b0 and the tenant past the total bound: %v, want the tenant answered from the overflow limit's share, tb 10/10", acts)
	}
	resp = exchange(t, a, reports("d", usage(0, 0, "api_key", "a0"), usage(5, 0, "api_key", "a1")))
	if got := strategy(resp.GetBucketAction()[0]); got != "abandon" {
		t.Errorf("a's idle bucket while b waits for room: %s, want abandon", got)
	}
	e.clock.Advance(time.Second)
	exchange(t, b, reports("d", usage(5, 0, "api_key", "b0"), usage(1, 0, "api_key", "tenant")))
	if n := e.counter(t, "sluice_rlqs_evicted_total", "max_total_buckets"); n != 1 {
		t.Errorf("evicted under max_total_buckets = %v, want 1", n)
	}
	if n := e.counter(t, "sluice_rlqs_overflowed_total", "max_total_buckets"); n != 1 {
		t.Errorf("overflowed past max_total_buckets = %v, want 1 (tracked at its second report)", n)
	}
}

// TestStaleBucketEvicted: a bucket no report has held for an assignment TTL
// (Envoy no longer has it) makes room for a new one before a bucket Envoy
// still reports idle does.
func TestStaleBucketEvicted(t *testing.T) {
	e := newEnv(t, testYAML, rlqs.Options{MaxBuckets: 2, AssignmentTTL: 2 * time.Second})
	s := e.open(t)
	exchange(t, s, reports("d", usage(5, 0, "api_key", "gone"), usage(5, 0, "api_key", "idle")))
	e.clock.Advance(time.Second)
	exchange(t, s, reports("d", usage(0, 0, "api_key", "idle")))
	e.clock.Advance(2 * time.Second)
	resp := exchange(t, s, reports("d", usage(0, 0, "api_key", "idle"), usage(1, 0, "api_key", "new")))
	var got []string
	for _, act := range resp.GetBucketAction() {
		got = append(got, act.GetBucketId().GetBucket()["api_key"]+" "+strategy(act))
	}
	if want := "idle tb 10/10 per 1s ttl 2s, new tb 10/10 per 1s ttl 2s"; strings.Join(got, ", ") != want {
		t.Errorf("actions %q, want %q (gone evicted, idle kept)", got, want)
	}
	if n, o := e.counter(t, "sluice_rlqs_evicted_total", "max_buckets"), e.counter(t, "sluice_rlqs_overflowed_total", "max_buckets"); n != 1 || o != 0 {
		t.Errorf("evicted %v and overflowed %v under max_buckets, want 1 and 0", n, o)
	}
}

// TestStreamsPerConnection is the regression test of one client connection
// that opens 500 idle streams: past --rlqs-max-streams-per-connection its
// new streams end at once with RESOURCE_EXHAUSTED naming the setting, and
// another connection's streams, open or new, are served.
func TestStreamsPerConnection(t *testing.T) {
	e := newEnv(t, testYAML, rlqs.Options{})
	victim := e.dial(t)
	open := func(c rlqsv3.RateLimitQuotaServiceClient) qstream {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		s, err := c.StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := open(victim)
	exchange(t, before, reports("d", usage(1, 0, "api_key", "v")))
	for range 500 {
		open(e.client)
	}
	waitFor(t, "the server to see the 500 streams", func() bool {
		return e.gauge(t, "sluice_rlqs_streams")+e.counter(t, "sluice_rlqs_refused_total", "max_streams")+
			e.counter(t, "sluice_rlqs_refused_total", "max_streams_per_connection") == 501
	})
	e.clock.Advance(time.Second)
	exchange(t, before, reports("d", usage(1, 0, "api_key", "v")))
	exchange(t, open(victim), reports("d", usage(1, 0, "api_key", "w")))
	if n := e.counter(t, "sluice_rlqs_refused_total", "max_streams_per_connection"); n != 500-rlqs.DefaultMaxStreamsPerConnection {
		t.Errorf("streams refused past max_streams_per_connection = %v, want %d", n, 500-rlqs.DefaultMaxStreamsPerConnection)
	}
	_, err := open(e.client).Recv()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "32 streams are open on this connection, the most --rlqs-max-streams-per-connection allows") {
		t.Errorf("one more stream on the connection of 500: %v, want RESOURCE_EXHAUSTED naming 32 and --rlqs-max-streams-per-connection", err)
	}
}

// TestMaxStreams: a stream past MaxStreams ends at once with
// RESOURCE_EXHAUSTED naming the bound and its setting; one that ends frees
// its place.
func TestMaxStreams(t *testing.T) {
	e := newEnv(t, testYAML, rlqs.Options{MaxStreams: 2})
	a, b := e.open(t), e.open(t)
	exchange(t, a, reports("d", usage(1, 0, "api_key", "k")))
	exchange(t, b, reports("d", usage(1, 0, "api_key", "k")))
	c := e.open(t)
	_ = c.Send(reports("d", usage(1, 0, "api_key", "k")))
	_, err := c.Recv()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "2 streams are open, the most --rlqs-max-streams allows") {
		t.Fatalf("third stream of 2 allowed: %v, want RESOURCE_EXHAUSTED naming 2 and --rlqs-max-streams", err)
	}
	if err := a.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Recv(); err == nil {
		t.Fatal("stream a did not end")
	}
	waitFor(t, "a's place freed", func() bool { return e.gauge(t, "sluice_rlqs_streams") == 1 })
	exchange(t, e.open(t), reports("d", usage(1, 0, "api_key", "k")))
}

// TestStreamMemory measures the live heap per open stream, one bucket each,
// on a gRPC server on loopback (the client's side of each stream counted
// too, so the server's share is less). It logs the figure (go test -run
// TestStreamMemory -v ./pkg/rlqs/) and fails over 64 KiB, the figure the
// README's worst case of --rlqs-max-streams uses.
func TestStreamMemory(t *testing.T) {
	const n = 200
	e := newEnv(t, testYAML, rlqs.Options{MaxStreamsPerConnection: n + 1})
	exchange(t, e.open(t), reports("d", usage(1, 0, "api_key", "warm")))
	before := liveHeap()
	for i := range n {
		exchange(t, e.open(t), reports("d", usage(1, 0, "api_key", strconv.Itoa(i))))
	}
	per := float64(liveHeap()-before) / n
	t.Logf("live heap per stream: %.0f bytes (%d streams, client and server)", per, n)
	if per > 64<<10 {
		t.Errorf("live heap per stream = %.0f bytes, over 64 KiB: correct the README's figure and the defaults", per)
	}
}

// liveHeap is the heap and goroutine stacks in use after a full
// collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}
