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
	commandsMu sync.Mutex
	commands   = map[string]string{} // built binary of each cmd/NAME
)

// command builds cmd/NAME once per run, beside the sluice binary, and
// returns its path.
func command(t *testing.T, name string) string {
	t.Helper()
	commandsMu.Lock()
	defer commandsMu.Unlock()
	if bin, ok := commands[name]; ok {
		return bin
	}
	bin := filepath.Join(filepath.Dir(binary), name)
	build := exec.Command("go", "build", "-o", bin, "./cmd/"+name)
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building cmd/%s: %v (run 'go build ./cmd/%s' to see why)\n%s", name, err, name, out)
	}
	commands[name] = bin
	return bin
}

// loadgen builds cmd/loadgen once per run and returns its path.
func loadgen(t *testing.T) string { return command(t, "loadgen") }

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
	s := startSluice(t, "--config", "config", "--ui-top-values", "10", "--redis-url", "redis://"+addr+"/0", "--redis-prefix", redistest.Prefix(t.Name()),
		"--store-timeout", "500ms")
	// A value "" (its row shows "(empty)"), and a rule that fixes every
	// value (its one row's label is empty).
	s.call(t, "edge", []string{"remote_address", ""})
	s.call(t, "edge", []string{"generic_key", "beta_upload"})
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
	eventually(30*time.Second, 1500*time.Millisecond, func() bool {
		decisions2, top2 = text(t, ctx, cardText(rule, "decisions")), text(t, ctx, cardText(rule, "top"))
		polls = eval[string](t, ctx, "document.body.dataset.polls")
		rate, _ := strconv.ParseFloat(strings.ReplaceAll(decisions2, ",", ""), 64)
		return rate > 200 && decisions2 != decisions1 && top2 != top1 && len(hotOver(t, ctx)) > 0
	})
	t.Logf("decisions/s %s -> %s after %s polls", decisions1, decisions2, polls)
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
	checkEmptyValues(t, ctx)
	checkIdleRules(t, ctx)
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

// checkEmptyValues checks that an empty value, and an empty label, show
// as a styled "(empty)" rather than as nothing.
func checkEmptyValues(t *testing.T, ctx context.Context) {
	t.Helper()
	for rule, want := range map[string]string{"edge/per_client_address": "remote_address=(empty)", "edge/beta_upload_trial": "(empty)"} {
		got := eval[[]string](t, ctx, `[...document.querySelectorAll('[data-rule="`+rule+`"] tbody td.value')].map(td => td.textContent)`)
		if len(got) != 1 || got[0] != want {
			t.Errorf("%s: top values %q, want one row %q", rule, got, want)
			continue
		}
		if style := eval[string](t, ctx, `getComputedStyle(document.querySelector('[data-rule="`+rule+`"] td.value .none')).fontStyle`); style != "italic" {
			t.Errorf("%s: the empty value's font-style is %q, want it set apart (italic)", rule, style)
		}
	}
}

// checkIdleRules checks the order of the rule cards: the three rules with
// traffic (per_api_key under load, and the two of checkEmptyValues) first
// and in full, the other 9 of the example config's 12 after them, compact.
func checkIdleRules(t *testing.T, ctx context.Context) {
	t.Helper()
	type card struct {
		Rule        string
		Idle, Chart bool
		Top, Height float64
	}
	cards := eval[[]card](t, ctx, `[...document.querySelectorAll("[data-rule]")].map(e => ({Rule: e.dataset.rule,
		Idle: e.hasAttribute("data-idle"), Chart: !!e.querySelector("svg"),
		Top: e.getBoundingClientRect().top + scrollY, Height: e.getBoundingClientRect().height}))`)
	var busy, idle []card
	for _, c := range cards {
		if c.Idle {
			idle = append(idle, c)
		} else {
			busy = append(busy, c)
		}
	}
	var names []string
	for _, c := range busy {
		names = append(names, c.Rule)
	}
	if want := "edge/beta_upload_trial edge/per_api_key edge/per_client_address"; strings.Join(names, " ") != want {
		t.Fatalf("rules in full: %q, want %q", names, want)
	}
	if len(idle) != 10 {
		t.Fatalf("%d idle rules, want 10 (13 in the config, 3 with traffic): %+v", len(idle), cards)
	}
	last := busy[len(busy)-1]
	for _, c := range idle {
		if c.Chart || c.Height > last.Height/4 || c.Top < last.Top+last.Height {
			t.Errorf("idle rule %s: chart %v, %.0f px high, at %.0f px (busy rules end at %.0f px, %.0f px high); want compact (under a quarter), without chart, after them",
				c.Rule, c.Chart, c.Height, c.Top, last.Top+last.Height, last.Height)
		}
	}
	if busy[0].Top > 300 {
		t.Errorf("the first busy rule is %.0f px down the page, want it near the top", busy[0].Top)
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

// uiPool is config/edge.yaml's checkout pool with the same classes, at 100
// an hour: what a class admits and sheds does not depend on how fast the
// calls come.
const uiPool = `domain: edge
descriptors:
  - key: pool
    value: checkout_db
    rate_limit: {unit: hour, requests_per_unit: 100}
    classes:
      key: priority
      ceilings:
        - {value: critical, ceiling: 100%}
        - {value: default, ceiling: 80%}
        - {value: batch, ceiling: 70%}
        - {value: test, ceiling: 50%}
`

// TestStatusPagePoolClasses loads /ui in headless Chromium, then sends a
// burst on a checkout pool of 100 an hour (uiPool; default 80%): the pool's
// card has a row per class, in config order, with its ceiling and the hits
// per second admitted and shed over the rates' 10 s (100 default: 80
// admitted, 20 shed; 5 critical, all admitted). The browser starts before
// the calls, so that the page reads them while they are inside its window.
func TestStatusPagePoolClasses(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(uiPool), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startSluice(t, "--config", dir)
	ctx := browser(t)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+s.HTTPAddr+"/ui"), chromedp.WaitVisible(chromedp.CSS(`[data-rule="edge/pool_checkout_db"]`))); err != nil {
		t.Fatalf("loading /ui: %v\n%s", err, s.Log())
	}
	send := func(class string, n int) {
		for range n {
			s.call(t, "edge", []string{"pool", "checkout_db", "priority", class})
		}
	}
	send("default", 100)
	send("critical", 5)
	sel := cardText("edge/pool_checkout_db", "classes")
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel))); err != nil {
		t.Fatalf("the pool's classes on the page: %v\n%s", err, s.Log())
	}
	want := "critical 100% 0.5 0, default 80% 8 2, batch 70% 0 0, test 50% 0 0"
	var got string
	eventually(10*time.Second, 500*time.Millisecond, func() bool {
		got = eval[string](t, ctx, `[...document.querySelectorAll('`+sel+` tbody tr')].map(r =>
			[...r.cells].map(c => c.textContent).join(" ")).join(", ")`)
		return got == want
	})
	if got != want {
		t.Errorf("the pool's classes on the page: %q, want %q", got, want)
	}
}
