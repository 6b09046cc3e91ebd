package rlqs_test

import (
	"runtime"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/pkg/rlqs"
)

// TestMaxTotalBuckets: the buckets of all streams together are bounded; a
// new bucket past the bound is answered by the failure mode, untracked,
// and the bound frees with the buckets of a stream that ends.
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
	if want := "tb 10/10 per 1s ttl 10s, deny_all ttl 10s"; strings.Join(got, ", ") != want {
		t.Errorf("b's buckets past 4 in all: %q, want %q (the 5th by failure mode)", got, want)
	}
	if n := e.gauge(t, "sluice_rlqs_buckets"); n != 4 {
		t.Errorf("sluice_rlqs_buckets = %v, want 4", n)
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
	e := newEnv(t, testYAML, rlqs.Options{})
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
