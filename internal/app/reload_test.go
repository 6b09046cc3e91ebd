package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/internal/source"
)

// limitConfig is a one-rule config: key "k" limited to n a minute.
func limitConfig(n int) string {
	return "domain: reload\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: " + itoa(n) + "\n"
}

func itoa(n int) string { return strconv.Itoa(n) }

// runAt launches a server on config path with a short debounce.
func runAt(t *testing.T, path string) (*server, rlsv3.RateLimitServiceClient) {
	t.Helper()
	r := launch(t, "--config", path, "--reload-debounce", "50ms", "--health-interval", "20ms")
	return r.srv, r.client
}

// limitInForce asks for key value v and returns the requests_per_unit in
// force, or -1 when the call fails or no limit applies.
func limitInForce(c rlsv3.RateLimitServiceClient, v string) int {
	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "reload", Descriptors: edgeRequest([]string{"k", v}).Descriptors})
	if err != nil || resp.GetStatuses()[0].GetCurrentLimit() == nil {
		return -1
	}
	return int(resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
}

// eventually waits until limitInForce is want.
func eventually(t *testing.T, c rlsv3.RateLimitServiceClient, want int, what string) {
	t.Helper()
	got, i := 0, 0
	if waitUntil(5*time.Second, 20*time.Millisecond, func() bool {
		got = limitInForce(c, "probe"+itoa(i))
		i++
		return got == want
	}) {
		return
	}
	t.Fatalf("%s: limit in force %d, want %d", what, got, want)
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func getConfig(t *testing.T, srv *server) map[string]any {
	t.Helper()
	resp, err := http.Get("http://" + srv.httpLn.Addr().String() + "/config")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return out
}

func TestReloadDirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "reload.yaml")
	write(t, file, limitConfig(5))
	srv, c := runAt(t, dir)
	eventually(t, c, 5, "initial")

	// Edit in place.
	write(t, file, limitConfig(6))
	eventually(t, c, 6, "edit in place")

	// Rename-replace, as editors save.
	tmp := filepath.Join(dir, ".reload.yaml.swp")
	write(t, tmp, limitConfig(7))
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	eventually(t, c, 7, "rename-replace")

	// A broken file keeps the last good config and is shown by /config.
	write(t, file, limitConfig(8)+"    bogus: 1\n")
	waitUntil(5*time.Second, 20*time.Millisecond, func() bool {
		_, ok := getConfig(t, srv)["last_error"]
		return ok
	})
	cfg := getConfig(t, srv)
	errs, _ := cfg["last_error"].([]any)
	if len(errs) != 1 || !strings.Contains(errs[0].(string), "reload.yaml:7:5: descriptors[0].bogus: unknown key \"bogus\"") {
		t.Errorf("/config last_error = %v", cfg["last_error"])
	}
	if got := limitInForce(c, "after-broken"); got != 7 {
		t.Errorf("after a broken write the limit in force is %d, want 7", got)
	}
	// Fixing it loads the fix.
	write(t, file, limitConfig(9))
	eventually(t, c, 9, "fixed")
	if cfg := getConfig(t, srv); cfg["last_error"] != nil || cfg["loaded_at"] == nil {
		t.Errorf("/config after the fix = %v", cfg)
	}
}

// TestReloadKeepsCounters checks that a changed requests_per_unit applies to
// the count already made.
func TestReloadKeepsCounters(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "reload.yaml")
	write(t, file, limitConfig(3))
	_, c := runAt(t, dir)
	for range 3 {
		limitInForce(c, "same")
	}
	write(t, file, limitConfig(4))
	eventually(t, c, 4, "raised")
	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "reload", Descriptors: edgeRequest([]string{"k", "same"}).Descriptors})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 0 {
		t.Errorf("4th call under the raised limit: %v, want OK with 0 remaining", resp)
	}
}

// TestReloadSymlinkSwap swaps a symlinked directory the way a Kubernetes
// ConfigMap volume does (..data -> timestamped directory, files linked
// through ..data), and a plain symlinked config directory.
func TestReloadSymlinkSwap(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, n int) {
		os.MkdirAll(filepath.Join(root, name), 0o755)
		write(t, filepath.Join(root, name, "reload.yaml"), limitConfig(n))
	}
	swap := func(link, target string) {
		tmp := filepath.Join(root, link+".tmp")
		if err := os.Symlink(target, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("configmap", func(t *testing.T) {
		cm := filepath.Join(root, "cm")
		os.MkdirAll(cm, 0o755)
		mk("cm/..v1", 11)
		if err := os.Symlink("..v1", filepath.Join(cm, "..data")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("..data/reload.yaml", filepath.Join(cm, "reload.yaml")); err != nil {
			t.Fatal(err)
		}
		_, c := runAt(t, cm)
		eventually(t, c, 11, "initial")
		mk("cm/..v2", 12)
		swap("cm/..data", "..v2")
		eventually(t, c, 12, "..data swap")
	})

	t.Run("symlinked directory", func(t *testing.T) {
		mk("v1", 21)
		if err := os.Symlink("v1", filepath.Join(root, "current")); err != nil {
			t.Fatal(err)
		}
		_, c := runAt(t, filepath.Join(root, "current"))
		eventually(t, c, 21, "initial")
		mk("v2", 22)
		swap("current", "v2")
		eventually(t, c, 22, "directory swap")
		// Edits inside the new target are seen too.
		write(t, filepath.Join(root, "v2", "reload.yaml"), limitConfig(23))
		eventually(t, c, 23, "edit after swap")
	})
}

// TestStartWithoutValidConfig: a bad config at start serves NOT_SERVING and
// UNAVAILABLE until a good one arrives.
func TestStartWithoutValidConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "reload.yaml")
	write(t, file, "domain: [\n")
	srv, c := runAt(t, dir)
	resp, err := http.Get("http://" + srv.httpLn.Addr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(body), "no config loaded") {
		t.Errorf("/readyz = %d %q, want 503 no config loaded", resp.StatusCode, body)
	}
	if got := limitInForce(c, "x"); got != -1 {
		t.Errorf("limit without config = %d, want a failed call", got)
	}
	write(t, file, limitConfig(5))
	eventually(t, c, 5, "first good config")
}

// TestReloadIgnoresUnrelatedFiles: a log file written beside the config
// directory, or a file in it that is not YAML, reloads nothing.
func TestReloadIgnoresUnrelatedFiles(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "cfg")
	os.MkdirAll(dir, 0o755)
	write(t, filepath.Join(dir, "reload.yaml"), limitConfig(5))
	srv, c := runAt(t, dir)
	eventually(t, c, 5, "initial")
	for i := range 20 {
		write(t, filepath.Join(root, "sluice.log"), strings.Repeat("x", i))
		write(t, filepath.Join(dir, "notes.txt"), strings.Repeat("y", i))
	}
	// A real change still reloads. The watcher takes its events in order,
	// so once the change is in force every unrelated write before it was
	// seen: the loads are the first and this one, none for those writes.
	writeAtomic(t, filepath.Join(dir, "reload.yaml"), limitConfig(6)) // no load sees it half written
	eventually(t, c, 6, "real change")
	resp, err := http.Get("http://" + srv.httpLn.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `sluice_config_loads_total{result="ok"} 2`+"\n") {
		t.Errorf("unrelated writes reloaded the config:\n%s", grepLines(string(body), "sluice_config_loads_total"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// writeAtomic replaces path the way editors save: a hidden temporary file
// renamed over it, so that a reader never sees half a file.
func writeAtomic(t *testing.T, path, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	write(t, tmp, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestReloadWhileWritesContinue: a config rewritten more often than the debounce never reloaded (50 writes
// in 10 s with a 250 ms debounce: 0 reloads). With writes every 50 ms for
// 2 s, a new limit must be in force before the writes stop.
func TestReloadWhileWritesContinue(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "reload.yaml")
	write(t, file, limitConfig(5))
	r := launch(t, "--config", dir, "--reload-debounce", "250ms", "--health-interval", "20ms")
	eventually(t, r.client, 5, "initial")

	start := time.Now()
	var seen time.Duration // when a rewritten limit was first in force
	for i := 0; time.Since(start) < 2*time.Second; i++ {
		writeAtomic(t, file, limitConfig(100+i))
		time.Sleep(50 * time.Millisecond)
		if seen == 0 && limitInForce(r.client, "probe"+itoa(i)) >= 100 {
			seen = time.Since(start)
		}
	}
	if seen == 0 {
		t.Fatalf("no reload during 2 s of writes every 50 ms (debounce 250ms, debounce-max %v)", source.MaxWaitFactor*250*time.Millisecond)
	}
	t.Logf("first reload in force %v after the writes began", seen.Round(time.Millisecond))
	if src, _ := getConfig(t, r.srv)["source"].(map[string]any); src["kind"] != "file" || src["path"] != dir {
		t.Errorf("/config source = %v, want kind file, path %s", src, dir)
	}
}
