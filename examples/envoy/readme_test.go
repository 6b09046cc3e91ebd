package envoy_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/envoysim"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
	"github.com/sluicehq/sluice/pkg/rls"
)

// TestReadmeLimitedResponse replays docs/envoy-demo.md's "A limited response looks
// like this" (bob's 11th search in a minute, 5 s into it, on the compose
// file's settings) through the descriptors envoy.yaml sends, Sluice's
// decision and the headers Envoy builds (its own x-envoy-ratelimited and
// x-ratelimit-* included), and requires that page to show exactly those
// headers, in Envoy's order.
func TestReadmeLimitedResponse(t *testing.T) {
	b, err := parseBootstrap(readFile(t, envoyYAML))
	if err != nil {
		t.Fatal(err)
	}
	ds, err := sendFor(b, newRequest("/v1/search", map[string]string{"x-api-key": "bob"}))
	if err != nil {
		t.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: ds[0].Domain}
	for _, d := range ds {
		rd := &rlcommon.RateLimitDescriptor{}
		for _, e := range d.Entries {
			rd.Entries = append(rd.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		req.Descriptors = append(req.Descriptors, rd)
	}
	now := time.Unix(1_800_000_000-1_800_000_000%60+5, 0)
	core := ratelimit.New(ratelimit.Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{Now: func() time.Time { return now }})})
	core.SetConfig(loadConfig(t, filepath.Join(repoRoot, "config")))
	hs, err := rls.ParseHeaderSet(loadCompose(t).Services["sluice"].Environment["SLUICE_RESPONSE_HEADERS"])
	if err != nil {
		t.Fatal(err)
	}
	svc := rls.New(rls.Options{Decider: core, Headers: hs})
	var resp *rlsv3.RateLimitResponse
	for range 11 {
		if resp, err = svc.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("11th search: %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	var want strings.Builder
	want.WriteString("HTTP/1.1 429 Too Many Requests\n")
	for _, h := range envoysim.LimitedResponseHeaders(resp) {
		fmt.Fprintf(&want, "%s: %s\n", h.Name, h.Value)
	}
	readme := string(readFile(t, filepath.Join(repoRoot, "docs", "envoy-demo.md")))
	if !strings.Contains(readme, "```\n"+want.String()+"```\n") {
		t.Errorf("docs/envoy-demo.md's limited response is not what Envoy sends; paste this block:\n%s", want.String())
	}
}
