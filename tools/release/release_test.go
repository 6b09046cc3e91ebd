package release

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// repo is the repository's root, from this package's directory.
const repo = "../.."

// goreleaser is the part of .goreleaser.yaml these tests read.
type goreleaser struct {
	Before struct {
		Hooks []string `yaml:"hooks"`
	} `yaml:"before"`
	Archives []struct {
		ID    string      `yaml:"id"`
		Meta  bool        `yaml:"meta"`
		Files []fileEntry `yaml:"files"`
	} `yaml:"archives"`
	Checksum struct {
		ExtraFiles []struct {
			Glob string `yaml:"glob"`
		} `yaml:"extra_files"`
	} `yaml:"checksum"`
	Release struct {
		ExtraFiles []struct {
			Glob string `yaml:"glob"`
		} `yaml:"extra_files"`
	} `yaml:"release"`
}

// fileEntry is one of an archive's files: a glob, or {src, dst}.
type fileEntry struct {
	Src, Dst string
}

func (f *fileEntry) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		f.Src = n.Value
		return nil
	}
	var v struct {
		Src string `yaml:"src"`
		Dst string `yaml:"dst"`
	}
	err := n.Decode(&v)
	f.Src, f.Dst = v.Src, v.Dst
	return err
}

func readConfig(t *testing.T) *goreleaser {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, ".goreleaser.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c goreleaser
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf(".goreleaser.yaml: %v", err)
	}
	return &c
}

// expand returns the files of the repository a glob of an archive names,
// relative to the root, as goreleaser's fileglob finds them for the forms
// the config uses: a path, '*' within one name, and {a,b}; a directory
// stands for every file below it.
func expand(t *testing.T, glob string) []string {
	t.Helper()
	if strings.Contains(glob, "**") || strings.Contains(glob, "{{") {
		t.Fatalf("archive file %q: expand understands paths, * and {a,b}; teach it this form", glob)
	}
	var out []string
	for _, g := range braces(glob) {
		matches, err := filepath.Glob(filepath.Join(repo, g))
		if err != nil {
			t.Fatalf("archive file %q: %v", glob, err)
		}
		for _, m := range matches {
			filepath.WalkDir(m, func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(repo, p)
					out = append(out, filepath.ToSlash(rel))
				}
				return err
			})
		}
	}
	return out
}

// braces expands the {a,b} groups of glob.
func braces(glob string) []string {
	i := strings.IndexByte(glob, '{')
	j := strings.IndexByte(glob, '}')
	if i < 0 || j < i {
		return []string{glob}
	}
	var out []string
	for _, alt := range strings.Split(glob[i+1:j], ",") {
		out = append(out, braces(glob[:i]+alt+glob[j+1:])...)
	}
	return out
}

// archived returns the files of the archive id, each as its path in the
// archive, and where it comes from in the repository.
func archived(t *testing.T, c *goreleaser, id string) map[string]string {
	t.Helper()
	for _, a := range c.Archives {
		if a.ID != id {
			continue
		}
		files := map[string]string{}
		for _, f := range a.Files {
			got := expand(t, f.Src)
			if len(got) == 0 {
				t.Errorf("archive %s: %q matches no file", id, f.Src)
			}
			for _, src := range got {
				dst := src
				if f.Dst != "" {
					rel, _ := filepath.Rel(filepath.FromSlash(f.Src), filepath.FromSlash(src))
					dst = path.Join(f.Dst, filepath.ToSlash(rel))
				}
				files[dst] = src
			}
		}
		return files
	}
	t.Fatalf(".goreleaser.yaml has no archive %q", id)
	return nil
}

var (
	mdLink  = regexp.MustCompile(`\]\(([^()\s]+)\)`)
	mdFence = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```")
	scheme  = regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`)
)

// TestArchivedLinksResolve checks that every relative link of every page
// in the binary's archive lands on a file or directory the archive holds:
// the archived MIGRATING.md once linked docs that were left out.
func TestArchivedLinksResolve(t *testing.T) {
	files := archived(t, readConfig(t), "sluice")
	holds := func(p string) bool {
		if _, ok := files[p]; ok {
			return true
		}
		for f := range files {
			if strings.HasPrefix(f, p+"/") {
				return true
			}
		}
		return false
	}
	var pages []string
	for f := range files {
		if strings.HasSuffix(f, ".md") {
			pages = append(pages, f)
		}
	}
	slices.Sort(pages)
	for _, want := range []string{"README.md", "docs/MIGRATING.md", "SECURITY.md", "LICENSE"} {
		if !holds(want) {
			t.Errorf("the archive lacks %s", want)
		}
	}
	checked := 0
	for _, page := range pages {
		b, err := os.ReadFile(filepath.Join(repo, files[page]))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(mdFence.ReplaceAllString(string(b), ""), -1) {
			link, _, _ := strings.Cut(m[1], "#")
			if link == "" || scheme.MatchString(link) {
				continue
			}
			checked++
			if target := path.Clean(path.Join(path.Dir(page), link)); !holds(target) {
				t.Errorf("%s links %s, which the archive lacks (add %s to its files in .goreleaser.yaml)", page, m[1], target)
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked %d links in %d pages, want the docs' many", checked, len(pages))
	}
	for f := range files {
		if strings.HasSuffix(f, ".go") {
			t.Errorf("the archive holds Go source %s", f)
		}
	}
}

// hookOut is the -out of the before hook that runs sluice-image, and
// makeOut that of the Makefile's image target; both run in tools/.
var (
	hookOut = regexp.MustCompile(`go -C tools run ./cmd/sluice-image .*-out (\S+?)'?$`)
	makeOut = regexp.MustCompile(`(?m)^image:\n\t.*-C tools run ./cmd/sluice-image .*-out (\S+)$`)
)

// inDist reports whether p, relative to the root, is dist/ or below it.
func inDist(p string) bool {
	p = path.Clean(p)
	return p == "dist" || strings.HasPrefix(p, "dist/")
}

// TestImageReachesDist checks the image's way into dist/: the before hook
// writes the layout outside dist/ (--clean empties dist/ before the hooks
// run and goreleaser wants it empty after them), the oci-image archive
// packs that same layout into dist/, and nothing is checksummed or
// uploaded from outside dist/ (checksums.txt once named an image tar that
// was not in dist/). make image writes outside dist/ too, so that a
// release-snapshot does not delete it.
func TestImageReachesDist(t *testing.T) {
	c := readConfig(t)
	var layout string
	for _, h := range c.Before.Hooks {
		if m := hookOut.FindStringSubmatch(h); m != nil {
			layout = path.Clean(path.Join("tools", m[1]))
		}
	}
	if layout == "" {
		t.Fatalf("no before hook runs sluice-image with -out: %q", c.Before.Hooks)
	}
	if inDist(layout) {
		t.Errorf("the before hook writes the image to %s, inside dist/, which --clean empties first and goreleaser wants empty", layout)
	}
	var image []fileEntry
	for _, a := range c.Archives {
		if a.ID == "oci-image" {
			if !a.Meta {
				t.Error("archive oci-image: want meta: true (the image, no binary)")
			}
			image = a.Files
		}
	}
	if len(image) != 1 || path.Clean(image[0].Src) != layout || path.Clean(image[0].Dst) != "." {
		t.Errorf("archive oci-image files %+v, want the hook's layout %s at the archive's root", image, layout)
	}
	for _, g := range append(c.Checksum.ExtraFiles, c.Release.ExtraFiles...) {
		if !inDist(g.Glob) {
			t.Errorf("extra file %s is checksummed or uploaded from outside dist/: a snapshot's dist/ lacks it", g.Glob)
		}
	}
	mk, err := os.ReadFile(filepath.Join(repo, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := makeOut.FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no image target running sluice-image with -out")
	}
	if out := path.Clean(path.Join("tools", string(m[1]))); inDist(out) || out != layout {
		t.Errorf("make image writes %s: want the release's layout %s, outside dist/ (release-snapshot --clean empties it)", out, layout)
	}
}
