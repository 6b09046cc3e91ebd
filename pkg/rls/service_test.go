package rls

import (
	"context"
	"errors"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// epoch is a minute boundary, so windows start with the test.
var epoch = time.Unix(1_800_000_000-1_800_000_000%3600, 0)

// newTestService returns a Service on a ratelimit.Service with the config of
// testdata/test.yaml, on an in-memory store with a test clock unless core
// sets a Store.
func newTestService(t testing.TB, o Options, core ...ratelimit.Options) (*Service, *testclock.Clock) {
	t.Helper()
	cfg, err := descriptors.Load("testdata/test.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	clk := testclock.New(epoch)
	var co ratelimit.Options
	if len(core) > 0 {
		co = core[0]
	}
	if co.Store == nil {
		co.Store = limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now})
	}
	o.Decider = ratelimit.New(co)
	o.Decider.SetConfig(cfg)
	return New(o), clk
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func request(ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "test", Descriptors: ds}
}

// brief renders a response as "OK [OK:2 OVER:0 -]": overall code, then per
// status its code and limit_remaining, "-" for no limit.
func brief(r *rlsv3.RateLimitResponse) string {
	code := func(c rlsv3.RateLimitResponse_Code) string {
		if c == rlsv3.RateLimitResponse_OVER_LIMIT {
			return "OVER"
		}
		return c.String()
	}
	s := r.GetOverallCode().String() + " ["
	for i, st := range r.GetStatuses() {
		if i > 0 {
			s += " "
		}
		if st.GetCurrentLimit() == nil {
			s += code(st.GetCode()) + ":-"
			continue
		}
		s += code(st.GetCode()) + ":" + itoa(uint64(st.GetLimitRemaining()))
	}
	return s + "]"
}

func itoa(n uint64) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func call(t *testing.T, s *Service, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := s.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
	}
	return resp
}

// step is one call of a sequence and the brief answer it must get.
type step struct {
	req     *rlsv3.RateLimitRequest
	advance time.Duration // clock moved before the call
	want    string
}

func runSteps(t *testing.T, s *Service, clk *testclock.Clock, steps []step) {
	t.Helper()
	for i, st := range steps {
		clk.Advance(st.advance)
		if got := brief(call(t, s, st.req)); got != st.want {
			t.Fatalf("step %d: got %s, want %s", i, got, st.want)
		}
	}
}

func TestSequences(t *testing.T) {
	key := func(k string) *rlcommon.RateLimitDescriptor { return desc("api_key", k) }
	search := func(k string) *rlcommon.RateLimitDescriptor { return desc("api_key", k, "route", "search") }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"per key limit crossed, other key independent", []step{
			{req: request(key("a")), want: "OK [OK:2]"},
			{req: request(key("a")), want: "OK [OK:1]"},
			{req: request(key("a")), want: "OK [OK:0]"},
			{req: request(key("a")), want: "OVER_LIMIT [OVER:0]"},
			{req: request(key("b")), want: "OK [OK:2]"},
		}},
		{"nested rule and parent both enforced, denial consumes nothing", []step{
			{req: request(key("a"), search("a")), want: "OK [OK:2 OK:1]"},
			{req: request(key("a"), search("a")), want: "OK [OK:1 OK:0]"},
			// search is exhausted: the per-key limit is not consumed either.
			{req: request(key("a"), search("a")), want: "OVER_LIMIT [OK:1 OVER:0]"},
			{req: request(key("a"), search("a")), want: "OVER_LIMIT [OK:1 OVER:0]"},
			{req: request(key("a")), want: "OK [OK:0]"},
		}},
		{"sliding window: previous minute weighs by its remaining share", []step{
			{req: request(key("a")), want: "OK [OK:2]"},
			{req: request(key("a")), want: "OK [OK:1]"},
			{req: request(key("a")), want: "OK [OK:0]"},
			// Half into the next minute: estimate 3*0.5 = 1.5, one more fits.
			{req: request(key("a")), advance: 90 * time.Second, want: "OK [OK:0]"},
			{req: request(key("a")), want: "OVER_LIMIT [OVER:0]"},
			// Two more windows: all forgotten.
			{req: request(key("a")), advance: 2 * time.Minute, want: "OK [OK:2]"},
		}},
		{"no rule, unknown key, deeper than rule, whitelist, unlimited", []step{
			{req: request(desc("nothing", "x")), want: "OK [OK:-]"},
			{req: request(desc("api_key", "a", "route", "search", "extra", "x")), want: "OK [OK:-]"},
			{req: request(desc("whitelist", "yes")), want: "OK [OK:-]"},
			{req: request(desc("internal", "svc"), desc("internal", "svc")), want: "OK [OK:- OK:-]"},
		}},
		{"share_threshold: every matching value shares one counter", []step{
			{req: request(desc("files", "files/a")), want: "OK [OK:1]"},
			{req: request(desc("files", "files/b")), want: "OK [OK:0]"},
			{req: request(desc("files", "files/c")), want: "OVER_LIMIT [OVER:0]"},
		}},
		{"wildcard without share_threshold counts each value", []step{
			{req: request(desc("wild", "w1")), want: "OK [OK:0]"},
			{req: request(desc("wild", "w2")), want: "OK [OK:0]"},
			{req: request(desc("wild", "w1")), want: "OVER_LIMIT [OVER:0]"},
		}},
		{"shadow mode counts but never denies", []step{
			{req: request(desc("shadow", "s")), want: "OK [OK:0]"},
			{req: request(desc("shadow", "s")), want: "OK [OK:0]"},
			{req: request(desc("shadow", "s"), key("a")), want: "OK [OK:0 OK:2]"},
		}},
		{"requests_per_unit 0 denies every hit", []step{
			{req: request(desc("zero", "z")), want: "OVER_LIMIT [OVER:0]"},
		}},
		{"replaces drops the named limit", []step{
			{req: request(key("a"), desc("generous", "g")), want: "OK [OK:- OK:99]"},
			{req: request(key("a"), desc("generous", "g")), want: "OK [OK:- OK:98]"},
			{req: request(key("a"), desc("generous", "g")), want: "OK [OK:- OK:97]"},
			{req: request(key("a"), desc("generous", "g")), want: "OK [OK:- OK:96]"},
			{req: request(key("a")), want: "OK [OK:2]"},
		}},
		{"rate_limits: a denial by the per-second limit counts against neither", []step{
			// Binding: the least remaining (per second: 1 left of 2).
			{req: request(desc("tenant_multi", "t")), want: "OK [OK:1]"},
			{req: request(desc("tenant_multi", "t")), want: "OK [OK:0]"},
			// Per second denies; the per-minute counter stays at 2 of 3.
			{req: request(desc("tenant_multi", "t")), want: "OVER_LIMIT [OVER:0]"},
			{req: request(desc("tenant_multi", "t")), want: "OVER_LIMIT [OVER:0]"},
			{req: request(desc("tenant_multi", "t")), advance: 3 * time.Second, want: "OK [OK:0]"},
			// Now the per-minute limit denies.
			{req: request(desc("tenant_multi", "t")), advance: 3 * time.Second, want: "OVER_LIMIT [OVER:0]"},
		}},
		{"token bucket: a burst, then the refill rate", []step{
			{req: request(desc("bucket", "b")), want: "OK [OK:2]"},
			{req: request(desc("bucket", "b")), want: "OK [OK:1]"},
			{req: request(desc("bucket", "b")), want: "OK [OK:0]"},
			{req: request(desc("bucket", "b")), want: "OVER_LIMIT [OVER:0]"},
			{req: request(desc("bucket", "b")), advance: time.Second, want: "OK [OK:0]"},
			{req: request(desc("bucket", "b")), advance: 3 * time.Second, want: "OK [OK:2]"},
		}},
		{"default sub-windows (50 of 1.2 s): hits leave the estimate with their sub-window", []step{
			{req: request(desc("tenant_default", "a")), want: "OK [OK:1]"},
			{req: request(desc("tenant_default", "a")), want: "OK [OK:0]"},
			{req: request(desc("tenant_default", "a")), advance: 59 * time.Second, want: "OVER_LIMIT [OVER:0]"},
			// 63 s on, both hits' sub-window [0 s, 1.2 s) has left (the
			// classic counter would still weigh them in until 120 s).
			{req: request(desc("tenant_default", "a")), advance: 4 * time.Second, want: "OK [OK:1]"},
		}},
		{"overdraw: every report counts, so the third check is denied", []step{
			{req: check(desc("ai_tenant", "t1")), want: "OK [OK:10000]"},
			{req: report(desc("ai_tenant", "t1"), 8000), want: "OK [OK:2000]"},
			{req: check(desc("ai_tenant", "t1")), want: "OK [OK:2000]"},
			// The report that takes the budget over is counted all the same.
			{req: report(desc("ai_tenant", "t1"), 8000), want: "OK [OK:0]"},
			{req: check(desc("ai_tenant", "t1")), want: "OVER_LIMIT [OVER:0]"},
			{req: report(desc("ai_tenant", "t1"), 8000), want: "OVER_LIMIT [OVER:0]"},
			{req: check(desc("ai_tenant", "t2")), want: "OK [OK:10000]"},
		}},
		{"concurrency: acquire 2 of 2, the third denied; a release without a slot token frees nothing", []step{
			{req: request(desc("inflight", "a")), want: "OK [OK:1]"},
			{req: request(desc("inflight", "a")), want: "OK [OK:0]"},
			{req: request(desc("inflight", "a")), want: "OVER_LIMIT [OVER:0]"},
			{req: release(desc("inflight", "a")), want: "OK [OK:0]"},
			{req: release(desc("inflight", "a", ratelimit.SlotTokenKey, "12345")), want: "OK [OK:0]"},
			{req: request(desc("inflight", "a")), want: "OVER_LIMIT [OVER:0]"},
		}},
		{"quota mode denies only when every quota descriptor is over", []step{
			{req: request(desc("service", "a"), desc("service", "b")), want: "OK [OK:0 OK:0]"},
			// Both quotas are now over: denied, and nothing consumed (q
			// reports its remaining after the denial, as any denied request
			// does: all 3).
			{req: request(desc("service", "a"), desc("service", "b"), key("q")), want: "OVER_LIMIT [OVER:0 OVER:0 OK:3]"},
			{req: request(key("q")), want: "OK [OK:2]"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, clk := newTestService(t, Options{})
			runSteps(t, s, clk, tc.steps)
		})
	}
}

// check is a request of one descriptor with hits_addend 0: evaluate only.
func check(d *rlcommon.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	d.HitsAddend = wrapperspb.UInt64(0)
	return request(d)
}

// report is the request Envoy sends when a stream ends: n hits.
func report(d *rlcommon.RateLimitDescriptor, n uint64) *rlsv3.RateLimitRequest {
	d.HitsAddend = wrapperspb.UInt64(n)
	return request(d)
}

// release gives one hit back (is_negative_hits), as a stream's end does for
// a concurrency limit.
func release(d *rlcommon.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	d.IsNegativeHits = true
	return request(d)
}

func TestHitsAddend(t *testing.T) {
	addend := func(d *rlcommon.RateLimitDescriptor, n uint64) *rlcommon.RateLimitDescriptor {
		d.HitsAddend = wrapperspb.UInt64(n)
		return d
	}
	withReq := func(r *rlsv3.RateLimitRequest, n uint32) *rlsv3.RateLimitRequest { r.HitsAddend = n; return r }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"request hits_addend 0 means 1", []step{
			{req: withReq(request(desc("api_key", "a")), 0), want: "OK [OK:2]"},
		}},
		{"request hits_addend applies to every descriptor", []step{
			{req: withReq(request(desc("api_key", "a")), 2), want: "OK [OK:1]"},
			{req: withReq(request(desc("api_key", "a")), 2), want: "OVER_LIMIT [OVER:0]"},
			{req: withReq(request(desc("api_key", "a")), 1), want: "OK [OK:0]"},
		}},
		{"descriptor hits_addend wins, explicit 0 only checks", []step{
			{req: withReq(request(addend(desc("api_key", "a"), 0)), 3), want: "OK [OK:3]"},
			{req: withReq(request(addend(desc("api_key", "a"), 3)), 1), want: "OK [OK:0]"},
			// At the limit, zero more hits still fit; one does not.
			{req: request(addend(desc("api_key", "a"), 0)), want: "OK [OK:0]"},
			{req: request(addend(desc("api_key", "a"), 1)), want: "OVER_LIMIT [OVER:0]"},
		}},
		{"hits over the limit can never pass and consume nothing", []step{
			{req: request(addend(desc("api_key", "a"), 4)), want: "OVER_LIMIT [OVER:0]"},
			{req: request(addend(desc("api_key", "a"), ^uint64(0))), want: "OVER_LIMIT [OVER:0]"},
			{req: withReq(request(desc("api_key", "a")), ^uint32(0)), want: "OVER_LIMIT [OVER:0]"},
			{req: request(desc("api_key", "a")), want: "OK [OK:2]"},
		}},
		{"is_negative_hits refunds", []step{
			{req: withReq(request(desc("api_key", "a")), 3), want: "OK [OK:0]"},
			{req: request(func() *rlcommon.RateLimitDescriptor {
				d := addend(desc("api_key", "a"), 2)
				d.IsNegativeHits = true
				return d
			}()), want: "OK [OK:2]"},
			{req: request(desc("api_key", "a")), want: "OK [OK:1]"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, clk := newTestService(t, Options{})
			runSteps(t, s, clk, tc.steps)
		})
	}
}

func TestLimitOverride(t *testing.T) {
	s, clk := newTestService(t, Options{})
	over := func(kv ...string) *rlcommon.RateLimitDescriptor {
		d := desc(kv...)
		d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND}
		return d
	}
	runSteps(t, s, clk, []step{
		// The override replaces the configured limit and has its own counter.
		{req: request(over("api_key", "a")), want: "OK [OK:0]"},
		{req: request(over("api_key", "a")), want: "OVER_LIMIT [OVER:0]"},
		{req: request(desc("api_key", "a")), want: "OK [OK:2]"},
		// It applies even where no rule matches, and is never shadowed.
		{req: request(over("unknown", "x")), want: "OK [OK:0]"},
		{req: request(over("shadow", "s")), want: "OK [OK:0]"},
		{req: request(over("shadow", "s")), want: "OVER_LIMIT [OVER:0]"},
	})
	resp := call(t, s, request(over("api_key", "b")))
	if got := resp.GetStatuses()[0].GetCurrentLimit(); got.GetRequestsPerUnit() != 1 || got.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
		t.Errorf("current_limit = %v, want 1 per SECOND", got)
	}
}

func TestStatusFields(t *testing.T) {
	s, clk := newTestService(t, Options{})
	clk.Advance(15 * time.Second)
	resp := call(t, s, request(desc("api_key", "a", "route", "search"), desc("nothing", "x")))
	st := resp.GetStatuses()[0]
	cl := st.GetCurrentLimit()
	if cl.GetName() != "search" || cl.GetRequestsPerUnit() != 2 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Errorf("current_limit = %v, want search 2/MINUTE", cl)
	}
	if st.GetLimitRemaining() != 1 {
		t.Errorf("limit_remaining = %d, want 1", st.GetLimitRemaining())
	}
	// One hit in the current minute: the estimate is back to 0 at the end of
	// the next minute, 45 s + 60 s from now.
	if got := st.GetDurationUntilReset().AsDuration(); got != 105*time.Second {
		t.Errorf("duration_until_reset = %v, want 1m45s", got)
	}
	if resp.GetStatuses()[1].GetCurrentLimit() != nil || resp.GetStatuses()[1].GetDurationUntilReset() != nil {
		t.Errorf("unmatched descriptor has a limit: %v", resp.GetStatuses()[1])
	}
}

func TestUnknownDomainAndNoConfig(t *testing.T) {
	s, _ := newTestService(t, Options{})
	req := request(desc("api_key", "a"))
	req.Domain = "other"
	if got := brief(call(t, s, req)); got != "OK [OK:-]" {
		t.Errorf("unknown domain: %s", got)
	}
	s.opts.Decider.SetConfig(nil)
	if _, err := s.ShouldRateLimit(context.Background(), request(desc("api_key", "a"))); status.Code(err) != codes.Unavailable {
		t.Errorf("no config: error %v, want Unavailable", err)
	}
}

func TestInvalidArgument(t *testing.T) {
	s, _ := newTestService(t, Options{MaxDescriptors: 3, MaxEntries: 2, MaxKeyBytes: 8})
	badUnit := desc("api_key", "a")
	badUnit.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	badMult := desc("api_key", "a")
	badMult.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(0)}
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: []*rlcommon.RateLimitDescriptor{desc("a", "b")}}, "domain: must not be empty"},
		{"no descriptors", request(), "descriptors: must not be empty"},
		{"too many descriptors", request(desc("a", "1"), desc("a", "2"), desc("a", "3"), desc("a", "4")), "descriptors: 4 descriptors, more than the limit of 3"},
		{"no entries", request(desc("a", "1"), desc()), "descriptors[1].entries: must not be empty"},
		{"too many entries", request(desc("a", "1", "b", "2", "c", "3")), "descriptors[0].entries: 3 entries, more than the limit of 2"},
		{"empty key", request(desc("a", "1", "", "2")), "descriptors[0].entries[1].key: must not be empty"},
		{"long key", request(desc("abcdefghi", "1")), "descriptors[0].entries[0].key: 9 bytes, more than the limit of 8"},
		{"override without unit", request(badUnit), "descriptors[0].limit.unit: unit UNKNOWN cannot be used (want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR)"},
		{"override with multiplier 0", request(badMult), "descriptors[0].limit.unit_multiplier: must be at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.ShouldRateLimit(context.Background(), tc.req)
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != tc.want {
				t.Errorf("error = %v, want InvalidArgument %q", err, tc.want)
			}
		})
	}
}

func TestLongAndOddValuesCountSeparately(t *testing.T) {
	s, clk := newTestService(t, Options{})
	long := make([]byte, 1<<20)
	for i := range long {
		long[i] = 'x'
	}
	long2 := append([]byte(nil), long...)
	long2[len(long2)-1] = 'y'
	runSteps(t, s, clk, []step{
		{req: request(desc("wild", "w"+string(long))), want: "OK [OK:0]"},
		{req: request(desc("wild", "w"+string(long2))), want: "OK [OK:0]"},
		{req: request(desc("api_key", "")), want: "OK [OK:2]"},
		{req: request(desc("api_key", "\xff\xfe")), want: "OK [OK:2]"},
		// Values that would collide under naive "key_value" joining.
		{req: request(desc("api_key", "a_route_search")), want: "OK [OK:2]"},
		{req: request(desc("api_key", "a", "route", "search")), want: "OK [OK:1]"},
	})
}

// failingStore fails every call.
type failingStore struct{}

func (failingStore) Apply(context.Context, []limiter.Hit) ([]limiter.Result, error) {
	return nil, errors.Join(limiter.ErrStoreUnavailable, errors.New("connection refused"))
}

func TestFailureMode(t *testing.T) {
	for _, tc := range []struct {
		mode     descriptors.FailureMode
		want     string
		wantCode codes.Code
	}{
		{descriptors.FailureModeAllow, "OK [OK:0 OK:-]", codes.OK},
		{descriptors.FailureModeDeny, "OVER_LIMIT [OVER:0 OK:-]", codes.OK},
		{descriptors.FailureModeError, "", codes.Unavailable},
	} {
		t.Run("mode "+tc.mode.String(), func(t *testing.T) {
			s, _ := newTestService(t, Options{Headers: HeadersDraft}, ratelimit.Options{Store: failingStore{}, FailureMode: tc.mode})
			resp, err := s.ShouldRateLimit(context.Background(), request(desc("api_key", "a"), desc("nothing", "x")))
			if status.Code(err) != tc.wantCode {
				t.Fatalf("error = %v, want code %v", err, tc.wantCode)
			}
			if err == nil {
				if got := brief(resp); got != tc.want {
					t.Errorf("got %s, want %s", got, tc.want)
				}
				retry := ""
				for _, h := range resp.GetResponseHeadersToAdd() {
					if h.GetKey() == "Retry-After" {
						retry = h.GetValue()
					}
				}
				if want := map[descriptors.FailureMode]string{descriptors.FailureModeAllow: "", descriptors.FailureModeDeny: "1"}[tc.mode]; retry != want {
					t.Errorf("Retry-After %q, want %q", retry, want)
				}
			}
		})
	}
}

func TestDynamicMetadata(t *testing.T) {
	s, _ := newTestService(t, Options{DynamicMetadata: true})
	resp := call(t, s, request(desc("service", "a")))
	if got := resp.GetDynamicMetadata().GetFields()["tier"].GetStringValue(); got != "gold" {
		t.Errorf("dynamic_metadata.tier = %q, want gold (%v)", got, resp.GetDynamicMetadata())
	}
}

var _ = corev3.HeaderValue{}

func TestDegradedLogThrottled(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	s, _ := newTestService(t, Options{}, ratelimit.Options{Store: failingStore{}, FailureMode: descriptors.FailureModeAllow, Logger: zap.New(core), DegradedLogInterval: time.Hour})
	for range 100 {
		call(t, s, request(desc("api_key", "a")))
	}
	if n := logs.Len(); n != 1 {
		t.Errorf("%d log lines for 100 degraded answers, want 1", n)
	}
}

// TestOverdrawSetting: --overdraw makes every rule that does not say count
// every report (configs over xDS cannot say), and a rule that says
// overdraw: false keeps all or nothing.
func TestOverdrawSetting(t *testing.T) {
	s, clk := newTestService(t, Options{}, ratelimit.Options{Overdraw: true})
	runSteps(t, s, clk, []step{
		// api_key (per_key, 3 a minute, no overdraw field): a report of 5
		// is counted though it is over the limit.
		{req: report(desc("api_key", "o"), 2), want: "OK [OK:1]"},
		{req: report(desc("api_key", "o"), 5), want: "OK [OK:0]"},
		{req: check(desc("api_key", "o")), want: "OVER_LIMIT [OVER:0]"},
	})
	s, clk = newTestService(t, Options{})
	runSteps(t, s, clk, []step{
		{req: report(desc("api_key", "o"), 2), want: "OK [OK:1]"},
		{req: report(desc("api_key", "o"), 5), want: "OVER_LIMIT [OVER:0]"},
		{req: check(desc("api_key", "o")), want: "OK [OK:1]"},
	})
}
