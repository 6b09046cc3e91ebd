package source

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// fakeSink is a Sink that only holds the config.
type fakeSink struct{ cfg *descriptors.Config }

func (s *fakeSink) SetConfig(c *descriptors.Config) { s.cfg = c }
func (s *fakeSink) Config() *descriptors.Config     { return s.cfg }

// scriptSource is a Source that is not files, as the xDS source is: it
// delivers what it builds from Documents, then waits for the end.
type scriptSource struct {
	docs [][]*descriptors.Document // one build per entry
	err  error                     // returned at once if set
	// delivered, when set, is closed once every build was delivered (and
	// handled: Deliver returns after the State has dealt with it).
	delivered chan struct{}
}

func (s *scriptSource) Load(Deliver) bool { return false }

func (s *scriptSource) Run(ctx context.Context, deliver Deliver) error {
	if s.err != nil {
		return s.err
	}
	for _, docs := range s.docs {
		deliver(descriptors.Build(docs...))
	}
	if s.delivered != nil {
		close(s.delivered)
	}
	<-ctx.Done()
	return nil
}

func (s *scriptSource) Info() Info { return Info{Kind: "xds"} }

func xdsDocument(name, domain string) *descriptors.Document {
	return &descriptors.Document{File: "xds:" + name, Domain: descriptors.Set(domain)}
}

// TestConfigSourceSeam drives State with a source that is not files: a
// config that builds goes into force, one that does not keeps it and shows
// its positioned errors in the status that /config renders, in the metrics
// and the logs.
func TestConfigSourceSeam(t *testing.T) {
	src := &scriptSource{docs: [][]*descriptors.Document{
		{xdsDocument("a", "api")},
		{xdsDocument("a", "api"), {File: "xds:b"}},
	}, delivered: make(chan struct{})}
	sink := &fakeSink{}
	core, logs := observer.New(zap.InfoLevel)
	cs := NewState(prometheus.NewRegistry(), sink, src, zap.New(core))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		cs.Run(ctx)
		close(done)
	}()
	select {
	case <-src.delivered:
	case <-time.After(5 * time.Second):
		t.Error("the source's two builds were not delivered within 5 s")
	}
	cancel()
	<-done

	if sink.cfg == nil || sink.cfg.Domain("api") == nil || !slices.Equal(sink.cfg.Files, []string{"xds:a"}) {
		t.Fatalf("config in force = %+v, want the first build (domain api from xds:a)", sink.cfg)
	}
	if ok, bad, last := testutil.ToFloat64(cs.reloads.WithLabelValues("ok")), testutil.ToFloat64(cs.reloads.WithLabelValues("error")),
		testutil.ToFloat64(cs.lastOK); ok != 1 || bad != 1 || last != 0 {
		t.Errorf("loads ok %v, error %v, last success %v; want 1, 1, 0", ok, bad, last)
	}
	page := cs.Status()
	if page.Source.Kind != "xds" || !slices.Equal(page.Files, []string{"xds:a"}) || !slices.Equal(page.Domains, []string{"api"}) ||
		!slices.Equal(page.LastError, []string{"xds:b: domain: missing domain"}) {
		t.Errorf("status for /config = %+v", page)
	}
	errLogs := logs.FilterMessage("config error, keeping the config in force").All()
	if len(errLogs) != 1 || errLogs[0].ContextMap()["config_source"] != "xds" || errLogs[0].ContextMap()["error"] != "xds:b: domain: missing domain" {
		t.Errorf("error logs = %v", errLogs)
	}
}

// TestConfigSourceCannotRun checks that a source that cannot run is logged
// and keeps the config in force.
func TestConfigSourceCannotRun(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	sink := &fakeSink{}
	cs := NewState(prometheus.NewRegistry(), sink, &scriptSource{err: errors.New("no route to server")}, zap.New(core))
	cs.Run(context.Background())
	got := logs.FilterMessage("cannot watch config, hot reload is off").All()
	if len(got) != 1 || got[0].Level != zapcore.ErrorLevel || got[0].ContextMap()["error"] != "no route to server" {
		t.Errorf("logs = %v, want one error naming the cause", logs.All())
	}
}

// TestFileSourceFingerprint checks that the file source loads only when a
// file that its own selection picks changed.
func TestFileSourceFingerprint(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), "domain: a\n")
	fs := newFileSource(dir, descriptors.YAMLFiles, 0, zap.NewNop())
	var last *descriptors.Config
	deliver := func(c *descriptors.Config, err error) {
		if err != nil {
			t.Errorf("load: %v", err)
		}
		last = c
	}
	for _, step := range []struct {
		name string
		do   func()
		want bool     // loaded
		doms []string // domains in force after the step
	}{
		{"first load", func() {}, true, []string{"a"}},
		{"nothing changed", func() {}, false, []string{"a"}},
		{"a file the selection skips", func() { write(t, filepath.Join(dir, "notes.txt"), "domain: notes\n") }, false, []string{"a"}},
		{"a hidden file", func() { write(t, filepath.Join(dir, ".b.yaml"), "domain: x\n") }, false, []string{"a"}},
		{"a new config file", func() { write(t, filepath.Join(dir, "b.yml"), "domain: b\n") }, true, []string{"a", "b"}},
		{"an edit", func() { write(t, filepath.Join(dir, "a.yaml"), "domain: a2\n") }, true, []string{"a2", "b"}},
		{"a selection that reads *.txt too", func() { fs.sel = descriptors.Selection{Ext: []string{".yaml", ".yml", ".txt"}} },
			true, []string{"a2", "b", "notes"}},
	} {
		step.do()
		if loaded := fs.load(deliver); loaded != step.want {
			t.Errorf("%s: load = %v, want %v", step.name, loaded, step.want)
		}
		var doms []string
		for _, d := range last.Domains() {
			doms = append(doms, d.Name)
		}
		if !slices.Equal(doms, step.doms) {
			t.Errorf("%s: domains %q, want %q", step.name, doms, step.doms)
		}
	}
}

// TestDebounce checks the wait before a reload: the debounce after the last
// change, but at most the debounce-max after the first change of a burst.
func TestDebounce(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	d := debounce{wait: 250 * time.Millisecond, max: MaxWaitFactor * 250 * time.Millisecond}
	for _, step := range []struct {
		at    time.Time
		fired bool // the timer fired before this change
		want  time.Duration
	}{
		{ms(0), false, 250 * time.Millisecond},
		{ms(50), false, 250 * time.Millisecond},
		{ms(800), false, 200 * time.Millisecond}, // the burst began at 0: load by 1000
		{ms(990), false, 10 * time.Millisecond},
		{ms(1000), false, 0},
		{ms(1200), false, 0}, // past the bound and not yet fired: load now
		{ms(1300), true, 250 * time.Millisecond},
		{ms(1400), false, 250 * time.Millisecond},
	} {
		if step.fired {
			d.fired()
		}
		if got := d.event(step.at); got != step.want {
			t.Errorf("event at %v = %v, want %v", step.at.Sub(t0), got, step.want)
		}
	}
	zero := debounce{}
	if got := zero.event(t0); got != 0 {
		t.Errorf("zero debounce: event = %v, want 0", got)
	}
}

// TestLoadFirstIsBounded: a first load that does not end within its wait
// lets the start go on (loadFirst returns false at the wait), and its
// outcome is delivered once it ends; one that ends in time returns true.
func TestLoadFirstIsBounded(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), "domain: a\n")
	fs := newFileSource(dir, descriptors.YAMLFiles, 0, zap.NewNop())
	release, delivered := make(chan struct{}), make(chan *descriptors.Config, 1)
	start := time.Now()
	if fs.loadFirst(func(c *descriptors.Config, _ error) { <-release; delivered <- c }, 50*time.Millisecond) {
		t.Fatal("loadFirst with a load that does not end = true, want false")
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("loadFirst returned after %v, want about its 50ms wait", waited)
	}
	close(release)
	select {
	case c := <-delivered:
		if c == nil || c.Domain("a") == nil {
			t.Errorf("the late load delivered %v, want domain a", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the late load delivered nothing")
	}
	write(t, filepath.Join(dir, "a.yaml"), "domain: b\n")
	if !fs.loadFirst(func(*descriptors.Config, error) {}, 5*time.Second) {
		t.Error("loadFirst with a quick load = false, want true")
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestConfigLoadedLineListsTenFiles checks that the "config loaded" line
// names at most ten files and counts the rest, however many the config has
// (a directory of 100,000 files made it one 3.6 MB line), while /config's
// status keeps them all.
func TestConfigLoadedLineListsTenFiles(t *testing.T) {
	for _, tc := range []struct {
		files     int
		wantNames int
		wantMore  any // config_files_more, nil when absent
	}{
		{1, 1, nil},
		{10, 10, nil},
		{11, 10, int64(1)},
		{2500, 10, int64(2490)},
	} {
		var docs []*descriptors.Document
		for i := range tc.files {
			docs = append(docs, xdsDocument(fmt.Sprintf("f%05d", i), fmt.Sprintf("d%05d", i)))
		}
		core, logs := observer.New(zap.InfoLevel)
		cs := NewState(prometheus.NewRegistry(), &fakeSink{}, &scriptSource{}, zap.New(core))
		cs.deliver(descriptors.Build(docs...))
		got := logs.FilterMessage("config loaded").All()
		if len(got) != 1 {
			t.Fatalf("%d files: %d config loaded lines, want 1", tc.files, len(got))
		}
		m := got[0].ContextMap()
		names, _ := m["config_file"].([]any)
		if len(names) != tc.wantNames || names[0] != "xds:f00000" || names[len(names)-1] != fmt.Sprintf("xds:f%05d", tc.wantNames-1) {
			t.Errorf("%d files: config_file lists %d names from %v, want the first %d", tc.files, len(names), names[:min(len(names), 2)], tc.wantNames)
		}
		if m["config_files_more"] != tc.wantMore || m["domains"] != int64(tc.files) {
			t.Errorf("%d files: config_files_more = %v, domains = %v; want %v and %d", tc.files, m["config_files_more"], m["domains"], tc.wantMore, tc.files)
		}
		if n := len(cs.Status().Files); n != tc.files {
			t.Errorf("%d files: /config's status lists %d files, want all", tc.files, n)
		}
	}
}

// TestLeanLoadsAtGoPace checks that files are read with the collector's
// target at most Go's default and that the target in force comes back
// after: the server's 400 let a load's garbage grow the heap to five times
// what the config holds.
func TestLeanLoadsAtGoPace(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, tc := range []struct{ inForce, during int }{
		{400, loadGCPercent},
		{loadGCPercent, loadGCPercent},
		{50, 50},
		{-1, -1}, // GOGC=off: a GOMEMLIMIT rules, left as it is
	} {
		debug.SetGCPercent(tc.inForce)
		var during int
		lean(func() {
			during = debug.SetGCPercent(tc.inForce)
			debug.SetGCPercent(during)
		})
		after := debug.SetGCPercent(100)
		if during != tc.during || after != tc.inForce {
			t.Errorf("GC target %d: %d during the load, %d after; want %d and %d", tc.inForce, during, after, tc.during, tc.inForce)
		}
	}
}
