package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestReportCountsErrorsApart checks that failed calls are no decisions:
// decisions/s counts the calls answered with a decision, and errors have a
// rate of their own (a run against a server that was down printed 108k
// decisions/s at 94.9% errors).
func TestReportCountsErrorsApart(t *testing.T) {
	o := &options{Descriptors: 3, Concurrency: 2, Connections: 1}
	a, b := &worker{}, &worker{}
	a.t = tally{ok: 40, over: 8, unknown: 2, errs: map[codes.Code]int64{codes.Unavailable: 900}}
	b.t = tally{ok: 50, errs: map[codes.Code]int64{codes.Unavailable: 90, codes.DeadlineExceeded: 10}}
	for _, w := range []*worker{a, b} {
		w.t.lat.record(time.Millisecond)
	}
	r := newReport(o, []*worker{a, b}, 2*time.Second)
	if r.Requests != 1100 || r.Decisions != 100 || r.ErrorTotal != 1000 {
		t.Errorf("requests %d, decisions %d, errors %d; want 1100, 100 and 1000", r.Requests, r.Decisions, r.ErrorTotal)
	}
	if r.DecisionsPerSec != 50 || r.DescriptorsPerSec != 150 || r.ErrorsPerSec != 500 {
		t.Errorf("decisions/s %v, descriptors/s %v, errors/s %v; want 50, 150 and 500", r.DecisionsPerSec, r.DescriptorsPerSec, r.ErrorsPerSec)
	}
	var text bytes.Buffer
	r.writeText(&text)
	for _, want := range []string{
		"decisions   100 (50/s, 150 descriptors/s) of 1100 calls\n",
		"errors 1000 (90.91%)",
		"errors      500/s, not decisions: DeadlineExceeded 10, Unavailable 990\n",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("report text lacks %q:\n%s", want, text.String())
		}
	}
}

// failingServer answers one call in every 20 with OK and fails the rest
// with UNAVAILABLE, as Sluice does when its store is down and the domain
// fails with an error.
type failingServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	calls atomic.Int64
}

func (s *failingServer) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if s.calls.Add(1)%20 != 1 {
		return nil, status.Error(codes.Unavailable, "store unavailable")
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// TestFailingServerMakesFewDecisions runs loadgen against a server that
// fails 19 calls in 20 at once: the decisions per second are the answered
// calls' alone, a twentieth of the calls.
func TestFailingServerMakesFewDecisions(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, &failingServer{})
	go srv.Serve(l)
	defer srv.Stop()

	var stdout, stderr bytes.Buffer
	// A count of calls, not a duration: a loaded machine makes fewer calls
	// in a given time, and the shares below need a few hundred.
	args := []string{"-target", l.Addr().String(), "-json", "-requests", "400", "-warmup", "0s", "-concurrency", "4"}
	if code := cli(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("cli(%q) = %d, stderr: %s", args, code, stderr.String())
	}
	var r Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, stdout.String())
	}
	if r.Requests < 400 || r.Errors["Unavailable"] != r.ErrorTotal || r.Decisions != r.OK || r.Requests != r.Decisions+r.ErrorTotal {
		t.Fatalf("requests %d: OK %d, decisions %d, errors %v (total %d); want at least 400, every error Unavailable, every decision OK",
			r.Requests, r.OK, r.Decisions, r.Errors, r.ErrorTotal)
	}
	if share := float64(r.Decisions) / float64(r.Requests); share < 0.04 || share > 0.06 {
		t.Errorf("decisions are %.3f of the calls, want the server's 1 in 20", share)
	}
	if got, want := r.DecisionsPerSec*r.ElapsedSec, float64(r.Decisions); got < want-0.5 || got > want+0.5 {
		t.Errorf("decisions/s %.1f over %.3f s makes %.1f decisions, want the %d answered (not the %d calls)",
			r.DecisionsPerSec, r.ElapsedSec, got, r.Decisions, r.Requests)
	}
	if got, want := r.ErrorsPerSec*r.ElapsedSec, float64(r.ErrorTotal); got < want-0.5 || got > want+0.5 {
		t.Errorf("errors/s %.1f over %.3f s makes %.1f, want the %d errors", r.ErrorsPerSec, r.ElapsedSec, got, r.ErrorTotal)
	}
}

// TestReportCountsErrorKinds checks that errors are also counted by code and
// message with digits masked, so that a run's errors say where they came
// from (a store timeout, a shed call) while messages that differ only in a
// duration count together.
func TestReportCountsErrorKinds(t *testing.T) {
	w := newWorker(&options{Descriptors: 1, EntryKeys: []string{"d0"}, Keys: 1, Skew: "uniform"}, nil, 0)
	w.t.lat.record(time.Millisecond)
	for _, err := range []error{
		status.Error(codes.Unavailable, "redis: not sent to redis: the deadline leaves 1.2ms, less than a round trip (3ms)"),
		status.Error(codes.Unavailable, "redis: not sent to redis: the deadline leaves 15µs, less than a round trip (350µs)"),
		status.Error(codes.DeadlineExceeded, "context deadline exceeded"),
	} {
		w.t.errs[status.Code(err)]++
		w.t.msgs[errorKind(err)]++
	}
	r := newReport(&options{Descriptors: 1}, []*worker{w}, time.Second)
	want := map[string]int64{
		"Unavailable: redis: not sent to redis: the deadline leaves #.#ms, less than a round trip (#ms)": 1,
		"Unavailable: redis: not sent to redis: the deadline leaves #µs, less than a round trip (#µs)":   1,
		"DeadlineExceeded: context deadline exceeded":                                                    1,
	}
	if len(r.ErrorKinds) != len(want) {
		t.Errorf("error kinds %v; want %v", r.ErrorKinds, want)
	}
	for k, n := range want {
		if r.ErrorKinds[k] != n {
			t.Errorf("error kind %q counted %d; want %d (all: %v)", k, r.ErrorKinds[k], n, r.ErrorKinds)
		}
	}
	var text bytes.Buffer
	r.writeText(&text)
	if !strings.Contains(text.String(), "            1 x DeadlineExceeded: context deadline exceeded\n") {
		t.Errorf("report text lacks the error kinds:\n%s", text.String())
	}
}
