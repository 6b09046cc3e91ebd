package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestCheckWindowTooLong: a window that overflowed int64 (a year x 300) loaded ("ok") and then answered
// INTERNAL on every matching call. sluice check now refuses it, with the
// file, line and column of unit_multiplier.
func TestCheckWindowTooLong(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.yaml")
	write(t, file, "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, unit_multiplier: 300, requests_per_unit: 5}\n")
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"check", dir}, nil, &out, &errOut); code != 1 {
		t.Errorf("check = %d, want 1", code)
	}
	want := file + ":4:47: descriptors[0].rate_limit.unit_multiplier: want an integer from 1 to 10 with unit year (a window is at most 10 years of 365 days), got the integer 300\n"
	if got := errOut.String(); got != want {
		t.Errorf("check stderr = %q, want %q", got, want)
	}
	if out.Len() != 0 {
		t.Errorf("check stdout = %q, want nothing", out.String())
	}
}

// TestCheckConfigTree: with --config-tree, check reads what the server's
// --config-tree reads (every file below the directory, any extension), so a
// stray file the server would refuse fails the check too; without it, only
// the top directory's YAML files.
func TestCheckConfigTree(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yml"), "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "sub", "b.conf"), "domain: b\ndescriptors: []\n")
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), append([]string{"check"}, args...), nil, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, out, _ := run("--config-tree", dir); code != 0 || out != "ok: 2 domains in 2 files\n" {
		t.Errorf("check --config-tree = %d %q, want 0 and both files", code, out)
	}
	if code, out, _ := run(dir); code != 0 || out != "ok: 1 domain in 1 file\n" {
		t.Errorf("check = %d %q, want 0 and the top YAML file only", code, out)
	}
	write(t, filepath.Join(dir, "notes.txt"), "junk\n")
	if code, _, errOut := run("--config-tree", dir); code != 1 || errOut == "" {
		t.Errorf("check --config-tree with a stray file = %d %q, want 1 and its error", code, errOut)
	}
	if code, _, _ := run("--no-such-flag", dir); code != 2 {
		t.Errorf("check with an unknown flag = %d, want 2", code)
	}
}
