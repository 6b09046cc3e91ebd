package rlqs_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
	"github.com/sluicehq/sluice/pkg/rlqs"
)

const testYAML = `domain: d
descriptors:
  - key: api_key
    rate_limit: {name: per_key, unit: second, requests_per_unit: 20}
    descriptors:
      - key: route
        value: search
        rate_limit: {name: search, unit: minute, requests_per_unit: 10}
  - key: internal
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /reports/*
    share_threshold: true
    rate_limit: {name: reports, unit: second, requests_per_unit: 30}
  - key: streams
    rate_limit: {algorithm: concurrency, unit: minute, requests_per_unit: 5}
  - key: tenant
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {unit: hour, requests_per_unit: 1000}
  - key: client
    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 50}
`

// env is a quota service on a real gRPC server on loopback, its memory
// store and clock.
type env struct {
	addr   string // the server's
	svc    *rlqs.Service
	shares *limiter.MemoryShares
	clock  *testclock.Clock
	client rlqsv3.RateLimitQuotaServiceClient
	reg    *prometheus.Registry
}

func newEnv(t *testing.T, yaml string, o rlqs.Options) *env {
	t.Helper()
	e := &env{clock: testclock.New(time.Unix(1_800_000_000, 0)), reg: prometheus.NewRegistry()}
	e.shares = limiter.NewMemoryShares(e.clock.Now)
	core := ratelimit.New(ratelimit.Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{})})
	if yaml != "" {
		cfg, err := descriptors.Parse(descriptors.Source{Name: "d.yaml", Data: []byte(yaml)})
		if err != nil {
			t.Fatal(err)
		}
		core.SetConfig(cfg)
	}
	m, err := rlqs.NewMetrics(e.reg)
	if err != nil {
		t.Fatal(err)
	}
	o.Decider, o.Metrics, o.Now = core, m, e.clock.Now
	if o.Store == nil {
		o.Store = e.shares
	}
	e.svc = rlqs.New(o)
	srv := grpc.NewServer(rlqs.TagConnections())
	rlqsv3.RegisterRateLimitQuotaServiceServer(srv, e.svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	e.addr = ln.Addr().String()
	t.Cleanup(func() {
		e.svc.Stop()
		srv.Stop()
		e.svc.Wait()
	})
	e.client = e.dial(t)
	return e
}

// dial opens a client connection of its own to the server, closed when the
// test ends.
func (e *env) dial(t *testing.T) rlqsv3.RateLimitQuotaServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlqsv3.NewRateLimitQuotaServiceClient(conn)
}

type qstream = grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]

func (e *env) open(t *testing.T) qstream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := e.client.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// usage is one BucketQuotaUsage: a bucket id as k, v pairs and counts.
func usage(allowed, denied uint64, kv ...string) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	id := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		id[kv[i]] = kv[i+1]
	}
	return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: id},
		TimeElapsed: durationpb.New(0), NumRequestsAllowed: allowed, NumRequestsDenied: denied}
}

func reports(domain string, us ...*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) *rlqsv3.RateLimitQuotaUsageReports {
	return &rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: us}
}

// exchange sends r on s and returns the response.
func exchange(t *testing.T, s qstream, r *rlqsv3.RateLimitQuotaUsageReports) *rlqsv3.RateLimitQuotaResponse {
	t.Helper()
	if err := s.Send(r); err != nil {
		t.Fatalf("Send: %v", err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	return resp
}

// strategy renders an action as text: "tb max/fill per interval",
// "allow_all", "deny_all" or "abandon", with the TTL.
func strategy(a *rlqsv3.RateLimitQuotaResponse_BucketAction) string {
	q := a.GetQuotaAssignmentAction()
	if q == nil {
		return "abandon"
	}
	ttl := q.GetAssignmentTimeToLive().AsDuration().String()
	if tb := q.GetRateLimitStrategy().GetTokenBucket(); tb != nil {
		return "tb " + itoa(tb.GetMaxTokens()) + "/" + itoa(tb.GetTokensPerFill().GetValue()) + " per " +
			tb.GetFillInterval().AsDuration().String() + " ttl " + ttl
	}
	if q.GetRateLimitStrategy().GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL {
		return "deny_all ttl " + ttl
	}
	return "allow_all ttl " + ttl
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// TestAssignments pins the action each kind of bucket gets on its first
// report, alone on the store.
func TestAssignments(t *testing.T) {
	e := newEnv(t, testYAML, rlqs.Options{})
	s := e.open(t)
	us := []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		usage(1, 0, "route", "search", "api_key", "alice"), // 10/min: the whole limit, 1 s of it at once
		usage(1, 0, "api_key", "alice"),                    // 20/s: demand 1 + 19/2 of headroom, 1 s of it at once
		usage(1, 0, "internal", "billing"),                 // unlimited
		usage(1, 0, "blocked", "x"),                        // requests_per_unit: 0
		usage(1, 0, "trial", "x"),                          // shadow mode
		usage(1, 0, "nothing", "x"),                        // no rule: Unmatched
		usage(1, 0, "streams", "x"),                        // concurrency: requests in flight, not enforceable
		usage(1, 0, "tenant", "x"),                         // 10/s and 1000/h: the hour's rate, the smaller capacity
		usage(1, 0, "client", "x"),                         // token_bucket of 10/s: 1 + 9/2, the same part of its burst of 50
	}
	want := []string{
		"tb 1/10 per 1m0s ttl 10s",
		"tb 10/10 per 1s ttl 10s",
		"allow_all ttl 10s",
		"deny_all ttl 10s",
		"allow_all ttl 10s",
		"allow_all ttl 10s",
		"allow_all ttl 10s",
		"tb 1/1000 per 1h0m0s ttl 10s",
		"tb 25/5 per 1s ttl 10s",
	}
	resp := exchange(t, s, reports("d", us...))
	if len(resp.GetBucketAction()) != len(want) {
		t.Fatalf("%d actions for %d buckets: %v", len(resp.GetBucketAction()), len(want), resp)
	}
	for i, a := range resp.GetBucketAction() {
		if !proto.Equal(a.GetBucketId(), us[i].GetBucketId()) {
			t.Errorf("action %d is for %v, want %v (report order)", i, a.GetBucketId(), us[i].GetBucketId())
		}
		if got := strategy(a); got != want[i] {
			t.Errorf("bucket %v: %s, want %s", us[i].GetBucketId().GetBucket(), got, want[i])
		}
	}
	if got := e.gauge(t, "sluice_rlqs_buckets"); got != 9 {
		t.Errorf("sluice_rlqs_buckets = %v, want 9", got)
	}
	if got := e.shares.Len(); got != 5 {
		t.Errorf("holdings = %d, want 5 (search, per_key, tenant's two limits, client)", got)
	}
}

// TestUnmatchedDeny checks Options.Unmatched and that a domain's failure
// mode does not change how a bucket without a rule is answered.
func TestUnmatchedDeny(t *testing.T) {
	e := newEnv(t, testYAML, rlqs.Options{Unmatched: rlqs.DenyAll, AssignmentTTL: 3 * time.Second})
	resp := exchange(t, e.open(t), reports("d", usage(1, 0, "nothing", "x")))
	if got := strategy(resp.GetBucketAction()[0]); got != "deny_all ttl 3s" {
		t.Errorf("unmatched bucket: %s, want deny_all ttl 3s", got)
	}
}

// gauge reads the gauge called name from the env's registry.
func (e *env) gauge(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// counter reads the counter called name whose one label has value label.
func (e *env) counter(t *testing.T, name, label string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// tokens is the share (tokens_per_fill) of a token bucket action, 0 for
// DENY_ALL, and fails the test on anything else.
func tokens(t *testing.T, a *rlqsv3.RateLimitQuotaResponse_BucketAction) uint32 {
	t.Helper()
	st := a.GetQuotaAssignmentAction().GetRateLimitStrategy()
	if tb := st.GetTokenBucket(); tb != nil {
		return tb.GetTokensPerFill().GetValue()
	}
	if st.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL {
		return 0
	}
	t.Fatalf("action %v is neither a token bucket nor DENY_ALL", a)
	return 0
}

// TestSharesFollowDemand has two streams report the same bucket every
// second with 30 and 10 requests against a limit of 20/s: they end with 15
// and 5. When one closes, its share is released at once and the other gets
// its demand and half the headroom (the other half kept for a stream that
// joins) at its next report.
func TestSharesFollowDemand(t *testing.T) {
	e := newEnv(t, testYAML, rlqs.Options{})
	a, b := e.open(t), e.open(t)
	var sa, sb uint32
	for range 6 {
		e.clock.Advance(time.Second)
		sa = tokens(t, exchange(t, a, reports("d", usage(20, 10, "api_key", "k"))).GetBucketAction()[0])
		sb = tokens(t, exchange(t, b, reports("d", usage(5, 5, "api_key", "k"))).GetBucketAction()[0])
		if sa+sb > 20 {
			t.Fatalf("shares %d + %d > limit 20", sa, sb)
		}
	}
	if sa != 15 || sb != 5 {
		t.Errorf("shares after 6 s = %d and %d, want 15 and 5 (20 split 30:10)", sa, sb)
	}
	if got := e.shares.Len(); got != 2 {
		t.Errorf("holdings = %d, want 2", got)
	}
	if err := a.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Recv(); err == nil {
		t.Fatal("stream a did not end")
	}
	waitFor(t, "a's holding released", func() bool { return e.shares.Len() == 1 })
	e.clock.Advance(time.Second)
	if got := tokens(t, exchange(t, b, reports("d", usage(5, 5, "api_key", "k"))).GetBucketAction()[0]); got != 15 {
		t.Errorf("b's share after a closed = %d, want 15 (10 + 10/2)", got)
	}
}

// TestNewcomerUnderLimit: while the fleet's demand is under the limit, a
// stream that joins gets a token bucket at once, from the part of the
// headroom kept free, not DENY_ALL until the others report again (a new
// Envoy in a scale-up would answer 429 to all of that bucket's traffic for a
// reporting interval).
func TestNewcomerUnderLimit(t *testing.T) {
	e := newEnv(t, testYAML, rlqs.Options{})
	a, b := e.open(t), e.open(t)
	var sa, sb uint32
	for range 3 {
		e.clock.Advance(time.Second)
		sa = tokens(t, exchange(t, a, reports("d", usage(5, 0, "api_key", "k"))).GetBucketAction()[0])
	}
	if sa != 12 {
		t.Fatalf("a alone at 5/s of 20/s: %d, want 12 (5 + 15/2)", sa)
	}
	sb = tokens(t, exchange(t, b, reports("d", usage(5, 0, "api_key", "k"))).GetBucketAction()[0])
	if sb != 8 {
		t.Fatalf("b's first share: %d, want 8 (5 + 10/3, what a left free)", sb)
	}
	for range 3 {
		e.clock.Advance(time.Second)
		sa = tokens(t, exchange(t, a, reports("d", usage(5, 0, "api_key", "k"))).GetBucketAction()[0])
		sb = tokens(t, exchange(t, b, reports("d", usage(5, 0, "api_key", "k"))).GetBucketAction()[0])
		if sa+sb > 20 {
			t.Fatalf("shares %d + %d > limit 20", sa, sb)
		}
	}
	if sa != 8 || sb != 8 {
		t.Errorf("shares = %d and %d, want 8 and 8 (5 + 10/3 each, 4 kept free)", sa, sb)
	}
}

// waitFor polls cond for up to 5 s: the server handles a closed stream
// after the client has seen it end.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSilentStreamReclaimed: a stream that stops reporting but stays open
// keeps its share for the assignment TTL and half a second, then the
// others get it.
func TestSilentStreamReclaimed(t *testing.T) {
	e := newEnv(t, testYAML, rlqs.Options{AssignmentTTL: 2 * time.Second})
	a, b := e.open(t), e.open(t)
	for range 3 {
		e.clock.Advance(time.Second)
		exchange(t, a, reports("d", usage(10, 0, "api_key", "k")))
		exchange(t, b, reports("d", usage(10, 0, "api_key", "k")))
	}
	e.clock.Advance(2*time.Second + 400*time.Millisecond) // a's hold: 2.5 s after its last report
	if got := tokens(t, exchange(t, b, reports("d", usage(10, 0, "api_key", "k"))).GetBucketAction()[0]); got > 10 {
		t.Errorf("b's share while a's hold lasts = %d, want at most 10 (a holds the other 10)", got)
	}
	e.clock.Advance(100 * time.Millisecond)
	if got := tokens(t, exchange(t, b, reports("d", usage(10, 0, "api_key", "k"))).GetBucketAction()[0]); got != 20 {
		t.Errorf("b's share after a's hold = %d, want all 20", got)
	}
}

// TestIdleBucketAbandoned: a bucket reported without requests for
// IdleAfter is abandoned and its holding released; reported again, it is
// a new bucket.
func TestIdleBucketAbandoned(t *testing.T) {
	e := newEnv(t, testYAML, rlqs.Options{IdleAfter: 3 * time.Second})
	s := e.open(t)
	exchange(t, s, reports("d", usage(1, 0, "api_key", "k"), usage(1, 0, "internal", "i")))
	var got []string
	for range 4 {
		e.clock.Advance(time.Second)
		resp := exchange(t, s, reports("d", usage(0, 0, "api_key", "k"), usage(1, 0, "internal", "i")))
		got = append(got, strategy(resp.GetBucketAction()[0]))
	}
	// Idle since the report at 1 s: abandoned at 4 s.
	want := []string{"tb 10/10 per 1s ttl 10s", "tb 10/10 per 1s ttl 10s", "tb 10/10 per 1s ttl 10s", "abandon"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("actions =\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
	if n := e.shares.Len(); n != 0 {
		t.Errorf("holdings after the abandon = %d, want 0", n)
	}
	resp := exchange(t, s, reports("d", usage(1, 0, "api_key", "k")))
	if got := strategy(resp.GetBucketAction()[0]); got != "tb 10/10 per 1s ttl 10s" {
		t.Errorf("the abandoned bucket reported again: %s, want a new assignment", got)
	}
}

// TestShareThresholdBuckets: buckets that one share_threshold rule counts
// together hold one share per stream, split by their demand.
func TestShareThresholdBuckets(t *testing.T) {
	e := newEnv(t, testYAML, rlqs.Options{})
	s := e.open(t)
	var resp *rlqsv3.RateLimitQuotaResponse
	for range 3 {
		e.clock.Advance(time.Second)
		resp = exchange(t, s, reports("d", usage(20, 0, "path", "/reports/a"), usage(10, 0, "path", "/reports/b")))
	}
	a, b := tokens(t, resp.GetBucketAction()[0]), tokens(t, resp.GetBucketAction()[1])
	if a != 20 || b != 10 {
		t.Errorf("parts of the shared 30/s = %d and %d, want 20 and 10", a, b)
	}
	if n := e.shares.Len(); n != 1 {
		t.Errorf("holdings = %d, want 1 for both buckets", n)
	}
}

// TestBadReports: each report Envoy could not send ends the stream with
// INVALID_ARGUMENT naming the field, changes nothing, and frees the
// stream's state.
func TestBadReports(t *testing.T) {
	long := strings.Repeat("k", rlqs.DefaultMaxKeyBytes+1)
	many := []string{}
	for i := range rlqs.DefaultMaxEntries + 1 {
		many = append(many, "k"+strconv.Itoa(i), "v")
	}
	negative := usage(1, 0, "api_key", "k")
	negative.TimeElapsed = &durationpb.Duration{Seconds: -1}
	badNanos := usage(1, 0, "api_key", "k")
	badNanos.TimeElapsed = &durationpb.Duration{Nanos: 2e9}
	for _, tc := range []struct {
		name   string
		first  string // domain of the valid first report, "" for none
		report *rlqsv3.RateLimitQuotaUsageReports
		want   string // message prefix
	}{
		{"no domain", "", reports("", usage(1, 0, "api_key", "k")), "domain: must not be empty"},
		{"unknown domain", "", reports("other", usage(1, 0, "api_key", "k")), `domain: unknown domain "other"`},
		{"domain changes", "d", reports("e", usage(1, 0, "api_key", "k")), `domain: "e" differs from the stream's domain "d"`},
		{"no bucket id", "", reports("d", &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{}), "bucket_quota_usages[0].bucket_id.bucket: must hold at least one key"},
		{"empty bucket id", "", reports("d", usage(1, 0, "api_key", "k"), usage(1, 0)), "bucket_quota_usages[1].bucket_id.bucket: must hold at least one key"},
		{"empty key", "", reports("d", usage(1, 0, "", "v")), `bucket_quota_usages[0].bucket_id.bucket: key "": want 1 to 256 bytes`},
		{"long key", "", reports("d", usage(1, 0, long, "v")), "bucket_quota_usages[0].bucket_id.bucket: key"},
		{"too many keys", "", reports("d", usage(1, 0, many...)), "bucket_quota_usages[0].bucket_id.bucket: 33 keys, more than the maximum 32"},
		{"absurd allowed", "", reports("d", usage(1<<41, 0, "api_key", "k")), "bucket_quota_usages[0].num_requests_allowed: 2199023255552 requests"},
		{"absurd denied", "", reports("d", usage(0, ^uint64(0), "api_key", "k")), "bucket_quota_usages[0].num_requests_denied: 18446744073709551615 requests"},
		{"negative time", "", reports("d", negative), "bucket_quota_usages[0].time_elapsed: -1s 0ns"},
		{"invalid time", "", reports("d", badNanos), "bucket_quota_usages[0].time_elapsed: 0s 2000000000ns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, testYAML, rlqs.Options{})
			s := e.open(t)
			if tc.first != "" {
				exchange(t, s, reports(tc.first, usage(1, 0, "api_key", "k")))
			}
			if err := s.Send(tc.report); err != nil {
				t.Fatal(err)
			}
			_, err := s.Recv()
			if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tc.want) {
				t.Errorf("stream ended with %v, want INVALID_ARGUMENT %q...", err, tc.want)
			}
			waitFor(t, "the stream's state freed", func() bool {
				return e.shares.Len() == 0 && e.gauge(t, "sluice_rlqs_streams") == 0 &&
					e.gauge(t, "sluice_rlqs_buckets") == 0
			})
		})
	}
}

// TestNoConfig: while no config is loaded a stream ends UNAVAILABLE.
func TestNoConfig(t *testing.T) {
	e := newEnv(t, "", rlqs.Options{})
	s := e.open(t)
	if err := s.Send(reports("d", usage(1, 0, "api_key", "k"))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("stream ended with %v, want UNAVAILABLE", err)
	}
}

// TestEmptyReport: Envoy reports with no bucket once it has abandoned them
// all; that is no error and needs no answer.
func TestEmptyReport(t *testing.T) {
	e := newEnv(t, testYAML, rlqs.Options{})
	s := e.open(t)
	if err := s.Send(reports("d")); err != nil {
		t.Fatal(err)
	}
	resp := exchange(t, s, reports("", usage(1, 0, "internal", "i"))) // the domain may be left out after the first report
	if len(resp.GetBucketAction()) != 1 {
		t.Errorf("response to the report after an empty one: %v", resp)
	}
}

// failingStore fails every call.
type failingStore struct{}

func (failingStore) Share(context.Context, []limiter.Claim) ([]limiter.Share, error) {
	return nil, errors.Join(limiter.ErrStoreUnavailable, errors.New("down"))
}
func (failingStore) Release(context.Context, []limiter.Claim) error {
	return limiter.ErrStoreUnavailable
}

// TestStoreFailure: when the store fails, the domain's failure mode answers
// the shared buckets and the stream goes on; other buckets are answered as
// usual. A bucket past MaxBuckets is not answered by the failure mode (an
// end client filling the bound would make every new bucket take it): its
// rule answers, a shared limit from the rule's overflow share.
func TestStoreFailure(t *testing.T) {
	for _, tc := range []struct {
		mode string
		want string // the shared bucket's action, "" for none
	}{
		{"allow", "allow_all ttl 10s"},
		{"deny", "deny_all ttl 10s"},
		{"error", ""},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			e := newEnv(t, testYAML+"failure_mode: "+tc.mode+"\n", rlqs.Options{Store: failingStore{}})
			s := e.open(t)
			for range 2 {
				resp := exchange(t, s, reports("d", usage(1, 0, "api_key", "k"), usage(1, 0, "internal", "i")))
				var got []string
				for _, a := range resp.GetBucketAction() {
					got = append(got, a.GetBucketId().GetBucket()["api_key"]+strategy(a))
				}
				want := []string{"allow_all ttl 10s"}
				if tc.want != "" {
					want = []string{"k" + tc.want, "allow_all ttl 10s"}
				}
				if strings.Join(got, ", ") != strings.Join(want, ", ") {
					t.Errorf("actions %q, want %q", got, want)
				}
			}
		})
		t.Run(tc.mode+"/past max buckets", func(t *testing.T) {
			e := newEnv(t, testYAML+"failure_mode: "+tc.mode+"\n", rlqs.Options{MaxBuckets: 1})
			resp := exchange(t, e.open(t), reports("d", usage(1, 0, "internal", "i"), usage(1, 0, "blocked", "x"),
				usage(1, 0, "internal", "i"), usage(1, 0, "api_key", "k")))
			var got []string
			for _, a := range resp.GetBucketAction() {
				got = append(got, strategy(a))
			}
			want := "allow_all ttl 10s, deny_all ttl 10s, tb 10/10 per 1s ttl 10s"
			if strings.Join(got, ", ") != want {
				t.Errorf("actions %q, want %q (the tracked bucket once, those past the maximum by their rules, never by the failure mode)", got, want)
			}
		})
	}
}

// TestStop: Stop ends open streams with UNAVAILABLE and releases their
// shares.
func TestStop(t *testing.T) {
	e := newEnv(t, testYAML, rlqs.Options{})
	s := e.open(t)
	exchange(t, s, reports("d", usage(1, 0, "api_key", "k")))
	e.svc.Stop()
	if _, err := s.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("stream ended with %v, want UNAVAILABLE", err)
	}
	waitFor(t, "shares released", func() bool { return e.shares.Len() == 0 })
}

// TestCancelledStreamFreed: a stream that Envoy cancels (or whose
// connection drops) releases its shares and its state at once, whichever of
// the handler and its reader sees the end first.
func TestCancelledStreamFreed(t *testing.T) {
	e := newEnv(t, testYAML, rlqs.Options{})
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		s, err := e.client.StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		exchange(t, s, reports("d", usage(1, 0, "api_key", "k")))
		cancel()
		waitFor(t, "the cancelled stream freed", func() bool {
			return e.shares.Len() == 0 && e.gauge(t, "sluice_rlqs_streams") == 0 && e.gauge(t, "sluice_rlqs_buckets") == 0
		})
	}
}
