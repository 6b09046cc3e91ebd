package integration

import (
	"net/http"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestJSONRefusesRefundsByDefault: whoever reaches the HTTP port (kubelets,
// Prometheus) cannot reset or drain a counter through POST /json. A key at
// OVER_LIMIT stays there after a /json refund of 3000, which is refused
// with 400 naming the field and the setting, and a /json hits_addend of 100
// on another key is refused and consumes nothing; one hit and a check are
// decided. With --json-hits-addend the same refund is decided.
func TestJSONRefusesRefundsByDefault(t *testing.T) {
	redisURL := "redis://" + redistest.Start(t).Addr()
	s := startSluice(t, "--config", "config", "--redis-url", redisURL)
	search := []string{"api_key", "tenant-a", "route", "search"} // 10 a minute
	for range 10 {
		s.call(t, "edge", search)
	}
	if r := s.call(t, "edge", search); r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("hit 11 on 10 a minute = %v, want OVER_LIMIT", r.GetOverallCode())
	}
	refund := `{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"tenant-a"},{"key":"route","value":"search"}],"is_negative_hits":true,"hits_addend":3000}]}`
	want := "descriptors[0].is_negative_hits: /json refuses refunds and hits_addend above 1, since the HTTP port is reached by more than Envoy (--json-hits-addend allows them)"
	if code, msg := postJSON(t, s, refund); code != http.StatusBadRequest || strings.TrimSpace(msg) != want {
		t.Errorf("/json refund of 3000 = %d %q, want 400 %q", code, msg, want)
	}
	for range 5 {
		if r := s.call(t, "edge", search); r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("after a refused refund: %v, want OVER_LIMIT", r.GetOverallCode())
		}
	}
	drain := `{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"tenant-b"}],"hits_addend":100}]}`
	if code, msg := postJSON(t, s, drain); code != http.StatusBadRequest || !strings.Contains(msg, "descriptors[0].hits_addend 100: ") {
		t.Errorf("/json hits_addend 100 = %d %q, want 400 naming descriptors[0].hits_addend", code, msg)
	}
	if code, msg := postJSON(t, s, `{"domain":"edge","hits_addend":1,"descriptors":[{"entries":[{"key":"api_key","value":"tenant-b"}]}]}`); code != http.StatusOK || !strings.Contains(msg, `"limitRemaining":99`) {
		t.Errorf("/json one hit on tenant-b = %d %q, want 200 with 99 remaining (nothing drained)", code, msg)
	}

	open := startSluice(t, "--config", "config", "--redis-url", redisURL, "--json-hits-addend")
	if code, msg := postJSON(t, open, refund); code != http.StatusOK {
		t.Errorf("with --json-hits-addend: /json refund = %d %q, want 200", code, msg)
	}
	if r := open.call(t, "edge", search); r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("after an allowed refund of 3000: %v, want OK", r.GetOverallCode())
	}
}
