package integration

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// tenantsConfig is an API's YAML: a free default of 2 a minute, a pro plan
// of 5 a minute, and per tenant anything the table says.
const tenantsConfig = `domain: api
descriptors:
  - key: tenant
    tenants_from: api_tenants
    rate_limit: {unit: minute, requests_per_unit: 2}
    plans:
      pro: {rate_limit: {unit: minute, requests_per_unit: 5}}
`

// tenantsSetup writes the config and returns its directory, the Redis URL
// and a prefix of the test's own.
func tenantsSetup(t *testing.T) (dir, url, prefix string) {
	t.Helper()
	dir = t.TempDir()
	writeConfig(t, dir, tenantsConfig)
	return dir, "redis://" + redistest.Addr(t) + "/0", redistest.Prefix(t.Name())
}

// tenantsCLI runs `sluice tenants` with args and returns its output and
// whether it exited 0.
func tenantsCLI(t *testing.T, dir, url, prefix string, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"tenants", "--config", dir, "--redis-url", url, "--redis-prefix", prefix}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// admitted sends n requests for tenant to s and counts the OK answers.
func admitted(t *testing.T, s *sluice, tenant string, n int) int {
	t.Helper()
	ok := 0
	for range n {
		if s.call(t, "api", []string{"tenant", tenant}).GetOverallCode() == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	return ok
}

// TestTenantPlanChangeLive: a tenant moved to another plan with `sluice
// tenants set` gets the plan's limit at three instances within 2 s, without
// a reload; a tenant the table lacks stays on the default plan.
func TestTenantPlanChangeLive(t *testing.T) {
	dir, url, prefix := tenantsSetup(t)
	fleet := startFleet(t, 3, strings.TrimPrefix(strings.TrimSuffix(url, "/0"), "redis://"), prefix, dir, "--debug-addr", "")
	a, b, c := fleet[0], fleet[1], fleet[2]
	if got := admitted(t, a, "acme", 4); got != 2 {
		t.Fatalf("acme on the default plan: %d of 4 admitted, want 2", got)
	}
	if got := admitted(t, b, "acme", 1); got != 0 {
		t.Fatalf("acme at the second instance: %d admitted, want 0 (the counter is shared)", got)
	}
	if out, ok := tenantsCLI(t, dir, url, prefix, "set", "api_tenants", "acme", "pro"); !ok {
		t.Fatalf("tenants set: %s", out)
	}
	start := time.Now()
	for _, s := range []*sluice{c, b, a} {
		if !eventually(time.Until(start.Add(2*time.Second)), 20*time.Millisecond, func() bool { return admitted(t, s, "acme", 1) != 0 }) {
			t.Fatalf("acme still denied %v after the change to pro", time.Since(start))
		}
	}
	t.Logf("plan change seen by all three instances after %v", time.Since(start))
	// 2 on the default plan, then one at each instance on pro: 5 of pro's 5.
	if got := admitted(t, a, "acme", 3); got != 0 {
		t.Errorf("acme on pro after 5 admitted: %d more of 3 admitted, want 0 (5 a minute)", got)
	}
	if got := admitted(t, b, "nobody", 4); got != 2 {
		t.Errorf("a tenant the table lacks: %d of 4 admitted, want 2 (the default plan)", got)
	}
}

// TestTenantOverrideBeatsPlan: a row of the tenant's own limits wins over
// any plan, and a row naming a plan gets the plan's.
func TestTenantOverrideBeatsPlan(t *testing.T) {
	dir, url, prefix := tenantsSetup(t)
	rows := filepath.Join(t.TempDir(), "rows.csv")
	if err := os.WriteFile(rows, []byte("value,row\nbig,7/minute\nmid,pro\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, ok := tenantsCLI(t, dir, url, prefix, "import", "api_tenants", rows); !ok || !strings.Contains(out, "imported 2 rows") {
		t.Fatalf("tenants import: %s", out)
	}
	s := startFleet(t, 1, strings.TrimPrefix(strings.TrimSuffix(url, "/0"), "redis://"), prefix, dir, "--debug-addr", "")[0]
	for tenant, want := range map[string]int{"big": 7, "mid": 5, "small": 2} {
		if got := admitted(t, s, tenant, 9); got != want {
			t.Errorf("tenant %s: %d of 9 admitted, want %d", tenant, got, want)
		}
	}
}

// TestTenantTableUnreadable: with the table's hash deleted, a tenant
// cached keeps its plan; with the table unreadable (not a hash), a tenant
// keeps the plan last seen and a new one gets the default plan, every
// decision answered, the failures counted.
func TestTenantTableUnreadable(t *testing.T) {
	dir, url, prefix := tenantsSetup(t)
	tenantsCLI(t, dir, url, prefix, "set", "api_tenants", "acme", "pro")
	tenantsCLI(t, dir, url, prefix, "set", "api_tenants", "beta", "pro")
	s := startFleet(t, 1, strings.TrimPrefix(strings.TrimSuffix(url, "/0"), "redis://"), prefix, dir, "--debug-addr", "")[0]
	if got := admitted(t, s, "acme", 1) + admitted(t, s, "beta", 1); got != 2 {
		t.Fatalf("%d of 2 admitted", got)
	}
	rc := goredis.NewClient(&goredis.Options{Addr: redistest.Addr(t)})
	defer rc.Close()
	ctx := context.Background()
	hash := prefix + "tenants:api_tenants"
	if err := rc.Del(ctx, hash).Err(); err != nil {
		t.Fatal(err)
	}
	if got := admitted(t, s, "acme", 6); got != 4 {
		t.Errorf("acme after the hash was deleted: %d of 6 admitted, want 4 (pro, last seen)", got)
	}
	// Not a hash: every read fails; an import's reset makes every cached
	// row to be read again.
	if err := rc.Set(ctx, hash, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.XAdd(ctx, &goredis.XAddArgs{Stream: prefix + "tenants:changes", Values: []any{"t", "api_tenants", "reset", "1"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if !eventually(3*time.Second, 50*time.Millisecond, func() bool {
		if regexp.MustCompile(`sluice_tenant_read_errors_total [1-9]`).MatchString(tenantMetrics(t, s)) {
			return true
		}
		admitted(t, s, "beta", 1)
		return false
	}) {
		t.Fatalf("no read error counted:\n%s", tenantMetrics(t, s))
	}
	if got := admitted(t, s, "fresh", 4); got != 2 {
		t.Errorf("a new tenant with the table unreadable: %d of 4 admitted, want 2 (the default plan)", got)
	}
	if got := admitted(t, s, "acme", 1); got != 0 {
		t.Errorf("acme: %d admitted after 5 of 5, want 0 (pro, last seen)", got)
	}
}

// tenantMetrics returns s's Prometheus text.
func tenantMetrics(t *testing.T, s *sluice) string {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestTenantAdminAPI: the admin API refuses a call without a token or with
// a wrong one, refuses bad rows naming what is wrong and writes nothing,
// and logs each change with the token's name.
func TestTenantAdminAPI(t *testing.T) {
	dir, url, prefix := tenantsSetup(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# name token\nops 0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startFleet(t, 1, strings.TrimPrefix(strings.TrimSuffix(url, "/0"), "redis://"), prefix, dir,
		"--debug-addr", "", "--admin-addr", "127.0.0.1:0", "--admin-tokens", tokens)[0]
	m := regexp.MustCompile(`"admin_addr":"([^"]+)"`).FindStringSubmatch(s.Log())
	if m == nil {
		t.Fatalf("no admin_addr logged:\n%s", s.Log())
	}
	base := "http://" + m[1] + "/v1/tenants/api_tenants"
	do := func(method, path, token, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const good = "0123456789abcdef0123"
	for _, tok := range []string{"", "0123456789abcdef0124"} {
		if code, _ := do("PUT", "/acme", tok, `{"row":"pro"}`); code != http.StatusUnauthorized {
			t.Errorf("token %q: status %d, want 401", tok, code)
		}
	}
	long := strings.Repeat("k", 257)
	for path, c := range map[string]struct{ body, want string }{
		"/acme":    {`{"row":"gold"}`, `unknown plan \"gold\" (want pro)`},
		"/acme2":   {`{"row":"100"}`, `limit \"100\" has no unit`},
		"/" + long: {`{"row":"pro"}`, "longer than the longest entry value, 256"},
	} {
		if code, body := do("PUT", path, good, c.body); code != http.StatusBadRequest || !strings.Contains(body, c.want) {
			t.Errorf("PUT %.20s %s: %d %s, want 400 naming %s", path, c.body, code, body, c.want)
		}
	}
	if code, body := do("POST", "/import", good, "a,pro\nb,10/fortnight\n"); code != http.StatusBadRequest || !strings.Contains(body, `unknown unit \"fortnight\"`) {
		t.Errorf("import with a bad row: %d %s", code, body)
	}
	if code, body := do("GET", "", good, ""); code != http.StatusOK || strings.TrimSpace(body) != "{}" {
		t.Errorf("the table after refused writes: %d %s, want empty", code, body)
	}
	if code, body := do("PUT", "/acme", good, `{"row":"pro"}`); code != http.StatusOK {
		t.Fatalf("good PUT: %d %s", code, body)
	}
	if code, body := do("GET", "/acme", good, ""); code != http.StatusOK || !strings.Contains(body, `"row":"pro"`) {
		t.Errorf("GET acme: %d %s", code, body)
	}
	if !regexp.MustCompile(`"msg":"tenant row set".*"token":"ops".*"value":"acme"`).MatchString(s.Log()) {
		t.Errorf("the change is not logged with the token's name:\n%s", s.Log())
	}
	if strings.Contains(s.Log(), good) {
		t.Error("the token itself is in the log")
	}
}
