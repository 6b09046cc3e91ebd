package rlqs

import (
	"context"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// fieldPrefixes are the fields a refused report's status may name.
var fieldPrefixes = []string{"domain: ", "bucket_quota_usages["}

// FuzzReport feeds two usage reports, as bytes on the wire decoded by Codec,
// to one stream's report handling, then closes the stream. It requires that nothing panics,
// that a refused report ends with INVALID_ARGUMENT naming a field, that an
// accepted one is answered with at most one valid action per bucket of it,
// each for one of its bucket ids, and that the closed stream leaves no
// holding in the store.
func FuzzReport(f *testing.F) {
	cfg := parse(f, matchYAML)
	add := func(rs ...*rlqsv3.RateLimitQuotaUsageReports) {
		var b [2][]byte
		for i, r := range rs {
			b[i], _ = proto.Marshal(r)
		}
		f.Add(b[0], b[1])
	}
	u := func(allowed, denied uint64, kv ...string) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
		id := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			id[kv[i]] = kv[i+1]
		}
		return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: id},
			TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: allowed, NumRequestsDenied: denied}
	}
	r := func(domain string, us ...*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) *rlqsv3.RateLimitQuotaUsageReports {
		return &rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: us}
	}
	// A shared bucket reported twice, then with the domain left out.
	add(r("d", u(5, 1, "api_key", "a", "route", "search")), r("", u(3, 0, "route", "search", "api_key", "a")))
	// Buckets sharing one counter (share_threshold), and one without a rule.
	add(r("d", u(1, 0, "path", "/reports/x"), u(2, 0, "path", "/reports/y"), u(1, 0, "no", "rule")), nil)
	// The same bucket twice in one report, and an idle one.
	add(r("d", u(1, 0, "a", "x", "b", "one"), u(0, 0, "a", "x", "b", "one")), r("d", u(0, 0, "b", "y", "c", "z", "a", "q")))
	// Refused: an unknown domain, a changed domain, an empty bucket id,
	// absurd counts.
	add(r("nope", u(1, 0, "api_key", "a")), nil)
	add(r("d", u(1, 0, "api_key", "a")), r("e", u(1, 0, "api_key", "a")))
	add(r("d", u(1, 0)), nil)
	add(r("d", u(1<<62, 0, "api_key", "a")), nil)

	// Reports are decoded as the server does: strings that are not UTF-8
	// are kept.
	wire := Codec(encoding.GetCodecV2(grpcproto.Name))
	f.Fuzz(func(t *testing.T, first, second []byte) {
		clock := testclock.New(time.Unix(1_800_000_000, 0))
		shares := limiter.NewMemoryShares(clock.Now)
		core := ratelimit.New(ratelimit.Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{})})
		core.SetConfig(cfg)
		s := New(Options{Decider: core, Store: shares, Now: clock.Now, IdleAfter: time.Second})
		st, _ := s.openStream(context.Background())
		for _, b := range [][]byte{first, second} {
			var rep rlqsv3.RateLimitQuotaUsageReports
			if wire.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &rep) != nil {
				break
			}
			resp, err := s.handle(context.Background(), st, &rep)
			if err != nil {
				checkRefusal(t, err)
				break
			}
			checkResponse(t, &rep, resp)
			clock.Advance(time.Second)
		}
		s.closeStream(context.Background(), st)
		if n := shares.Len(); n != 0 {
			t.Fatalf("%d holdings left after the stream closed", n)
		}
	})
}

func checkRefusal(t *testing.T, err error) {
	st, _ := status.FromError(err)
	if st.Code() != codes.InvalidArgument {
		t.Fatalf("refused with %v, want INVALID_ARGUMENT", err)
	}
	for _, p := range fieldPrefixes {
		if strings.HasPrefix(st.Message(), p) {
			return
		}
	}
	t.Fatalf("refusal %q names no field", st.Message())
}

func checkResponse(t *testing.T, rep *rlqsv3.RateLimitQuotaUsageReports, resp *rlqsv3.RateLimitQuotaResponse) {
	if len(resp.GetBucketAction()) > len(rep.GetBucketQuotaUsages()) {
		t.Fatalf("%d actions for %d buckets", len(resp.GetBucketAction()), len(rep.GetBucketQuotaUsages()))
	}
	for _, a := range resp.GetBucketAction() {
		found := false
		for _, u := range rep.GetBucketQuotaUsages() {
			found = found || proto.Equal(a.GetBucketId(), u.GetBucketId())
		}
		if !found {
			t.Fatalf("action for %v, a bucket the report does not hold", a.GetBucketId())
		}
		if q := a.GetQuotaAssignmentAction(); q != nil {
			if err := q.ValidateAll(); err != nil {
				t.Fatalf("invalid assignment %v: %v", q, err)
			}
		} else if a.GetAbandonAction() == nil {
			t.Fatalf("action %v is neither an assignment nor an abandon", a)
		}
	}
}
