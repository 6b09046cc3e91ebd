package integration

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// The start with the peer's settings: what /healthcheck says before Redis
// has answered, which Redis address wins, and what a TLS mistake says.

// waitHTTP polls url until it answers want (at most 10 s) and returns the
// last status and body.
func waitHTTP(t *testing.T, url string, want func(code int) bool) (int, string) {
	t.Helper()
	var code int
	var body string
	eventually(10*time.Second, 50*time.Millisecond, func() bool {
		code, body = httpGet(t, url)
		return want(code)
	})
	return code, body
}

// TestPeerHealthcheckWaitsForStore: with the peer's settings /healthcheck
// fails until Redis has first answered (the peer does not start without
// Redis, and Envoy Gateway's liveness, readiness and startup probes all ask
// /healthcheck); once it has, a later outage does not flip it, as in the
// peer (only /readyz follows Redis).
func TestPeerHealthcheckWaitsForStore(t *testing.T) {
	r := redistest.Start(t)
	r.Stop()
	s := startPeer(t, peerEnv(t, budgetConfig, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+r.Addr()))
	health, ready := "http://"+loopback(t, s.HTTPAddr)+"/healthcheck", "http://"+loopback(t, s.HTTPAddr)+"/readyz"
	for range 3 {
		if code, body := httpGet(t, health); code < 500 {
			t.Fatalf("Redis down since the start: /healthcheck = %d %q, want a 5xx", code, body)
		}
		time.Sleep(300 * time.Millisecond) // the store is tried again every --health-interval (1s)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	if code, body := waitHTTP(t, health, func(c int) bool { return c == 200 }); code != 200 || body != "OK" {
		t.Fatalf("Redis up: /healthcheck = %d %q, want 200 OK\n%s", code, body, s.Log())
	}
	r.Stop()
	if code, _ := waitHTTP(t, ready, func(c int) bool { return c == 503 }); code != 503 {
		t.Fatalf("Redis stopped again: /readyz = %d, want 503 once Sluice has seen it", code)
	}
	if code, body := httpGet(t, health); code != 200 || body != "OK" {
		t.Errorf("Redis stopped again: /healthcheck = %d %q, want 200 OK (a later outage does not flip it)", code, body)
	}
}

// TestPeerRedisURLFlagWins: --redis-url given as a flag decides the URL
// even where the peer's REDIS_SOCKET_TYPE=tcp has no REDIS_URL (which alone
// stops the start), and the start-up warning says the peer's setting went
// unused.
func TestPeerRedisURLFlagWins(t *testing.T) {
	addr := redistest.Addr(t)
	cmd := exec.Command(binary, "--redis-url", "redis://"+addr)
	cmd.Env, cmd.Dir = peerEnv(t, budgetConfig, "REDIS_SOCKET_TYPE=tcp"), t.TempDir()
	s := startCmd(t, cmd)
	if !strings.Contains(s.Log(), "REDIS_SOCKET_TYPE=tcp with REDIS_URL unset") || !strings.Contains(s.Log(), "not used: a flag or SLUICE_* variable gives the Redis address") {
		t.Errorf("the start-up warning does not say --redis-url made REDIS_SOCKET_TYPE moot:\n%s", s.Log())
	}
	if code, _ := waitHTTP(t, "http://"+loopback(t, s.HTTPAddr)+"/readyz", func(c int) bool { return c == 200 }); code != 200 {
		t.Errorf("/readyz = %d with the flag's Redis, want 200\n%s", code, s.Log())
	}
}

// TestPeerRedisTLSToPlain: REDIS_TLS=true against a Redis without TLS says
// so at start, naming the address and the setting, not only "context
// deadline exceeded".
func TestPeerRedisTLSToPlain(t *testing.T) {
	addr := redistest.Addr(t)
	tlsPeer := startPeer(t, peerEnv(t, budgetConfig, "REDIS_TLS=true", "REDIS_URL="+addr))
	want := "redis tls handshake with " + addr + ": the server speaks plain Redis, not TLS, but REDIS_TLS=true (envoyproxy/ratelimit's setting) turns TLS on"
	if log := tlsPeer.Log(); !strings.Contains(log, want) {
		t.Errorf("REDIS_TLS=true against plain Redis: the log does not say %q:\n%s", want, log)
	}
}
