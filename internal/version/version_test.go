package version

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// repoRoot is the repository, seen from this package's directory.
const repoRoot = "../.."

// semver is a release version: MAJOR.MINOR.PATCH with an optional
// pre-release, no leading v (the tag adds it).
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$`)

// imageTag finds a version named as an image tag or a chart's version:
// sluice:0.3.0, registry.example.com/sluice:0.3.0, kustomize's newTag,
// Chart.yaml's version and appVersion, a values file's tag.
var imageTag = regexp.MustCompile(`(?m)(?:\bsluice:v?|\bnewTag:\s*"?|^(?:appVersion|version):\s*"?|^\s*tag:\s*"?)(\d+\.\d+\.\d+[0-9A-Za-z.+-]*)`)

// readVersion returns the committed release version, VERSION's one line.
func readVersion(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return "", err
	}
	v := strings.TrimSuffix(string(b), "\n")
	if !semver.MatchString(v) {
		return "", fmt.Errorf("VERSION: %q is not a semantic version (MAJOR.MINOR.PATCH, no v, one line)", v)
	}
	return v, nil
}

// tagMismatches returns an error for every image tag or chart version in the
// docs and manifests under root that is not want.
func tagMismatches(root, want string) ([]error, int, error) {
	var errs []error
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			switch rel {
			case ".git", "dist", "bin", "bench/out":
				return filepath.SkipDir
			}
			return nil
		}
		if !namesTags(d.Name()) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range imageTag.FindAllSubmatchIndex(b, -1) {
			n++
			if got := string(b[m[2]:m[3]]); got != want {
				line := 1 + strings.Count(string(b[:m[0]]), "\n")
				errs = append(errs, fmt.Errorf("%s:%d: %q names version %s, VERSION says %s", rel, line, b[m[0]:m[1]], got, want))
			}
		}
		return nil
	})
	return errs, n, err
}

// namesTags reports whether a file of this name is a doc or manifest that
// may name Sluice's image tag.
func namesTags(name string) bool {
	switch filepath.Ext(name) {
	case ".md", ".yaml", ".yml":
		return name != "CHANGELOG.md" // it names every release, by design
	}
	return name == "Dockerfile"
}

// TestDocsAndManifestsNameVERSION: every doc and manifest naming Sluice's
// image tag (or the chart's version) names the one in VERSION, so a user
// copying any of them gets the same release.
func TestDocsAndManifestsNameVERSION(t *testing.T) {
	v, err := readVersion(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	errs, n, err := tagMismatches(repoRoot, v)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range errs {
		t.Error(err)
	}
	// README, MIGRATING, the kustomize and Envoy Gateway manifests, the
	// Istio example and the chart name it: if none is found, the pattern broke.
	if n < 8 {
		t.Errorf("found %d image tags, want at least 8: has imageTag stopped matching?", n)
	}
}

// TestTagMismatchesRejects proves the check bites on each form it reads.
func TestTagMismatchesRejects(t *testing.T) {
	for _, doc := range []string{
		"    docker build -t sluice:0.1.0 .\n",
		"image: registry.example.com/sluice:v0.2.0\n",
		"images:\n  - name: sluice\n    newTag: 0.1.0\n",
		"apiVersion: v2\nappVersion: \"0.2.0\"\n",
		"image:\n  tag: 0.2.0\n",
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "x.yaml"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		errs, _, err := tagMismatches(dir, "0.3.0")
		if err != nil || len(errs) != 1 || !strings.Contains(errs[0].Error(), "x.yaml:") {
			t.Errorf("%q: errors %v (%v), want one naming x.yaml", doc, errs, err)
		}
	}
}

// TestReleaseBuildUsesVERSION: the release build checks its tag against
// VERSION and stamps what the binary reports, the Makefile stamps VERSION,
// and the Dockerfile's default version is VERSION.
func TestReleaseBuildUsesVERSION(t *testing.T) {
	const pkg = "github.com/sluicehq/sluice/internal/version.stamp"
	v, err := readVersion(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ file, want string }{
		{".goreleaser.yaml", pkg + "={{ .Version }}"},
		{".goreleaser.yaml", `test "v$(cat VERSION)" = "{{ .Tag }}"`},
		{".goreleaser.yaml", `{{ readFile "VERSION" | trim }}`},
		{"Makefile", "VERSION := $(shell cat VERSION)"},
		{"Makefile", pkg + "=$(VERSION)"},
		{"Dockerfile", "\nARG VERSION=" + v + "\n"},
		{"Dockerfile", pkg + "=${VERSION}"},
	} {
		b, err := os.ReadFile(filepath.Join(repoRoot, c.file))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), c.want) {
			t.Errorf("%s does not contain %s", c.file, c.want)
		}
	}
}

// TestChangelogHasVERSION: CHANGELOG.md has a section for VERSION.
func TestChangelogHasVERSION(t *testing.T) {
	v, err := readVersion(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^## \[` + regexp.QuoteMeta(v) + `\] - \d{4}-\d{2}-\d{2}$`).Match(b) {
		t.Errorf("CHANGELOG.md has no section \"## [%s] - YYYY-MM-DD\"", v)
	}
}

func TestFromBuildInfo(t *testing.T) {
	for _, c := range []struct {
		bi   debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, "v0.3.0"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "69332f6aabbccddeeff"}, {Key: "vcs.modified", Value: "true"}}}, "dev-69332f6aabbc-dirty"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
	} {
		if got := fromBuildInfo(&c.bi); got != c.want {
			t.Errorf("fromBuildInfo(%+v) = %q, want %q", c.bi, got, c.want)
		}
	}
}
