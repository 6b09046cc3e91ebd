package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/redistest"
)

// chromiumPath is where Debian's chromium package puts the browser; make
// test installs it when missing.
const chromiumPath = "/usr/bin/chromium"

// artifactDir is where browser tests write screenshots: $SLUICE_TEST_ARTIFACTS,
// else test/artifacts (ignored by git).
func artifactDir(t *testing.T) string {
	dir := os.Getenv("SLUICE_TEST_ARTIFACTS")
	if dir == "" {
		dir, _ = filepath.Abs("../artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

var (
	loadgenOnce sync.Once
	loadgenBin  string
	loadgenErr  error
)

// loadgen builds cmd/loadgen once per run and returns its path.
func loadgen(t *testing.T) string {
	loadgenOnce.Do(func() {
		loadgenBin = filepath.Join(filepath.Dir(binary), "loadgen")
		build := exec.Command("go", "build", "-o", loadgenBin, "./cmd/loadgen")
		build.Dir = "../.."
		if out, err := build.CombinedOutput(); err != nil {
			loadgenErr = err
			t.Logf("%s", out)
		}
	})
	if loadgenErr != nil {
		t.Fatalf("building cmd/loadgen: %v (run 'go build ./cmd/loadgen' to see why)", loadgenErr)
	}
	return loadgenBin
}

// browser starts headless Debian chromium (no browser download, no network
// beyond loopback: background networking, component updates, sync and QUIC
// off, a fresh profile) and returns a chromedp context on one tab.
func browser(t *testing.T) context.Context {
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("%s not found: run 'make test' (it installs it) or 'apt-get install chromium'", chromiumPath)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", chromiumPath, err)
	}
	return ctx
}

// text returns the text of the element sel selects.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// startLoadgen runs cmd/loadgen against target for at most 40 s: 300
// requests/s on api_key values of a Zipf popularity, a fifth of them on 3
// hot keys that cross per_api_key (100 a minute) within seconds.
func startLoadgen(t *testing.T, target string) {
	lg := exec.Command(loadgen(t), "-target", target, "-domain", "edge", "-entry-keys", "api_key", "-keys", "200",
		"-skew", "zipf", "-rate", "300", "-concurrency", "8", "-over-share", "0.2", "-hot-keys", "3", "-hot-prefix", "hot-",
		"-duration", "40s")
	if err := lg.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Process.Kill(); lg.Wait() })
}

// cardText is the text of one field of a rule's card on the status page.
func cardText(rule, field string) string {
	return `[data-rule="` + rule + `"] [data-field="` + field + `"]`
}

// TestStatusPageInBrowser loads /ui in headless Chromium against the built
// binary on Redis while cmd/loadgen drives it, and checks what an operator
// sees: the store healthy, a rule's decisions per second and its top values
// changing from one poll to the next, the hot values over their limit, no
// request leaving the server, and a layout that fits a phone. It writes
// screenshots (laptop and phone) to the artefact directory.
func TestStatusPageInBrowser(t *testing.T) {
	addr := redistest.Addr(t)
	s := startSluice(t, "--config", "config", "--redis-url", "redis://"+addr+"/0", "--redis-prefix", redistest.Prefix(t.Name()),
		"--store-timeout", "500ms")
	startLoadgen(t, s.GRPCAddr)

	ctx := browser(t)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	base := "http://" + s.HTTPAddr
	const rule = "edge/per_api_key"
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui"), chromedp.WaitVisible(chromedp.CSS(`[data-rule="`+rule+`"] table`))); err != nil {
		t.Fatalf("loading /ui: %v\n%s", err, s.Log())
	}
	store, decisions1, top1 := text(t, ctx, "#store-pill"), text(t, ctx, cardText(rule, "decisions")), text(t, ctx, cardText(rule, "top"))
	if store != "redis healthy" {
		t.Errorf("store pill = %q, want \"redis healthy\"", store)
	}
	// Wait for the rates to cover a few seconds of load, then for the page
	// to show other numbers than at first.
	var decisions2, top2, polls string
	deadline := time.Now().Add(30 * time.Second)
	for {
		time.Sleep(1500 * time.Millisecond)
		decisions2, top2 = text(t, ctx, cardText(rule, "decisions")), text(t, ctx, cardText(rule, "top"))
		polls = eval[string](t, ctx, "document.body.dataset.polls")
		rate, _ := strconv.ParseFloat(strings.ReplaceAll(decisions2, ",", ""), 64)
		if rate > 200 && decisions2 != decisions1 && top2 != top1 && len(hotOver(t, ctx)) > 0 || time.Now().After(deadline) {
			t.Logf("decisions/s %s -> %s after %s polls", decisions1, decisions2, polls)
			break
		}
	}
	if decisions2 == decisions1 || top2 == top1 {
		t.Errorf("the page did not change: decisions/s %q -> %q, top %q -> %q", decisions1, decisions2, top1, top2)
	}
	if rate, _ := strconv.ParseFloat(strings.ReplaceAll(decisions2, ",", ""), 64); rate < 200 || rate > 400 {
		t.Errorf("decisions/s = %q, want about 300", decisions2)
	}
	// The hot keys are over their limit: the page says so in their rows.
	if len(hotOver(t, ctx)) == 0 {
		t.Errorf("no hot key shown over limit in %q", top2)
	}
	dir := artifactDir(t)
	shot(t, ctx, filepath.Join(dir, "status-page-laptop.png"), 1280, 900)
	shot(t, ctx, filepath.Join(dir, "status-page-phone.png"), 390, 844)
	if eval[bool](t, ctx, `document.documentElement.scrollWidth > window.innerWidth + 1`) {
		t.Errorf("on a 390 px wide phone the page scrolls sideways")
	}
	// Everything the page loaded (document, CSS, JS, every poll) came
	// from Sluice itself.
	for _, u := range eval[[]string](t, ctx, `[location.href, ...performance.getEntriesByType("resource").map(e => e.name)]`) {
		if !strings.HasPrefix(u, base+"/") {
			t.Errorf("the page requested %s, outside Sluice", u)
		}
	}
}

// hotOver returns the rows of per_api_key's top values that are hot keys
// with hits over the limit.
func hotOver(t *testing.T, ctx context.Context) []string {
	return eval[[]string](t, ctx, `[...document.querySelectorAll('[data-rule="edge/per_api_key"] tbody tr')]
		.filter(tr => tr.cells[0].textContent.startsWith("api_key=hot-") && tr.cells[2].textContent !== "0")
		.map(tr => tr.textContent)`)
}

// shot sets the viewport to w x h (CSS pixels, as a device of that size),
// lets the page re-render, and writes a full-page PNG to path.
func shot(t *testing.T, ctx context.Context, path string, w, h int64) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(w, h), chromedp.Sleep(1200*time.Millisecond)); err != nil { // one poll at the new size
		t.Fatalf("viewport %dx%d: %v", w, h, err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
