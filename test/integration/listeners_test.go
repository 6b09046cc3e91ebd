package integration

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

	// With the setting, /json takes 10 hits and a refund of them, which
	// gives them back wherever they still count (a sub-window may have
	// rolled in between).
	open := startSluice(t, "--config", "config", "--redis-url", redisURL, "--json-hits-addend")
	entries := `"entries":[{"key":"api_key","value":"tenant-c"},{"key":"route","value":"search"}]`
	if code, msg := postJSON(t, open, `{"domain":"edge","descriptors":[{`+entries+`,"hits_addend":10}]}`); code != http.StatusOK {
		t.Fatalf("with --json-hits-addend: /json hits_addend 10 = %d %q, want 200", code, msg)
	}
	if r := open.call(t, "edge", []string{"api_key", "tenant-c", "route", "search"}); r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after 10 hits through /json: %v, want OVER_LIMIT", r.GetOverallCode())
	}
	if code, msg := postJSON(t, open, `{"domain":"edge","descriptors":[{`+entries+`,"is_negative_hits":true,"hits_addend":3000}]}`); code != http.StatusOK {
		t.Fatalf("with --json-hits-addend: /json refund = %d %q, want 200", code, msg)
	}
	if r := open.call(t, "edge", []string{"api_key", "tenant-c", "route", "search"}); r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("after an allowed refund of 3000: %v, want OK", r.GetOverallCode())
	}
}

// TestSpecialFilesInConfigDir: a named pipe and a link to /dev/zero in the
// config directory are skipped, each named in a config warning, while the
// regular file loads and decides: the process listens at once and /healthz
// and /readyz answer (the pipe had blocked the start for ever, before any
// listener; /dev/zero had grown RSS to gigabytes). A file over
// --config-max-bytes is refused by name, with the limit.
func TestSpecialFilesInConfigDir(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "good.yaml"), "domain: good\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")
	pipe, zero := filepath.Join(dir, "pipe.yaml"), filepath.Join(dir, "zero.yaml")
	if err := syscall.Mkfifo(pipe, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	s := startSluice(t, "--config", dir)
	if code, body := httpGet(t, "http://"+s.HTTPAddr+"/healthz"); code != 200 {
		t.Errorf("/healthz = %d %q, want 200", code, body)
	}
	if code, body := httpGet(t, "http://"+s.HTTPAddr+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d %q, want 200 (good.yaml loaded)\n%s", code, body, s.Log())
	}
	for _, want := range []string{pipe + ": skipped: not a regular file (a named pipe)", zero + ": skipped: not a regular file (a device)"} {
		if !logHas(s.Log(), "config warning", want) {
			t.Errorf("no config warning %q:\n%s", want, s.Log())
		}
	}
	if r := s.call(t, "good", []string{"k", "v"}); r.GetStatuses()[0].GetLimitRemaining() != 1 {
		t.Errorf("good.yaml's limit: %v, want 1 remaining of 2", r)
	}

	bigDir := t.TempDir()
	big := filepath.Join(bigDir, "big.yaml")
	writeFile(t, big, "domain: big\n# "+strings.Repeat("x", 2000)+"\n")
	b := startSluice(t, "--config", bigDir, "--config-max-bytes", "1024")
	want := big + ": file is 2015 bytes, over the limit of 1024 bytes for a config file (--config-max-bytes raises it)"
	if !logHas(b.Log(), "config error, no config in force", want) {
		t.Errorf("no config error %q:\n%s", want, b.Log())
	}
	if code, body := httpGet(t, "http://"+b.HTTPAddr+"/readyz"); code != 503 || !strings.Contains(body, "no config loaded") {
		t.Errorf("/readyz with only an oversized file = %d %q, want 503 no config loaded", code, body)
	}
}

// logHas reports whether log (JSON lines) has a line with message msg
// whose error is want.
func logHas(log, msg, want string) bool {
	for _, line := range strings.Split(log, "\n") {
		var l struct {
			Msg   string `json:"msg"`
			Error string `json:"error"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == msg && l.Error == want {
			return true
		}
	}
	return false
}

func writeFile(t *testing.T, name, data string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
