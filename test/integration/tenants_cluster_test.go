package integration

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/redistest"
)

// clusterTenantsConfig is an API by the hour with plans from a table, and a
// rule whose offenders are blocked for 2 s, then 6 s (escalate 3).
const clusterTenantsConfig = `domain: api
descriptors:
  - key: tenant
    tenants_from: api_tenants
    rate_limit: {unit: hour, requests_per_unit: 2}
    plans:
      pro: {rate_limit: {unit: hour, requests_per_unit: 5}}
  - key: offender
    rate_limit:
      unit: second
      requests_per_unit: 2
      algorithm: fixed_window
      penalty: {block: 2s, escalate: 3, max: 1h, forget: 1h}
`

// TestTenantsOnCluster: on a 3-master Redis Cluster, a row written through
// the admin API of one instance reaches the other through the change feed
// and the tenant's plan is counted once for both; a tenant the table lacks
// gets the default plan; and a penalty's block escalates (2 s, then 6 s),
// its block kept beside the counter in one slot.
func TestTenantsOnCluster(t *testing.T) {
	addrs := redistest.Cluster(t)
	prefix := redistest.Prefix(t.Name())
	dir := t.TempDir()
	writeConfig(t, dir, clusterTenantsConfig)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("ops 0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(extra ...string) *sluice {
		return startSluice(t, append([]string{"--config", dir, "--redis-cluster-addrs", strings.Join(addrs, ","),
			"--redis-prefix", prefix, "--debug-addr", "", "--response-headers", "draft"}, extra...)...)
	}
	a := start("--admin-addr", "127.0.0.1:0", "--admin-tokens", tokens)
	b := start()
	if got := admitted(t, b, "acme", 3); got != 2 {
		t.Fatalf("acme on the default plan before its row: %d of 3 admitted, want 2", got)
	}
	m := regexp.MustCompile(`"admin_addr":"([^"]+)"`).FindStringSubmatch(a.Log())
	if m == nil {
		t.Fatalf("no admin_addr logged:\n%s", a.Log())
	}
	req, _ := http.NewRequest("PUT", "http://"+m[1]+"/v1/tenants/api_tenants/acme", strings.NewReader(`{"row":"pro"}`))
	req.Header.Set("Authorization", "Bearer 0123456789abcdef0123")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT acme pro: status %d", resp.StatusCode)
	}
	if keys := keysUnder(t, addrs, prefix); !slices.Contains(keys, prefix+"tenants:api_tenants") {
		t.Errorf("keys on the cluster %v, want the table's hash %s", keys, prefix+"tenants:api_tenants")
	}
	// b cached acme on the default plan: the feed must tell it.
	for deadline := time.Now().Add(2 * time.Second); admitted(t, b, "acme", 1) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("acme still denied at the second instance 2 s after the change to pro")
		}
	}
	// 3 admitted at b so far: 2 more of pro's 5, counted once for both.
	if got := admitted(t, a, "acme", 2) + admitted(t, b, "acme", 3); got != 2 {
		t.Errorf("acme on pro across two instances: %d of 5 more admitted, want 2", got)
	}
	if got := admitted(t, a, "nobody", 3) + admitted(t, b, "nobody", 1); got != 2 {
		t.Errorf("a tenant the table lacks: %d of 4 admitted, want 2 (the default plan)", got)
	}

	// offend calls until the key is denied and returns Retry-After.
	offend := func(s *sluice) int {
		t.Helper()
		for range 10 {
			r := s.call(t, "api", []string{"offender", "mallory"})
			if r.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
				ra, err := strconv.Atoi(headers(r)["Retry-After"])
				if err != nil {
					t.Fatalf("Retry-After %q: %v", headers(r)["Retry-After"], err)
				}
				return ra
			}
		}
		t.Fatal("10 calls in a row admitted, over a limit of 2 a second")
		return 0
	}
	if ra := offend(a); ra < 1 || ra > 2 {
		t.Fatalf("first offence: Retry-After %d, want the 2 s block", ra)
	}
	blocked := time.Now()
	if r := b.call(t, "api", []string{"offender", "mallory"}); r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("during the block, at the other instance: %v, want OVER_LIMIT", r.GetOverallCode())
	}
	for b.call(t, "api", []string{"offender", "mallory"}).GetOverallCode() != rlsv3.RateLimitResponse_OK {
		if time.Since(blocked) > 5*time.Second {
			t.Fatalf("still blocked %v after a 2 s block", time.Since(blocked))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d := time.Since(blocked); d < 1500*time.Millisecond {
		t.Errorf("admitted again %v after the first offence, want after its 2 s block", d)
	}
	if ra := offend(b); ra < 5 || ra > 6 {
		t.Errorf("second offence: Retry-After %d, want the block escalated to 6 s", ra)
	}
	var blocks []string
	for _, k := range keysUnder(t, addrs, prefix) {
		if strings.Contains(k, "mallory") && strings.HasSuffix(k, ":p") {
			blocks = append(blocks, k)
		}
	}
	if len(blocks) != 1 {
		t.Fatalf("block keys %v, want one", blocks)
	}
	counter := strings.TrimSuffix(blocks[0], ":p")
	if keySlot(t, addrs[0], blocks[0]) != keySlot(t, addrs[0], counter) {
		t.Errorf("the block %s and its counter %s are in different slots", blocks[0], counter)
	}
}
