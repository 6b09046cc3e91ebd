package descriptors_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

var update = flag.Bool("update", false, "rewrite the .golden files under testdata/")

// positioned matches an error that starts with "file:line:col: ".
var positioned = regexp.MustCompile(`^[^\n]+:[1-9][0-9]*:[1-9][0-9]*: `)

// errorList splits an error from Load into its *Error values, failing the
// test if any of them is something else.
func errorList(t *testing.T, err error) []*descriptors.Error {
	t.Helper()
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else {
		list = []error{err}
	}
	var out []*descriptors.Error
	for _, e := range list {
		de, ok := e.(*descriptors.Error)
		if !ok {
			t.Fatalf("error %q is a %T, want *descriptors.Error", e, e)
		}
		out = append(out, de)
	}
	return out
}

// checkGolden compares got with the golden file, or rewrites it with -update.
func checkGolden(t *testing.T, golden, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("got:\n%s\nwant (%s):\n%s", got, golden, want)
	}
}

// goldenCases lists NAME for every testdata/DIR/NAME.yaml file and every
// testdata/DIR/NAME directory (a case that needs several files).
func goldenCases(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		switch {
		case e.IsDir():
			names = append(names, e.Name())
		case strings.HasSuffix(e.Name(), ".yaml"):
			names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
		}
	}
	if len(names) == 0 {
		t.Fatalf("no cases in %s", dir)
	}
	return names
}

func casePath(dir, name string) string {
	p := filepath.Join(dir, name)
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return p
	}
	return p + ".yaml"
}

// TestInvalid loads each testdata/invalid case, which must fail, and
// compares the whole error text with NAME.golden.
func TestInvalid(t *testing.T) {
	const dir = "testdata/invalid"
	for _, name := range goldenCases(t, dir) {
		t.Run(name, func(t *testing.T) {
			path := casePath(dir, name)
			c, err := descriptors.Load(path)
			if err == nil {
				t.Fatalf("Load(%q) = %v, nil; want an error", path, c)
			}
			if c != nil {
				t.Errorf("Load(%q) returned a Config with its error", path)
			}
			for _, e := range errorList(t, err) {
				if !positioned.MatchString(e.Error()) {
					t.Errorf("error %q has no file:line:col: prefix", e)
				}
			}
			checkGolden(t, filepath.Join(dir, name+".golden"), err.Error()+"\n")
		})
	}
}

// TestWarnings loads each testdata/warnings case, which must load, and
// compares its warnings with NAME.golden.
func TestWarnings(t *testing.T) {
	const dir = "testdata/warnings"
	for _, name := range goldenCases(t, dir) {
		t.Run(name, func(t *testing.T) {
			path := casePath(dir, name)
			c, err := descriptors.Load(path)
			if err != nil {
				t.Fatalf("Load(%q): %v", path, err)
			}
			if len(c.Warnings) == 0 {
				t.Fatalf("Load(%q) gave no warnings", path)
			}
			checkGolden(t, filepath.Join(dir, name+".golden"), errors.Join(c.Warnings...).Error()+"\n")
		})
	}
}

// TestRepoConfig loads every file under the repository's config/ directory,
// which the server serves by default.
func TestRepoConfig(t *testing.T) {
	dir := filepath.Join("..", "..", "config")
	c, err := descriptors.Load(dir)
	if err != nil {
		t.Fatalf("Load(%q):\n%v", dir, err)
	}
	if len(c.Domains()) == 0 {
		t.Fatalf("Load(%q) has no domains", dir)
	}
	for _, w := range c.Warnings {
		t.Logf("warning: %v", w)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func domainNames(c *descriptors.Config) []string {
	var names []string
	for _, d := range c.Domains() {
		names = append(names, d.Name)
	}
	return names
}

// TestLoadConfigMap loads a directory laid out like a Kubernetes ConfigMap
// mount: visible symlinks into a hidden ..data directory, which must load
// once, and hidden files, other extensions and subdirectories are skipped.
func TestLoadConfigMap(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "..2026_01_01", "a.yaml"), "domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	writeFile(t, filepath.Join(dir, "..2026_01_01", "b.yml"), "domain: b\n")
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), "not: loaded\n")
	writeFile(t, filepath.Join(dir, "README.md"), "not: loaded\n")
	writeFile(t, filepath.Join(dir, "sub", "c.yaml"), "domain: c\n")
	for _, link := range [][2]string{
		{"..2026_01_01", filepath.Join(dir, "..data")},
		{filepath.Join("..data", "a.yaml"), filepath.Join(dir, "a.yaml")},
		{filepath.Join("..data", "b.yml"), filepath.Join(dir, "b.yml")},
	} {
		if err := os.Symlink(link[0], link[1]); err != nil {
			t.Fatal(err)
		}
	}
	c, err := descriptors.Load(dir)
	if err != nil {
		t.Fatalf("Load(%q): %v", dir, err)
	}
	if got, want := domainNames(c), []string{"a", "b"}; !slices.Equal(got, want) {
		t.Errorf("Load(%q) domains = %q, want %q", dir, got, want)
	}
	wantFiles := []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yml")}
	if !slices.Equal(c.Files, wantFiles) {
		t.Errorf("Load(%q).Files = %q, want %q", dir, c.Files, wantFiles)
	}
	if r := c.Match("a", []descriptors.Entry{{Key: "k", Value: "v"}}); r == nil || r.File != filepath.Join(dir, "a.yaml") {
		t.Errorf("Match(a, k=v) = %+v, want the rule from %s", r, wantFiles[0])
	}
}

// TestLoadPaths covers what Load does with the paths themselves.
func TestLoadPaths(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	one := filepath.Join(dir, "one.conf") // a file named directly loads whatever its extension
	writeFile(t, one, "domain: one\n")

	for _, tc := range []struct {
		name  string
		paths []string
		want  string // error text, "" for success
	}{
		{"no paths gives an empty config", nil, ""},
		{"a file named directly", []string{one}, ""},
		{"missing file", []string{missing}, missing + ": cannot read: no such file or directory"},
		{"directory without yaml", []string{empty}, empty + ": no *.yaml or *.yml file in directory"},
		{"all problems at once", []string{missing, empty}, empty + ": no *.yaml or *.yml file in directory\n" + missing + ": cannot read: no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := descriptors.Load(tc.paths...)
			if tc.want == "" {
				if err != nil || c == nil {
					t.Fatalf("Load(%q) = %v, %v; want a Config", tc.paths, c, err)
				}
				return
			}
			if err == nil || err.Error() != tc.want || c != nil {
				t.Errorf("Load(%q) = %v, %v; want nil, %q", tc.paths, c, err, tc.want)
			}
		})
	}
}

// TestTree checks the fields of loaded rules: FullKey, Lineage, flags,
// metadata, limits and positions.
func TestTree(t *testing.T) {
	c, err := descriptors.Parse(descriptors.Source{Name: "mem.yaml", Data: []byte(`domain: api
failure_mode: deny
descriptors:
  - key: tenant
    value: acme
    shadow_mode: true
    metadata: {team: core, tags: [a, b]}
    descriptors:
      - key: path
        value: /v1/*
        share_threshold: yes
        rate_limit: {unit: MINUTE, requests_per_unit: 0, unit_multiplier: 5, name: acme_v1, algorithm: sliding_window}
      - key: path
        rate_limit: {unlimited: true, name: open}
  - key: remote_address
    quota_mode: true
    rate_limit:
      unit: second
      requests_per_unit: 4294967295
      replaces: [{name: acme_v1}]
`)})
	if err != nil {
		t.Fatal(err)
	}
	d := c.Domain("api")
	if d == nil || d.File != "mem.yaml" || d.FailureMode != descriptors.FailureModeDeny || len(d.Rules) != 2 {
		t.Fatalf("Domain(api) = %+v", d)
	}
	if c.Domain("nope") != nil {
		t.Errorf("Domain(nope) != nil")
	}
	tenant := d.Rules[0]
	wild, open := tenant.Children[0], tenant.Children[1]
	remote := d.Rules[1]

	for _, tc := range []struct {
		r       *descriptors.Rule
		fullKey string
		line    int
		column  int
		lineage []*descriptors.Rule
	}{
		{tenant, "api.tenant_acme", 4, 5, []*descriptors.Rule{tenant}},
		{wild, "api.tenant_acme.path_/v1/*", 9, 9, []*descriptors.Rule{tenant, wild}},
		{open, "api.tenant_acme.path", 13, 9, []*descriptors.Rule{tenant, open}},
		{remote, "api.remote_address", 15, 5, []*descriptors.Rule{remote}},
	} {
		if tc.r.FullKey != tc.fullKey || tc.r.Line != tc.line || tc.r.Column != tc.column || tc.r.File != "mem.yaml" {
			t.Errorf("rule %s at %s:%d:%d, want %s at mem.yaml:%d:%d", tc.r.FullKey, tc.r.File, tc.r.Line, tc.r.Column, tc.fullKey, tc.line, tc.column)
		}
		if !slices.Equal(tc.r.Lineage, tc.lineage) {
			t.Errorf("%s Lineage = %v, want %v", tc.r.FullKey, tc.r.Lineage, tc.lineage)
		}
	}
	if !tenant.ShadowMode || tenant.Limit != nil || tenant.Metadata["team"] != "core" || len(tenant.Metadata["tags"].([]any)) != 2 {
		t.Errorf("tenant = %+v", tenant)
	}
	if !wild.Wildcard || !wild.ShareThreshold || wild.Limit == nil {
		t.Fatalf("wild = %+v", wild)
	}
	if got := *wild.Limit; got.Unit != descriptors.Minute || got.RequestsPerUnit != 0 || got.UnitMultiplier != 5 ||
		got.Name != "acme_v1" || got.Algorithm != limiter.SlidingWindow || got.Window().Minutes() != 5 {
		t.Errorf("wild.Limit = %+v", got)
	}
	if !open.Unlimited || open.Limit != nil {
		t.Errorf("open = %+v, want Unlimited and no Limit", open)
	}
	if l := remote.Limit; !remote.QuotaMode || l == nil || l.RequestsPerUnit != 4294967295 || l.UnitMultiplier != 1 ||
		!slices.Equal(l.Replaces, []string{"acme_v1"}) || l.Algorithm != limiter.SlidingWindow {
		t.Errorf("remote = %+v, limit %+v", remote, l)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("Warnings = %v, want none", c.Warnings)
	}
}

// TestDomainsSorted checks that Domains is sorted by name and a copy.
func TestDomainsSorted(t *testing.T) {
	c, err := descriptors.Parse(
		descriptors.Source{Name: "z.yaml", Data: []byte("domain: a\n")},
		descriptors.Source{Name: "a.yaml", Data: []byte("domain: c\n")},
		descriptors.Source{Name: "m.yaml", Data: []byte("domain: b\n")},
	)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := domainNames(c), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("Domains() = %q, want %q", got, want)
	}
	if got, want := c.Files, []string{"a.yaml", "m.yaml", "z.yaml"}; !slices.Equal(got, want) {
		t.Errorf("Files = %q, want %q", got, want)
	}
	c.Domains()[0] = nil
	if c.Domains()[0] == nil {
		t.Error("Domains() returned the Config's own slice")
	}
	var nilConfig *descriptors.Config
	if nilConfig.Domains() != nil || nilConfig.Domain("a") != nil {
		t.Error("a nil Config has domains")
	}
}

// TestYAMLFeatures checks that configs written for envoyproxy/ratelimit's
// YAML 1.1 decoder load the same way: anchors, aliases and merge keys,
// yes/no bools, numbers as values, a leading "---" and an empty trailing
// document.
func TestYAMLFeatures(t *testing.T) {
	c := mustParse(t, `---
domain: api
descriptors:
  - &base
    key: status
    value: 200
    shadow_mode: yes
    rate_limit: &limit {unit: Second, requests_per_unit: 1_000}
  - <<: *base
    value: 404
    shadow_mode: off
  - key: other
    rate_limit: *limit
---
`)
	for _, tc := range []struct {
		value  string
		shadow bool
	}{{"200", true}, {"404", false}} {
		r := c.Match("api", entries("status", tc.value))
		if r == nil || r.ShadowMode != tc.shadow || r.Limit == nil || r.Limit.RequestsPerUnit != 1000 || r.Limit.Unit != descriptors.Second {
			t.Errorf("Match(status=%s) = %+v, want shadow %v and 1000/second", tc.value, r, tc.shadow)
		}
	}
	if r := c.Match("api", entries("other", "x")); r == nil || r.Limit == nil || r.Limit.RequestsPerUnit != 1000 {
		t.Errorf("Match(other=x) = %+v, want the aliased limit", r)
	}
}

// TestFiles checks the file selection that Load uses and a watcher shares:
// the default reads *.yaml and *.yml, and another Selection reads others.
func TestFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "b.yml"), "domain: b\n")
	writeFile(t, filepath.Join(dir, "a.yaml"), "domain: a\n")
	writeFile(t, filepath.Join(dir, "notes.txt"), "not: loaded\n")
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), "not: loaded\n")
	writeFile(t, filepath.Join(dir, "sub", "c.yaml"), "domain: c\n")
	writeFile(t, filepath.Join(dir, ".hidden", "d.yaml"), "domain: d\n")
	writeFile(t, filepath.Join(dir, "..2026_01_01", "e.yaml"), "domain: e\n")
	if err := os.Symlink("..2026_01_01", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.yaml", filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub", filepath.Join(dir, "subdir.yaml")); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "sub", "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	in := func(names ...string) []string {
		for i, n := range names {
			names[i] = filepath.Join(dir, n)
		}
		return names
	}
	for _, tc := range []struct {
		name  string
		sel   descriptors.Selection
		paths []string
		want  []string
		err   string
	}{
		{"yaml of a directory", descriptors.YAMLFiles, []string{dir}, in("a.yaml", "b.yml", "link.yaml"), ""},
		{"a file named directly", descriptors.YAMLFiles, in("notes.txt"), in("notes.txt"), ""},
		{"every extension", descriptors.Selection{}, []string{dir}, in("a.yaml", "b.yml", "link.yaml", "notes.txt"), ""},
		{"only .txt", descriptors.Selection{Ext: []string{".txt"}}, []string{dir}, in("notes.txt"), ""},
		{"names found are returned with the errors", descriptors.YAMLFiles, append(in("missing.yaml"), dir, empty),
			in("a.yaml", "b.yml", "link.yaml"),
			filepath.Join(dir, "missing.yaml") + ": cannot read: no such file or directory\n" + empty + ": no *.yaml or *.yml file in directory"},
		{"empty directory, every extension", descriptors.Selection{}, []string{empty}, nil, empty + ": no file in directory"},
		// envoyproxy/ratelimit's runtime layout: every file below the
		// directory, of any extension; dotfiles when asked, "..*" never.
		{"recursive", descriptors.Selection{Recursive: true}, []string{dir}, in("a.yaml", "b.yml", "link.yaml", "notes.txt", "sub/c.yaml"), ""},
		{"recursive with dotfiles", descriptors.Selection{Recursive: true, Dotfiles: true}, []string{dir},
			in(".hidden/d.yaml", ".hidden.yaml", "a.yaml", "b.yml", "link.yaml", "notes.txt", "sub/c.yaml"), ""},
		{"recursive, empty", descriptors.Selection{Recursive: true}, []string{empty}, nil, empty + ": no file in directory or below it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.sel.Files(tc.paths...)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Files(%q) = %q, want %q", tc.paths, got, tc.want)
			}
			if gotErr := fmt.Sprint(err); tc.err == "" && err != nil || tc.err != "" && gotErr != tc.err {
				t.Errorf("Files(%q) error = %v, want %q", tc.paths, err, tc.err)
			}
		})
	}
	// Load reads exactly the files Files names.
	c, err := descriptors.Load(dir)
	if err == nil {
		t.Fatalf("Load(%q) = %v, want the duplicate domain of link.yaml", dir, c)
	}
	files, _ := descriptors.Files(dir)
	if want := `domain "a" is already defined in ` + files[0]; !strings.Contains(err.Error(), want) {
		t.Errorf("Load(%q) = %v, want %q", dir, err, want)
	}
}

// TestSpecialFiles: a named pipe and a link to /dev/zero in a config
// directory are skipped with a warning naming each, and the regular files
// load (reading either had blocked for ever or grown without end); a pipe
// named directly is an error, at once; a file over MaxFileBytes is an error
// naming it and the limit, whether its size shows (a regular file) or not
// (a /proc file, which reports 0).
func TestSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("domain: good\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pipe := filepath.Join(dir, "pipe.yaml")
	if err := syscall.Mkfifo(pipe, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, make([]byte, descriptors.DefaultMaxFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	sel := descriptors.Selection{Ext: []string{".yaml"}, MaxFileSetting: "--config-max-bytes"}
	load := func(paths ...string) (*descriptors.Config, error) {
		type result struct {
			cfg *descriptors.Config
			err error
		}
		done := make(chan result, 1)
		go func() {
			cfg, err := sel.Load(paths...)
			done <- result{cfg, err}
		}()
		select {
		case r := <-done:
			return r.cfg, r.err
		case <-time.After(5 * time.Second):
			t.Fatalf("Load(%v) did not return within 5s", paths)
			return nil, nil
		}
	}

	cfg, err := load(dir)
	if err != nil {
		t.Fatalf("Load(dir with a pipe and /dev/zero) = %v, want the regular file loaded", err)
	}
	var warns []string
	for _, w := range cfg.Warnings {
		warns = append(warns, w.Error())
	}
	want := []string{pipe + ": skipped: not a regular file (a named pipe)", zero + ": skipped: not a regular file (a device)"}
	if !slices.Equal(warns, want) || cfg.Domain("good") == nil || !slices.Equal(cfg.Files, []string{good}) {
		t.Errorf("Load(dir) = files %v, warnings %q; want %v and warnings %q", cfg.Files, warns, []string{good}, want)
	}

	for _, tc := range []struct {
		name, path string
		sel        descriptors.Selection
		want       string
	}{
		{"pipe named directly", pipe, sel, pipe + ": cannot read: not a regular file (a named pipe)"},
		{"over the default limit", big, sel, fmt.Sprintf("%s: file is %d bytes, over the limit of %d bytes for a config file (--config-max-bytes raises it)",
			big, descriptors.DefaultMaxFileBytes+1, descriptors.DefaultMaxFileBytes)},
		{"over a limit set", good, descriptors.Selection{MaxFileBytes: 16}, good + ": file is 90 bytes, over the limit of 16 bytes for a config file"},
		{"a /proc file reporting size 0", "/proc/self/status", descriptors.Selection{MaxFileBytes: 16}, "/proc/self/status: file is over the limit of 16 bytes for a config file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel = tc.sel
			if _, err := load(tc.path); err == nil || err.Error() != tc.want {
				t.Errorf("Load(%s) = %v, want %q", tc.path, err, tc.want)
			}
			if _, err := tc.sel.ReadFile(tc.path); err == nil || err.Error() != tc.want {
				t.Errorf("ReadFile(%s) = %v, want %q", tc.path, err, tc.want)
			}
		})
	}
}
