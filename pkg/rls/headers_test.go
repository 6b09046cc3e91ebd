package rls

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

var update = flag.Bool("update", false, "rewrite golden files")

// renderHeaders prints what Envoy would add to the downstream response.
func renderHeaders(r *rlsv3.RateLimitResponse) string {
	var b strings.Builder
	fmt.Fprintf(&b, "overall_code: %s\n", r.GetOverallCode())
	for _, h := range r.GetResponseHeadersToAdd() {
		fmt.Fprintf(&b, "%s: %s\n", h.GetKey(), h.GetValue())
	}
	if len(r.GetRawBody()) > 0 {
		fmt.Fprintf(&b, "\n%s\n", r.GetRawBody())
	}
	return b.String()
}

func TestHeadersGolden(t *testing.T) {
	key := desc("api_key", "a")
	search := desc("api_key", "a", "route", "search")
	for _, tc := range []struct {
		name    string
		headers string
		rawBody bool
		names   [3]string                 // CompatNames
		warmup  []*rlsv3.RateLimitRequest // sent before, answers ignored
		advance time.Duration
		req     *rlsv3.RateLimitRequest
	}{
		{name: "allowed", headers: "draft", req: request(key)},
		{name: "allowed_compat", headers: "compat", req: request(key)},
		{name: "allowed_both", headers: "draft,compat", req: request(key)},
		{name: "allowed_none", headers: "none", req: request(key)},
		{name: "allowed_compat_names", headers: "compat", names: [3]string{"X-Limit", "", "X-Reset"}, req: request(key)},
		{name: "denied", headers: "draft", warmup: []*rlsv3.RateLimitRequest{request(key), request(key), request(key)}, advance: 20 * time.Second, req: request(key)},
		{name: "denied_both_raw_body", headers: "draft,compat", rawBody: true, warmup: []*rlsv3.RateLimitRequest{request(key), request(key), request(key)}, advance: 20 * time.Second, req: request(key)},
		{name: "denied_none", headers: "none", warmup: []*rlsv3.RateLimitRequest{request(key), request(key), request(key)}, req: request(key)},
		{name: "several_limits_allowed", headers: "draft,compat", req: request(key, search)},
		{name: "several_limits_denied", headers: "draft,compat", warmup: []*rlsv3.RateLimitRequest{request(search), request(search)}, advance: 30 * time.Second, req: request(key, search)},
		{name: "shadow_only", headers: "draft,compat", warmup: []*rlsv3.RateLimitRequest{request(desc("shadow", "s"))}, req: request(desc("shadow", "s"))},
		{name: "shadow_and_limit", headers: "draft", req: request(desc("shadow", "s"), key)},
		{name: "no_limit_matched", headers: "draft,compat", req: request(desc("nothing", "x"))},
		{name: "zero_limit", headers: "draft", req: request(desc("zero", "z"))},
		{name: "hits_over_limit_raw_body", headers: "draft", rawBody: true, req: func() *rlsv3.RateLimitRequest { r := request(desc("api_key", "big")); r.HitsAddend = 4; return r }()},
		{name: "hits_over_limit", headers: "draft", req: func() *rlsv3.RateLimitRequest { r := request(desc("api_key", "big")); r.HitsAddend = 4; return r }()},
		{name: "rate_limits_allowed", headers: "draft,compat", req: request(desc("tenant_multi", "t"))},
		{name: "rate_limits_denied", headers: "draft,compat", warmup: []*rlsv3.RateLimitRequest{request(desc("tenant_multi", "t")), request(desc("tenant_multi", "t"))}, req: request(desc("tenant_multi", "t"))},
		{name: "token_bucket", headers: "draft,compat", warmup: []*rlsv3.RateLimitRequest{request(desc("bucket", "b"))}, req: request(desc("bucket", "b"))},
		{name: "pool_class_shed", headers: "draft,compat", warmup: eight("default"), advance: 10 * time.Second, req: request(desc("pool", "db", "priority", "default"))},
		{name: "pool_class_reserve", headers: "draft,compat", warmup: eight("default"), req: request(desc("pool", "db", "priority", "critical"))},
		{name: "token_bucket_denied", headers: "draft", warmup: []*rlsv3.RateLimitRequest{request(desc("bucket", "b")), request(desc("bucket", "b")), request(desc("bucket", "b"))}, req: request(desc("bucket", "b"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs, err := ParseHeaderSet(tc.headers)
			if err != nil {
				t.Fatal(err)
			}
			s, clk := newTestService(t, Options{Headers: hs, RawBody: tc.rawBody, CompatNames: tc.names})
			for _, w := range tc.warmup {
				call(t, s, w)
			}
			clk.Advance(tc.advance)
			got := renderHeaders(call(t, s, tc.req))
			golden := filepath.Join("testdata", "headers", tc.name+".golden")
			if *update {
				os.MkdirAll(filepath.Dir(golden), 0o755)
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run 'go test ./pkg/rls -run TestHeadersGolden -update' to create it)", err)
			}
			if got != string(want) {
				t.Errorf("headers:\n%s\nwant (%s):\n%s", got, golden, want)
			}
		})
	}
}

func TestParseHeaderSet(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    HeaderSet
		wantErr string
	}{
		{"draft", HeadersDraft, ""},
		{"compat", HeadersCompat, ""},
		{"draft,compat", HeadersDraft | HeadersCompat, ""},
		{" Compat , DRAFT ", HeadersDraft | HeadersCompat, ""},
		{"none", 0, ""},
		{"ietf", 0, `unknown response header set "ietf" (want draft, compat, draft,compat or none)`},
	} {
		got, err := ParseHeaderSet(tc.in)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("ParseHeaderSet(%q) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseHeaderSet(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestSFString(t *testing.T) {
	for in, want := range map[string]string{
		"per_key":   `"per_key"`,
		`a"b\c`:     `"a\"b\\c"`,
		"caf\u00e9": `"caf??"`,
		"/v1/r*":    `"/v1/r*"`,
	} {
		if got := sfString(in); got != want {
			t.Errorf("sfString(%q) = %s, want %s", in, got, want)
		}
	}
}

// eight is eight requests of class on the pool of testdata/test.yaml: all
// that its default class is admitted (80% of 10).
func eight(class string) []*rlsv3.RateLimitRequest {
	var reqs []*rlsv3.RateLimitRequest
	for range 8 {
		reqs = append(reqs, request(desc("pool", "db", "priority", class)))
	}
	return reqs
}

// TestPoolClassStatus: a shed class's status names its ceiling in
// requests, floor(10 x 80%), and the top class's the whole pool.
func TestPoolClassStatus(t *testing.T) {
	s, _ := newTestService(t, Options{})
	for _, r := range eight("default") {
		call(t, s, r)
	}
	for _, tc := range []struct {
		class     string
		code      rlsv3.RateLimitResponse_Code
		limit     uint32
		remaining uint32
	}{
		{"default", rlsv3.RateLimitResponse_OVER_LIMIT, 8, 0},
		{"", rlsv3.RateLimitResponse_OVER_LIMIT, 8, 0}, // no class entry: the lowest
		{"critical", rlsv3.RateLimitResponse_OK, 10, 1},
	} {
		d := desc("pool", "db", "priority", tc.class)
		if tc.class == "" {
			d = desc("pool", "db")
		}
		st := call(t, s, request(d)).GetStatuses()[0]
		if st.GetCode() != tc.code || st.GetCurrentLimit().GetRequestsPerUnit() != tc.limit || st.GetLimitRemaining() != tc.remaining ||
			st.GetCurrentLimit().GetName() != "db_pool" {
			t.Errorf("class %q: %v current_limit %v remaining %d, want %v requests_per_unit %d (name db_pool) remaining %d",
				tc.class, st.GetCode(), st.GetCurrentLimit(), st.GetLimitRemaining(), tc.code, tc.limit, tc.remaining)
		}
	}
}
