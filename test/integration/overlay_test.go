package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/redistest"
)

// The requests Envoy sends for the two rules of Envoy Gateway's
// multiple-domains.yaml: a route's rule, and a policy's rule (with a
// priority entry naming a pool's class).
var (
	egRoute  = []string{"second-route", "second-route", "rule-0-match-0", "rule-0-match-0"}
	egPolicy = []string{"test-namespace/test-policy-1/rule/0", "test-namespace/test-policy-1/rule/0", "rule-0-match-0", "rule-0-match-0"}
)

// egDomains writes Envoy Gateway's generated multiple-domains.yaml into dir
// in Sluice's format, one file per domain (route.yaml, policy.yaml), each
// after edit (for the same rules with Sluice's keys written in).
func egDomains(t *testing.T, dir string, edit func(file, text string) string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "shared", "compat", "envoy-gateway", "ratelimit-config", "multiple-domains.yaml"))
	if err != nil {
		t.Fatalf("Envoy Gateway's configs: %v (../shared must sit beside the repository)", err)
	}
	docs := strings.Split(string(data), "\n---\n")
	for i, name := range []string{"route.yaml", "policy.yaml"} {
		var lines []string
		for _, l := range strings.Split(docs[i], "\n") {
			if !strings.HasPrefix(l, "name: ") { // the resource's name, not in the format
				lines = append(lines, l)
			}
		}
		swapFile(t, filepath.Join(dir, name), edit(name, strings.Join(lines, "\n")))
	}
}

// swapFile replaces the file at path with text at once (a rename), as an
// editor or a ConfigMap update does, so that no reload reads it half
// written.
func swapFile(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// The overlay's files: a token bucket on the route's rule, a pool with
// classes on the policy's rule, and the route's rule as a fixed window.
const (
	overlayRoute = `# Envoy Gateway's route: a token bucket
domain: "first-*"
descriptors:
  - key: second-route
    descriptors:
      - key: "rule-*-match-*"
        rate_limit: {algorithm: token_bucket, burst: 10}
`
	overlayPolicy = `domain: "test-namespace/*"
descriptors:
  - key: "test-namespace/*/rule/*"
    descriptors:
      - key: rule-0-match-0
        classes: {key: priority, ceilings: [{value: gold, ceiling: 100%}, {value: free, ceiling: 60%}]}
`
	overlayFixed = `# the route's rule: a fixed window
domain: "first-*"
descriptors:
  - key: second-route
    descriptors:
      - key: "rule-*-match-*"
        rate_limit: {algorithm: fixed_window}
`
	overlayBad = `domain: "first-*"
descriptors:
  - key: second-route
    descriptors:
      - key: "rule-*-match-*"
        rate_limit:
          burst: 3
`
)

// written is the same rules with Sluice's keys written in the files.
func written(alg string) func(file, text string) string {
	return func(file, text string) string {
		if file == "policy.yaml" {
			return strings.Replace(text, "        descriptors: []\n",
				"        classes: {key: priority, ceilings: [{value: gold, ceiling: 100%}, {value: free, ceiling: 60%}]}\n        descriptors: []\n", 1)
		}
		return strings.Replace(text, "          unit: SECOND\n", "          unit: SECOND\n          algorithm: "+alg+"\n", 1)
	}
}

// egCalls sends each request (entries and hits) in turn and returns the
// codes and remaining counts.
func egCalls(t *testing.T, s *sluice, domain string, calls ...[]string) string {
	t.Helper()
	var out []string
	for _, c := range calls {
		d := &rlcommon.RateLimitDescriptor{}
		for i := 0; i+1 < len(c); i += 2 {
			d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: c[i], Value: c[i+1]})
		}
		resp, err := s.Client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatalf("ShouldRateLimit(%s %v): %v", domain, c, err)
		}
		out = append(out, fmt.Sprint(resp.GetOverallCode(), " ", resp.GetStatuses()[0].GetLimitRemaining()))
	}
	return strings.Join(out, ", ")
}

// repeat is n copies of c.
func repeat(c []string, n int) [][]string {
	out := make([][]string, n)
	for i := range out {
		out[i] = c
	}
	return out
}

// earlyInSecond waits until the wall clock is at most 100 ms into a
// second, so that a sequence of calls shorter than that meets no window
// boundary and no token bucket refill (5 a second: one per 200 ms).
func earlyInSecond() {
	if ms := time.Now().Nanosecond() / 1e6; ms > 20 {
		time.Sleep(time.Duration(1000-ms) * time.Millisecond)
	}
}

// configRule returns the rule called name of domain on s's /config, and
// /config's last_error.
func configRule(t *testing.T, s *sluice, domain, name string) (rule map[string]any, lastError []string) {
	t.Helper()
	_, body := httpGet(t, "http://"+loopback(t, s.HTTPAddr)+"/config")
	var page struct {
		LastError []string         `json:"last_error"`
		Rules     []map[string]any `json:"rules"`
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatalf("/config: %v\n%s", err, body)
	}
	var find func(rules []any) map[string]any
	find = func(rules []any) map[string]any {
		for _, r := range rules {
			m, _ := r.(map[string]any)
			if m["rule"] == name {
				return m
			}
			if got := find(asList(m["descriptors"])); got != nil {
				return got
			}
		}
		return nil
	}
	for _, d := range page.Rules {
		if d["domain"] == domain {
			return find(asList(d["descriptors"])), page.LastError
		}
	}
	return nil, page.LastError
}

func asList(v any) []any { l, _ := v.([]any); return l }

// ruleSays is the rule's algorithm, burst, requests_per_unit and what
// changed it, as /config shows them: "token_bucket 10 5 overlay/route.yaml:6".
func ruleSays(rule map[string]any) string {
	rl, _ := rule["rate_limit"].(map[string]any)
	by := ""
	for _, c := range asList(rule["changed_by"]) {
		b, _ := c.(map[string]any)["by"].(string)
		if strings.Contains(b, "/") {
			b = filepath.Base(filepath.Dir(b)) + "/" + filepath.Base(b)
		}
		by += " " + b
	}
	return fmt.Sprint(rl["algorithm"], " ", rl["burst"], " ", rl["requests_per_unit"], by)
}

// waitRule polls s's /config until the rule's ruleSays is want, for at
// most 10 s.
func waitRule(t *testing.T, s *sluice, domain, name, want string) {
	t.Helper()
	var got string
	if eventually(10*time.Second, 50*time.Millisecond, func() bool {
		r, _ := configRule(t, s, domain, name)
		got = ruleSays(r)
		return got == want
	}) {
		return
	}
	t.Fatalf("/config's %s %s: %q, want %q\n%s", domain, name, got, want, s.Log())
}

// TestOverlayEnvoyGateway serves Envoy Gateway's generated config
// (multiple-domains.yaml, its two domains) with cmd/xds-serve to the built
// Sluice, with a policy overlay directory: a token bucket on the route's
// rule and a pool with classes on the policy's, selected by patterns on
// the generated domains and keys, decide as the same rules written in a
// file decide in a second Sluice (each with a real Redis). /config names
// the overlay line that changed each rule. An edit of the overlay making
// the route's rule a fixed window is reloaded and decides as the fixed
// window written in a file; a broken edit is an error at its line, the
// last good overlay kept; a new xDS version keeps the overlay applied.
func TestOverlayEnvoyGateway(t *testing.T) {
	cfgDir, ovDir, fileDir := t.TempDir(), filepath.Join(t.TempDir(), "overlay"), t.TempDir()
	os.Mkdir(ovDir, 0o755)
	egDomains(t, cfgDir, func(_, text string) string { return text })
	swapFile(t, filepath.Join(ovDir, "route.yaml"), overlayRoute)
	swapFile(t, filepath.Join(ovDir, "policy.yaml"), overlayPolicy)
	egDomains(t, fileDir, written("token_bucket\n          burst: 10"))

	xds := startCmd(t, exec.Command(command(t, "xds-serve"), "--addr", "127.0.0.1:0", "--interval", "50ms", "--log-format", "json", cfgDir))
	redisURL := "redis://" + redistest.Addr(t) + "/0"
	s := startSluice(t, "--xds-server", xds.GRPCAddr, "--xds-node-id", "envoy-ratelimit", "--overlay", ovDir,
		"--reload-debounce", "20ms", "--redis-url", redisURL, "--redis-prefix", redistest.Prefix(t.Name()+"xds"))
	f := startSluice(t, "--config", fileDir, "--reload-debounce", "20ms", "--redis-url", redisURL, "--redis-prefix", redistest.Prefix(t.Name()+"file"))

	const route, policy = "second-route_second-route.rule-0-match-0_rule-0-match-0", "test-namespace/test-policy-1/rule/0_test-namespace/test-policy-1/rule/0.rule-0-match-0_rule-0-match-0"
	waitRule(t, s, "first-listener", route, "token_bucket 10 5 overlay/route.yaml:6")
	if r, _ := configRule(t, s, "test-namespace/test-policy-1", policy); r["classes"] == nil || ruleSays(r) != "sliding_window <nil> 5 overlay/policy.yaml:5" {
		t.Errorf("/config's pool rule: %v", r)
	}

	earlyInSecond()
	bucket := repeat(egRoute, 11)
	gotXDS, gotFile := egCalls(t, s, "first-listener", bucket...), egCalls(t, f, "first-listener", bucket...)
	if want := "OK 9, OK 8, OK 7, OK 6, OK 5, OK 4, OK 3, OK 2, OK 1, OK 0, OVER_LIMIT 0"; gotXDS != want || gotFile != want {
		t.Errorf("11 calls on a token bucket of 5 a second, burst 10:\nover xDS with the overlay: %s\nwritten in a file:         %s\nwant %s", gotXDS, gotFile, want)
	}
	free, gold := append(egPolicy[:4:4], "priority", "free"), append(egPolicy[:4:4], "priority", "gold")
	pool := append(repeat(free, 4), repeat(gold, 3)...)
	earlyInSecond()
	gotXDS, gotFile = egCalls(t, s, "test-namespace/test-policy-1", pool...), egCalls(t, f, "test-namespace/test-policy-1", pool...)
	if gotXDS != gotFile || !strings.HasPrefix(gotXDS, "OK 2, OK 1, OK 0, OVER_LIMIT 0, OK ") || !strings.HasSuffix(gotXDS, "OVER_LIMIT 0") {
		t.Errorf("a pool of 5 a second, free up to 60%%, gold 100%%: 4 free then 3 gold calls\nover xDS with the overlay: %s\nwritten in a file:         %s", gotXDS, gotFile)
	}

	// The overlay edited: the route's rule a fixed window, as in the file.
	swapFile(t, filepath.Join(ovDir, "route.yaml"), overlayFixed)
	egDomains(t, fileDir, written("fixed_window"))
	waitRule(t, s, "first-listener", route, "fixed_window <nil> 5 overlay/route.yaml:6")
	waitRule(t, f, "first-listener", route, "fixed_window <nil> 5")
	if ms := time.Now().Nanosecond() / 1e6; ms < 700 || ms > 750 { // five hits late in a second, one early in the next
		time.Sleep(time.Duration((1700-ms)%1000) * time.Millisecond)
	}
	late := egCalls(t, s, "first-listener", repeat(egRoute, 5)...) + " | " + egCalls(t, f, "first-listener", repeat(egRoute, 5)...)
	time.Sleep(time.Duration(1000-time.Now().Nanosecond()/1e6+20) * time.Millisecond)
	next := egCalls(t, s, "first-listener", egRoute) + " | " + egCalls(t, f, "first-listener", egRoute)
	if want := "OK 4, OK 3, OK 2, OK 1, OK 0 | OK 4, OK 3, OK 2, OK 1, OK 0"; late != want || next != "OK 4 | OK 4" {
		t.Errorf("fixed window of 5 a second, 5 hits late in a second then 1 in the next (over xDS | in a file): %s then %s, want %s then OK 4 | OK 4", late, next, want)
	}

	// A broken edit: an error at its line, the last good overlay kept.
	swapFile(t, filepath.Join(ovDir, "route.yaml"), overlayBad)
	want := filepath.Join(ovDir, "route.yaml") + ":7:11: descriptors[0].descriptors[0].rate_limit.burst: burst with algorithm sliding_window"
	eventually(10*time.Second, 50*time.Millisecond, func() bool { return strings.Contains(s.Log(), want) })
	r, lastErr := configRule(t, s, "first-listener", route)
	if !strings.Contains(strings.Join(lastErr, "\n"), want) || ruleSays(r) != "fixed_window <nil> 5 overlay/route.yaml:6" {
		t.Errorf("after a broken overlay: /config's last_error %q (want %q), the rule %q (want the last good overlay's fixed window)", lastErr, want, ruleSays(r))
	}

	// A new xDS version: the overlay stays applied.
	egDomains(t, cfgDir, func(file, text string) string {
		return strings.Replace(text, "requests_per_unit: 5", "requests_per_unit: 7", 1)
	})
	waitRule(t, s, "first-listener", route, "fixed_window <nil> 7 overlay/route.yaml:6")
	if code := egCalls(t, s, "first-listener", egRoute); !strings.HasPrefix(code, "OK") {
		t.Errorf("after xDS version 2: %s", code)
	}
}

// TestProcessDefaultAlgorithm serves Envoy Gateway's generated config with
// cmd/xds-serve to Sluice started with --algorithm fixed_window: every
// rule is a fixed window (the start-up line and /config say so, naming
// the setting), deciding as one: five hits late in a second, and the next
// second admits five again.
func TestProcessDefaultAlgorithm(t *testing.T) {
	cfgDir := t.TempDir()
	egDomains(t, cfgDir, func(_, text string) string { return text })
	xds := startCmd(t, exec.Command(command(t, "xds-serve"), "--addr", "127.0.0.1:0", "--interval", "50ms", "--log-format", "json", cfgDir))
	s := startSluice(t, "--xds-server", xds.GRPCAddr, "--xds-node-id", "envoy-ratelimit", "--algorithm", "fixed_window",
		"--redis-url", "redis://"+redistest.Addr(t)+"/0", "--redis-prefix", redistest.Prefix(t.Name()))
	if !strings.Contains(s.Log(), `"defaults":"algorithm=fixed_window sub_windows=50 token_bucket_burst=100% failure_mode=error cache=false"`) {
		t.Errorf("no start-up line with the defaults in force:\n%s", s.Log())
	}
	const route = "second-route_second-route.rule-0-match-0_rule-0-match-0"
	waitRule(t, s, "first-listener", route, "fixed_window <nil> 5 --algorithm")
	if ms := time.Now().Nanosecond() / 1e6; ms < 700 || ms > 750 {
		time.Sleep(time.Duration((1700-ms)%1000) * time.Millisecond)
	}
	late := egCalls(t, s, "first-listener", repeat(egRoute, 6)...)
	time.Sleep(time.Duration(1000-time.Now().Nanosecond()/1e6+20) * time.Millisecond)
	next := egCalls(t, s, "first-listener", repeat(egRoute, 5)...)
	if late != "OK 4, OK 3, OK 2, OK 1, OK 0, OVER_LIMIT 0" || next != "OK 4, OK 3, OK 2, OK 1, OK 0" {
		t.Errorf("--algorithm fixed_window, 6 hits late in a second then 5 in the next: %s then %s", late, next)
	}
}
