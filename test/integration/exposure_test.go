package integration

import (
	"net/http"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/redistest"
)

// noEvictionLine is the start-up warning about a Redis that refuses writes
// once full.
const noEvictionLine = "redis maxmemory-policy is noeviction"

// TestNoEvictionWarning: against a Redis with its default maxmemory-policy,
// noeviction (once full it refuses every write, so a flood of distinct
// values fails every decision), Sluice warns at start, naming the node;
// with an evicting policy it does not.
func TestNoEvictionWarning(t *testing.T) {
	r := redistest.Start(t)
	s := startSluice(t, "--config", "config", "--redis-url", "redis://"+r.Addr(), "--debug-addr", "")
	if !warned(s.Log(), noEvictionLine, `"redis_nodes":["`+r.Addr()+`"]`) {
		t.Errorf("Redis with noeviction: no warning %q naming %s:\n%s", noEvictionLine, r.Addr(), s.Log())
	}
	if _, err := redistest.Do(r.Addr(), "CONFIG", "SET", "maxmemory-policy", "allkeys-lru"); err != nil {
		t.Fatal(err)
	}
	lru := startSluice(t, "--config", "config", "--redis-url", "redis://"+r.Addr(), "--debug-addr", "")
	if strings.Contains(lru.Log(), noEvictionLine) {
		t.Errorf("Redis with allkeys-lru: warned all the same:\n%s", lru.Log())
	}
}

// warned reports whether log has a warning line holding msg and field.
func warned(log, msg, field string) bool {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `"level":"warn"`) && strings.Contains(line, msg) && strings.Contains(line, field) {
			return true
		}
	}
	return false
}

// TestJSONCheckAndOff: whoever reaches the HTTP port can drain a counter
// through POST /json one hit at a time (20 posts, then the victim's next
// gRPC call is over limit). --json=check decides each /json request as a
// check, counting nothing; --json=off turns /json off alone.
func TestJSONCheckAndOff(t *testing.T) {
	url := "redis://" + redistest.Start(t).Addr()
	victim := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"203.0.113.9"}]}]}` // 20 a minute
	check := startSluice(t, "--config", "config", "--redis-url", url, "--json", "check", "--debug-addr", "")
	for i := range 25 {
		if code, body := postJSON(t, check, victim); code != http.StatusOK || !strings.Contains(body, `"limitRemaining":20`) {
			t.Fatalf("--json=check: post %d = %d %s, want 200 with all 20 remaining", i+1, code, body)
		}
	}
	if r := check.call(t, "edge", []string{"remote_address", "203.0.113.9"}); r.GetOverallCode() != rlsv3.RateLimitResponse_OK ||
		r.GetStatuses()[0].GetLimitRemaining() != 19 {
		t.Errorf("the victim's gRPC call after 25 /json checks: %v, %d remaining; want OK, 19 (nothing drained)",
			r.GetOverallCode(), r.GetStatuses()[0].GetLimitRemaining())
	}

	off := startSluice(t, "--config", "config", "--redis-url", url, "--json", "off", "--debug-addr", "")
	if code, body := postJSON(t, off, victim); code != http.StatusNotFound || strings.TrimSpace(body) != "POST /json is off (--json=off)" {
		t.Errorf("--json=off: POST /json = %d %q, want 404 naming the setting", code, body)
	}
	if code, _ := httpGet(t, "http://"+off.HTTPAddr+"/readyz"); code != http.StatusOK {
		t.Errorf("--json=off: /readyz = %d, want the rest of the port served", code)
	}
	if r := off.call(t, "edge", []string{"remote_address", "203.0.113.9"}); r.GetStatuses()[0].GetLimitRemaining() != 18 {
		t.Errorf("after /json was refused: %d remaining, want 18", r.GetStatuses()[0].GetLimitRemaining())
	}
}
