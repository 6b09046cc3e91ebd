package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// markdownFiles lists the repository's own pages: the root's, docs/'s and
// those beside the examples and deployments (bench/out holds raw reports).
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata" || path == filepath.Join(repoRoot, "bench", "out")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found %d Markdown files under %s, want the README and docs/", len(files), repoRoot)
	}
	return files
}

var (
	mdLink    = regexp.MustCompile(`\]\(([^()\s]+)\)`)
	mdHeading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	mdFence   = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```")
)

// anchor is GitHub's id of a heading: lower case, punctuation but '-' and
// '_' dropped, spaces to '-'.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the ids of a Markdown file's headings (outside code).
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, m := range mdHeading.FindAllStringSubmatch(mdFence.ReplaceAllString(string(b), ""), -1) {
		ids[anchor(m[1])] = true
	}
	return ids
}

// TestDocsLinks follows every relative link of every page: the file (or
// directory) must exist and a #fragment must name one of its headings.
func TestDocsLinks(t *testing.T) {
	checked := 0
	for _, f := range markdownFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := mdFence.ReplaceAllString(string(b), "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
			}
			st, err := os.Stat(dest)
			if err != nil {
				t.Errorf("%s: link %q: %v", f, target, err)
				continue
			}
			if frag != "" && !st.IsDir() && strings.HasSuffix(dest, ".md") && !anchors(t, dest)[frag] {
				t.Errorf("%s: link %q: %s has no heading #%s", f, target, dest, frag)
			}
			checked++
		}
	}
	if checked < 30 {
		t.Errorf("checked %d links, want the README's and docs' (30 or more)", checked)
	}
}

// readmeBlocks returns the README's fenced code blocks of one language.
func readmeBlocks(t *testing.T, lang string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?ms)^```" + lang + "\n(.*?)^```")
	var out []string
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	return out
}

// quotedArg returns the text between the single quotes after flag in cmd.
func quotedArg(t *testing.T, cmd, flag string) string {
	t.Helper()
	i := strings.Index(cmd, flag+" '")
	if i < 0 {
		t.Fatalf("no %s '...' in %q", flag, cmd)
	}
	rest := cmd[i+len(flag)+2:]
	j := strings.Index(rest, "'")
	if j < 0 {
		t.Fatalf("unclosed quote after %s in %q", flag, cmd)
	}
	return rest[:j]
}

var durationSeconds = regexp.MustCompile(`^[0-9]+s$`)

// normalizeAnswer blanks what changes with the moment of the call (the
// reset times, which the page rounds up to whole seconds, and t= of the
// RateLimit header) after checking their form.
func normalizeAnswer(t *testing.T, v map[string]any) {
	t.Helper()
	for _, s := range v["statuses"].([]any) {
		st := s.(map[string]any)
		d, _ := st["durationUntilReset"].(string)
		if !durationSeconds.MatchString(d) {
			t.Errorf("durationUntilReset %q, want whole seconds", d)
		}
		st["durationUntilReset"] = "N"
	}
	for _, h := range v["responseHeadersToAdd"].([]any) {
		hv := h.(map[string]any)
		hv["value"] = regexp.MustCompile(`;t=[0-9]+`).ReplaceAllString(hv["value"].(string), ";t=N")
	}
}

// TestReadmeQuickStart runs the quick start as the README shows it: the
// server on its defaults (the example config, in memory), the curl call
// to /json, which must answer what the page prints (but for the reset
// times), the grpcurl call's request over gRPC, and the check command.
func TestReadmeQuickStart(t *testing.T) {
	sh := strings.Join(readmeBlocks(t, "sh"), "\n")
	for _, want := range []string{"go run ./cmd/server ", "make test ", "curl -s localhost:8080/json -d", "grpcurl -plaintext -d"} {
		if !strings.Contains(sh, want) {
			t.Fatalf("README's commands lack %q", want)
		}
	}
	s := startSluice(t)

	body := quotedArg(t, sh, "/json -d")
	resp, err := http.Post("http://"+s.HTTPAddr+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	jsonBlocks := readmeBlocks(t, "json")
	if len(jsonBlocks) == 0 {
		t.Fatal("README shows no JSON answer")
	}
	var want map[string]any
	if err := json.Unmarshal([]byte(jsonBlocks[0]), &want); err != nil {
		t.Fatalf("README's JSON answer does not parse: %v", err)
	}
	normalizeAnswer(t, got)
	normalizeAnswer(t, want)
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if !bytes.Equal(gb, wb) {
		t.Errorf("/json answered (reset times blanked)\n%s\nthe README shows\n%s", gb, wb)
	}

	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal([]byte(quotedArg(t, sh, "grpcurl -plaintext -d")), &req); err != nil {
		t.Fatalf("the grpcurl request does not parse: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := s.Client.ShouldRateLimit(ctx, &req)
	if err != nil {
		t.Fatal(err)
	}
	if r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 20 {
		t.Errorf("grpcurl's request answered %v, want OK under per_client_address (20 a minute)", r)
	}

	out, err := exec.Command(binary, "check", filepath.Join(repoRoot, "config")).CombinedOutput()
	if err != nil {
		t.Errorf("check config/: %v\n%s", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minit, requests_per_unit: 1}\n"), 0o644)
	out, err = exec.Command(binary, "check", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), bad+":4:") {
		t.Errorf("check of a bad config: %v\n%s\nwant a non-zero exit and %s:4:col", err, out, bad)
	}
}

// TestReadmeLoadgen runs the README's load test commands, shortened: the
// server on bench/loadtest.yaml and loadgen against it.
func TestReadmeLoadgen(t *testing.T) {
	sh := strings.Join(readmeBlocks(t, "sh"), "\n")
	if !strings.Contains(sh, "go run ./cmd/server --config bench/loadtest.yaml") || !strings.Contains(sh, "go run ./cmd/loadgen -concurrency 16 -duration 10s") {
		t.Fatal("README's load test commands changed; change this test with them")
	}
	s := startSluice(t, "--config", "bench/loadtest.yaml")
	lg := filepath.Join(t.TempDir(), "loadgen")
	build := exec.Command("go", "build", "-o", lg, "./cmd/loadgen")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/loadgen: %v\n%s", err, out)
	}
	out, err := exec.Command(lg, "-target", s.GRPCAddr, "-concurrency", "16", "-duration", "1s", "-json").CombinedOutput()
	if err != nil {
		t.Fatalf("loadgen: %v\n%s", err, out)
	}
	var rep map[string]any
	if err := json.Unmarshal(out[bytes.IndexByte(out, '{'):], &rep); err != nil {
		t.Fatalf("loadgen's report: %v\n%s", err, out)
	}
	if n, _ := rep["requests"].(float64); n < 100 {
		t.Errorf("loadgen made %v requests in 1 s at 16 callers, want at least 100\n%s", rep["requests"], out)
	}
}
