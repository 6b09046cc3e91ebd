package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pkg/rlqs"
)

// quotaYAML is the config of the quota tests: the bucket
// {route: search, api_key: <key>} is the descriptor [api_key, route=search]
// by the tree's key order, 100 requests a second.
const quotaYAML = `domain: quota
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 100000}
    descriptors:
      - key: route
        value: search
        rate_limit: {name: search, unit: second, requests_per_unit: 100}
`

const (
	quotaLimit = 100                    // requests per second, quotaYAML's
	reportsPer = 200 * time.Millisecond // the Envoys' reporting interval
)

// startQuotaSluice starts a Sluice on the quota config and Redis prefix, with
// one-second assignments and bursts of one reporting interval.
func startQuotaSluice(t *testing.T, redisAddr, prefix string) *sluice {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "quota.yaml"), []byte(quotaYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	return startSluice(t, "--config", dir, "--redis-url", "redis://"+redisAddr+"/0", "--redis-prefix", prefix,
		"--rlqs-assignment-ttl", "1s", "--rlqs-burst", reportsPer.String(), "--store-timeout", "500ms")
}

// TestQuotaFleet runs three emulated Envoys with unequal demand (150, 75 and
// 25 requests a second) on one bucket whose limit is 100 a second, two on
// one Sluice and one on a second Sluice sharing the Redis. The fleet admits
// at most the limit plus one reporting interval's worth in every window,
// and nearly all of it; shares follow demand (60, 30, 10) whichever instance
// assigns them; a killed Envoy's share goes to the others at once; a hung
// Envoy's share is reclaimed after the assignment TTL.
func TestQuotaFleet(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := redistest.Prefix(t.Name())
	a, b := startQuotaSluice(t, addr, prefix), startQuotaSluice(t, addr, prefix)
	bucket := map[string]string{"route": "search", "api_key": "acme"}
	e1 := startQuotaEnvoy(t, a, "e1", 150, reportsPer, "quota", bucket)
	e2 := startQuotaEnvoy(t, a, "e2", 75, reportsPer, "quota", bucket)
	e3 := startQuotaEnvoy(t, b, "e3", 25, reportsPer, "quota", bucket)

	// The shares settle within a few reports; then token buckets started
	// on the way may still be full, so the windows are counted a second
	// later.
	waitShares(t, "three envoys", map[*quotaEnvoy]int{e1: 60, e2: 30, e3: 10}, 10*time.Second)
	time.Sleep(time.Second)
	checkWindows(t, "three envoys", []*quotaEnvoy{e1, e2, e3}, 3)
	checkShares(t, "three envoys", map[*quotaEnvoy]int{e1: 60, e2: 30, e3: 10})
	if hs := quotaHoldings(t, addr, prefix); len(hs) != 3 || sum(hs) > quotaLimit {
		t.Errorf("holdings in Redis = %v, want 3 streams (both instances) sharing at most %d", hs, quotaLimit)
	}

	e1.kill() // its stream ends: its share is released at once
	waitShares(t, "after e1 was killed", map[*quotaEnvoy]int{e2: 75, e3: 25}, 2*time.Second)
	time.Sleep(time.Second)
	checkWindows(t, "after e1 was killed", []*quotaEnvoy{e2, e3}, 2)

	e3.hang() // its stream stays open, silent: its share lasts the TTL + 0.5 s
	took := waitShares(t, "after e3 hung", map[*quotaEnvoy]int{e2: quotaLimit}, 3*time.Second)
	if took < time.Second {
		t.Errorf("e3's share went to e2 %v after e3 hung, before its 1 s assignment ended", took)
	}
	if hs := quotaHoldings(t, addr, prefix); len(hs) != 1 {
		t.Errorf("holdings in Redis after e3's hold = %v, want e2's only", hs)
	}
	for _, e := range []*quotaEnvoy{e2, e3} {
		if err := e.err(); err != nil {
			t.Errorf("%s's stream ended: %v", e.name, err)
		}
	}
}

// waitShares waits until each Envoy's share is within 20% (and 2) of want,
// and returns how long that took; it fails the test after within.
func waitShares(t *testing.T, what string, want map[*quotaEnvoy]int, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if !eventually(within, 10*time.Millisecond, func() bool {
		for e, w := range want {
			if d := e.share() - w; d > w/5+2 || -d > w/5+2 {
				return false
			}
		}
		return true
	}) {
		checkShares(t, what, want)
		t.FailNow()
	}
	t.Logf("%s: shares settled in %v", what, time.Since(start).Round(time.Millisecond))
	return time.Since(start)
}

// checkWindows waits for the next n whole seconds (the rule's windows) to
// pass and requires the fleet to admit, in each, at most the limit plus one
// reporting interval's worth plus one request per Envoy (each one's token
// bucket may be full as the window starts), and at least 80% of the limit.
func checkWindows(t *testing.T, what string, fleet []*quotaEnvoy, n int) {
	t.Helper()
	start := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(start.Add(time.Duration(n)*time.Second + 50*time.Millisecond)))
	most := quotaLimit + int(quotaLimit*reportsPer/time.Second) + len(fleet)
	for w := range n {
		from := start.Add(time.Duration(w) * time.Second)
		got, parts := 0, []string{}
		for _, e := range fleet {
			k := e.admittedIn(from, from.Add(time.Second))
			got += k
			parts = append(parts, fmt.Sprintf("%s %d", e.name, k))
		}
		t.Logf("%s: window %s admitted %d (%s)", what, from.Format("15:04:05"), got, strings.Join(parts, ", "))
		if got > most || got < quotaLimit*8/10 {
			t.Errorf("%s: window %s admitted %d (%s), want %d to %d", what, from.Format("15:04:05"), got,
				strings.Join(parts, ", "), quotaLimit*8/10, most)
		}
	}
}

// checkShares requires each Envoy's share to be within 20% (and 2) of
// want, and the shares to add up to at most the limit.
func checkShares(t *testing.T, what string, want map[*quotaEnvoy]int) {
	t.Helper()
	total := 0
	for e, w := range want {
		got := e.share()
		total += max(got, 0)
		if d := got - w; d > w/5+2 || -d > w/5+2 {
			t.Errorf("%s: %s's share = %d, want about %d", what, e.name, got, w)
		}
	}
	if total > quotaLimit {
		t.Errorf("%s: shares add up to %d, over the limit %d", what, total, quotaLimit)
	}
}

// quotaHoldings reads the shares every stream holds of the quota bucket's
// limit, from the one shared-limit hash under prefix.
func quotaHoldings(t *testing.T, addr, prefix string) []int {
	t.Helper()
	keys, err := redistest.Do(addr, "KEYS", prefix+"{rlqs:*")
	if err != nil {
		t.Fatal(err)
	}
	ks, _ := keys.([]any)
	if len(ks) != 1 {
		t.Fatalf("shared-limit keys under %s: %v, want one", prefix, keys)
	}
	fields, err := redistest.Do(addr, "HVALS", ks[0].(string))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range fields.([]any) {
		share, _, _ := strings.Cut(f.(string), ":")
		n, _ := strconv.Atoi(share)
		out = append(out, n)
	}
	return out
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// TestQuotaBadReports sends reports no Envoy sends to the binary: each ends
// its stream with INVALID_ARGUMENT naming the field, the process keeps
// serving, and a bucket id holding bytes that are not UTF-8 (a header an end
// client sent) is assigned like any other.
func TestQuotaBadReports(t *testing.T) {
	s := startSluice(t, "--config", "config")
	client := rlqsv3.NewRateLimitQuotaServiceClient(s.Conn)
	usage := func(allowed uint64, kv ...string) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
		id := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			id[kv[i]] = kv[i+1]
		}
		return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: id},
			TimeElapsed: durationpb.New(0), NumRequestsAllowed: allowed}
	}
	for _, tc := range []struct {
		report *rlqsv3.RateLimitQuotaUsageReports
		want   string
	}{
		{&rlqsv3.RateLimitQuotaUsageReports{Domain: "nope", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(1, "api_key", "a")}},
			`domain: unknown domain "nope"`},
		{&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(1)}},
			"bucket_quota_usages[0].bucket_id.bucket: must hold at least one key"},
		{&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(1<<50, "api_key", "a")}},
			"bucket_quota_usages[0].num_requests_allowed: 1125899906842624 requests in one report"},
	} {
		stream, err := client.StreamRateLimitQuotas(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(tc.report); err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tc.want) {
			t.Errorf("stream ended with %v, want INVALID_ARGUMENT %q...", err, tc.want)
		}
	}

	// The standard codec cannot encode a bucket id that is not UTF-8: the
	// client sends it with rlqs.Codec, as Envoy's C++ encoder does.
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rlqs.Codec(encoding.GetCodecV2(grpcproto.Name)))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	report := &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		usage(1, "api_key", "caf\xe9")}}
	if err := stream.Send(report); err != nil {
		t.Fatal(err)
	}
	got, err := stream.Recv()
	if err != nil || len(got.GetBucketAction()) != 1 || got.GetBucketAction()[0].GetBucketId().GetBucket()["api_key"] != "caf\xe9" ||
		got.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetTokensPerFill().GetValue() != 80 {
		t.Errorf("report for a bucket id that is not UTF-8: %v, %v; want its per_api_key share, 80 of 100/min (its demand, 60, and half the headroom)", got, err)
	}
	if r := s.call(t, "edge", []string{"api_key", "after"}); r.GetOverallCode().String() != "OK" {
		t.Errorf("ShouldRateLimit after the bad streams: %v", r)
	}
}

// manyBuckets is a report of n buckets {route: search, api_key: <prefix><i>}
// of domain quota, each its own limit, one request each.
func manyBuckets(prefix string, n int) *rlqsv3.RateLimitQuotaUsageReports {
	r := &rlqsv3.RateLimitQuotaUsageReports{Domain: "quota"}
	for i := range n {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:    &rlqsv3.BucketId{Bucket: map[string]string{"route": "search", "api_key": fmt.Sprintf("%s%040d", prefix, i)}},
			TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: 1})
	}
	return r
}

// quotaExchange opens a stream on s, sends r and returns the response, or
// the error that ended the stream.
func quotaExchange(t *testing.T, s *sluice, r *rlqsv3.RateLimitQuotaUsageReports) (*rlqsv3.RateLimitQuotaResponse, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(s.Conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A stream the server ends at once (over --rlqs-max-streams) can fail
	// the Send with io.EOF; its status then comes from Recv.
	if err := stream.Send(r); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return stream.Recv()
}

// TestQuotaGlobalBounds: the binary bounds the buckets of all streams
// together (--rlqs-max-total-buckets) and the streams
// (--rlqs-max-streams). A new bucket past the total, with no idle bucket
// to take the place of, is answered from its rule's overflow limit (never
// by the failure mode, deny here): each stream's over-bound buckets get
// its whole share of it, and the shares of two streams add up to at most
// the rule's limit. A stream past the bound ends with RESOURCE_EXHAUSTED
// naming the setting, and both are counted.
func TestQuotaGlobalBounds(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "quota.yaml"), []byte(quotaYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startSluice(t, "--config", dir, "--redis-url", "redis://"+redistest.Addr(t)+"/0",
		"--redis-prefix", redistest.Prefix(t.Name()), "--failure-mode", "deny",
		"--rlqs-max-buckets", "5", "--rlqs-max-total-buckets", "8", "--rlqs-max-streams", "3")
	var over []uint32 // the fill of stream 1's and 2's buckets past the total
	for i, tracked := range []int{5, 3, 0} {
		resp, err := quotaExchange(t, s, manyBuckets(strconv.Itoa(i)+"-", 5))
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		fills := quotaFills(resp)
		if len(fills) != 5 || slices.Contains(fills, 0) {
			t.Fatalf("stream %d, 5 new buckets, 8 at most in all: fills %v, want 5 token buckets", i, fills)
		}
		if tracked < 5 {
			over = append(over, fills[4])
			for _, f := range fills[tracked:] {
				if f != fills[4] {
					t.Errorf("stream %d's buckets past the bound: fills %v, want one share each", i, fills[tracked:])
				}
			}
		}
	}
	if over[0]+over[1] > quotaLimit {
		t.Errorf("overflow shares of streams 1 and 2 = %v, more than the limit %d together", over, quotaLimit)
	}
	_, err := quotaExchange(t, s, manyBuckets("x-", 1))
	if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "3 streams are open, the most --rlqs-max-streams allows") {
		t.Errorf("a 4th stream of 3 allowed: %v, want RESOURCE_EXHAUSTED naming 3 and --rlqs-max-streams", err)
	}
	m := metrics(t, s)
	if got := m[`sluice_rlqs_buckets`]; got != 8 {
		t.Errorf("sluice_rlqs_buckets = %v, want 8", got)
	}
	if b, st := m[`sluice_rlqs_overflowed_total{bound="max_total_buckets"}`], m[`sluice_rlqs_refused_total{bound="max_streams"}`]; b != 7 || st != 1 {
		t.Errorf("overflowed %v buckets, refused %v streams, want 7 and 1", b, st)
	}
	if r := s.call(t, "quota", []string{"api_key", "after"}); r.GetOverallCode().String() != "OK" {
		t.Errorf("ShouldRateLimit beside full quota streams: %v", r)
	}
}

// quotaFills is the tokens_per_fill of each action of resp, in order: 0
// for anything but a token bucket.
func quotaFills(resp *rlqsv3.RateLimitQuotaResponse) []uint32 {
	var out []uint32
	for _, a := range resp.GetBucketAction() {
		out = append(out, a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetTokensPerFill().GetValue())
	}
	return out
}

// TestQuotaOneClientFillsBound is the regression test, against the binary,
// of an end client that fills --rlqs-max-buckets with buckets built from
// its own header values (api_key here), all busy, on an Envoy whose
// no_assignment_behavior would allow all (--failure-mode allow answered
// them so): a new tenant's bucket past the bound is still limited, by its
// rule's overflow share; once the client's buckets go idle, one of them is
// abandoned and the tenant takes its place.
func TestQuotaOneClientFillsBound(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "quota.yaml"), []byte(quotaYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startSluice(t, "--config", dir, "--redis-url", "redis://"+redistest.Addr(t)+"/0",
		"--redis-prefix", redistest.Prefix(t.Name()), "--failure-mode", "allow", "--rlqs-max-buckets", "20")
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(s.Conn).StreamRateLimitQuotas(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	report := func(floodRequests uint64) *rlqsv3.RateLimitQuotaResponse {
		t.Helper()
		r := manyBuckets("evil-", 20)
		for _, u := range r.BucketQuotaUsages {
			u.NumRequestsAllowed = floodRequests
		}
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, manyBuckets("tenant-", 1).BucketQuotaUsages...)
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if err := stream.Send(manyBuckets("evil-", 20)); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	busy := report(50)
	tenant := busy.GetBucketAction()[20]
	if fill := quotaFills(busy)[20]; fill == 0 || fill > quotaLimit {
		t.Errorf("the tenant past the bound of 20 busy buckets: %v, want a token bucket of at most the rule's %d/s", tenant, quotaLimit)
	}
	idle := report(0)
	abandoned := 0
	for _, a := range idle.GetBucketAction()[:20] {
		if a.GetAbandonAction() != nil {
			abandoned++
		}
	}
	if fill := quotaFills(idle)[20]; abandoned != 1 || fill == 0 || fill > quotaLimit {
		t.Errorf("the client's buckets idle: %d of them abandoned, the tenant %v; want 1 and a token bucket of at most %d/s",
			abandoned, idle.GetBucketAction()[20], quotaLimit)
	}
	m := metrics(t, s)
	if o, e := m[`sluice_rlqs_overflowed_total{bound="max_buckets"}`], m[`sluice_rlqs_evicted_total{bound="max_buckets"}`]; o != 1 || e != 1 {
		t.Errorf("overflowed %v and evicted %v under max_buckets, want 1 and 1", o, e)
	}
	if got := m[`sluice_rlqs_buckets`]; got != 20 {
		t.Errorf("sluice_rlqs_buckets = %v, want 20", got)
	}
}

// TestQuotaStreamsPerConnection is the regression test, against the
// binary at its default bounds, of one client connection that opens 500
// idle quota streams: past --rlqs-max-streams-per-connection its streams
// end with RESOURCE_EXHAUSTED naming the setting, and another connection's
// streams, the one open before and one opened after, are served.
func TestQuotaStreamsPerConnection(t *testing.T) {
	s := startSluice(t, "--config", "config")
	usage := func(key string) *rlqsv3.RateLimitQuotaUsageReports {
		return &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
			BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"api_key": key}}, TimeElapsed: durationpb.New(0), NumRequestsAllowed: 1}}}
	}
	victim := rlqsv3.NewRateLimitQuotaServiceClient(s.Conn)
	open := func(c rlqsv3.RateLimitQuotaServiceClient) grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse] {
		stream, err := c.StreamRateLimitQuotas(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return stream
	}
	served := func(what string, stream grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) {
		t.Helper()
		if err := stream.Send(usage("victim")); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		if resp, err := stream.Recv(); err != nil || len(resp.GetBucketAction()) != 1 {
			t.Errorf("%s: %v, %v; want one action", what, resp, err)
		}
	}
	before := open(victim)
	served("the other connection's stream before the flood", before)

	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	floodCtx, stopFlood := context.WithCancel(t.Context())
	defer stopFlood()
	ended := make(chan error, 500) // what ended each flood stream the server ended
	for range 500 {
		stream, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(floodCtx)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, err := stream.Recv()
			ended <- err
		}()
	}
	// Each stream is open or refused once the server has seen it.
	var m map[string]float64
	if !eventually(10*time.Second, 20*time.Millisecond, func() bool {
		m = metrics(t, s)
		return m["sluice_rlqs_streams"]+m[`sluice_rlqs_refused_total{bound="max_streams"}`]+
			m[`sluice_rlqs_refused_total{bound="max_streams_per_connection"}`] == 501
	}) {
		t.Fatalf("the server did not see the 500 streams: %v open", m["sluice_rlqs_streams"])
	}
	t.Logf("500 streams on one connection: %v open in all, refused %v past max_streams, %v past max_streams_per_connection",
		m["sluice_rlqs_streams"], m[`sluice_rlqs_refused_total{bound="max_streams"}`], m[`sluice_rlqs_refused_total{bound="max_streams_per_connection"}`])
	served("the other connection's stream open before", before)
	served("a new stream on the other connection", open(victim))
	refused, want := 0, 500-rlqs.DefaultMaxStreamsPerConnection
	for timeout := time.After(5 * time.Second); refused < want; {
		select {
		case err := <-ended:
			if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "the most --rlqs-max-streams-per-connection allows") {
				t.Fatalf("a stream of the flood ended with %v, want RESOURCE_EXHAUSTED naming --rlqs-max-streams-per-connection", err)
			}
			refused++
		case <-timeout:
			t.Fatalf("%d streams of 500 on one connection refused, want %d", refused, want)
		}
	}
}

// TestQuotaMemoryDefaults: at the default settings, 8 streams of 10,000 new
// buckets each (every one its own limit, the in-memory store holding the
// shares: the worst case) leave 50,000 buckets tracked, the heap in use
// under 100 MiB and the resident memory, without the GOMEMLIMIT the shipped
// Deployment sets, under its 256Mi. It logs the figures.
func TestQuotaMemoryDefaults(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "quota.yaml"), []byte(quotaYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	// The buckets past the bound are answered from the overflow limit, so
	// every report gets a response at the default failure mode too.
	s := startSluice(t, "--config", dir)
	before := processMemory(t, s)
	for i := range 8 {
		start := time.Now()
		if _, err := quotaExchange(t, s, manyBuckets(strconv.Itoa(i)+"-", 10000)); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		t.Logf("stream %d answered in %v", i, time.Since(start))
	}
	after := processMemory(t, s)
	m := metrics(t, s)
	t.Logf("8 streams of 10,000 buckets: %v buckets tracked; before %s; after %s", m["sluice_rlqs_buckets"], before, after)
	if got := m["sluice_rlqs_buckets"]; got != rlqs.DefaultMaxTotalBuckets {
		t.Errorf("sluice_rlqs_buckets = %v, want %d (--rlqs-max-total-buckets' default)", got, rlqs.DefaultMaxTotalBuckets)
	}
	if heap := m["go_memstats_heap_inuse_bytes"]; heap > 100<<20 {
		t.Errorf("heap in use %.0f MB at the default bounds, want under 100 MiB", heap/1e6)
	}
	if rss := m["process_resident_memory_bytes"]; rss > 256<<20 {
		t.Errorf("resident memory %.0f MB at the default bounds, over the Deployment's 256Mi even without GOMEMLIMIT", rss/1e6)
	}
}

// processMemory returns the process's resident memory and heap in use, from
// /metrics after a forced collection (/debug/pprof/heap?gc=1).
func processMemory(t *testing.T, s *sluice) string {
	t.Helper()
	r, err := http.Get("http://" + s.DebugAddr + "/debug/pprof/heap?gc=1")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	m := metrics(t, s)
	return fmt.Sprintf("rss %.0f MB, heap in use %.0f MB", m["process_resident_memory_bytes"]/1e6, m["go_memstats_heap_inuse_bytes"]/1e6)
}
