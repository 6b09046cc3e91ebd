//go:build compat

// The compat tests load envoyproxy/ratelimit's own configs from shared/compat,
// which sits beside the repository (the workplace's shared folder; CI puts a
// copy beside the clone). They are behind the "compat" build tag so that
// 'make test' passes in any clone; 'make compat' (which .ci/run calls) runs
// them. The project's own golden tests cover the same rules.

package descriptors_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// sharedCompat returns shared/compat, which sits beside the repository root
// (the workplace's shared folder, and a copy of it beside the clone in CI).
func sharedCompat(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("..", "..", "..", "shared", "compat")
	if _, err := os.Stat(filepath.Join(dir, "valid")); err != nil {
		t.Fatalf("compat configs missing: %v; the shared/ folder must sit beside the repository root (../shared from it)", err)
	}
	return dir
}

// TestCompatValid loads each envoyproxy/ratelimit config that its own tests
// load, one at a time: an existing config must load unchanged.
func TestCompatValid(t *testing.T) {
	dir := filepath.Join(sharedCompat(t), "valid")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no files in %s (%v)", dir, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if _, err := descriptors.Load(f); err != nil {
				t.Errorf("Load(%q):\n%v", f, err)
			}
		})
	}
	t.Run("merge_domain_key1+2", func(t *testing.T) {
		a, b := filepath.Join(dir, "merge_domain_key1.yaml"), filepath.Join(dir, "merge_domain_key2.yaml")
		_, err := descriptors.Load(a, b)
		if err == nil || !strings.Contains(err.Error(), `domain "test-domain" is already defined in `+a) {
			t.Errorf("Load(%q, %q) = %v, want a duplicate domain error", a, b, err)
		}
	})
}

// TestCompatInvalid checks that each config that envoyproxy/ratelimit
// rejects is rejected here too, with a positioned error on that file.
func TestCompatInvalid(t *testing.T) {
	compat := sharedCompat(t)
	dir := filepath.Join(compat, "invalid")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no files in %s (%v)", dir, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			paths := []string{f}
			if filepath.Base(f) == "duplicate_domain.yaml" {
				paths = []string{filepath.Join(compat, "valid", "basic_config.yaml"), f}
			}
			c, err := descriptors.Load(paths...)
			if err == nil {
				t.Fatalf("Load(%q) = %v, nil; want an error", paths, c)
			}
			for _, e := range errorList(t, err) {
				if !positioned.MatchString(e.Error()) {
					t.Errorf("error %q has no file:line:col: prefix", e)
				}
				if e.File != f {
					t.Errorf("error %q is on %s, want %s", e, e.File, f)
				}
			}
			t.Log(err)
		})
	}
}
