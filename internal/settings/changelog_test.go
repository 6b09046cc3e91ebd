package settings

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// fieldDefaults are the defaults of config fields (not settings) that
// CHANGELOG.md may state, from the code that applies them.
var fieldDefaults = map[string]string{
	"sub_windows": strconv.Itoa(limiter.DefaultSubWindows),
}

// changelogFigures are figures the changelog may state in prose that are
// a named default: each match states the default of the name.
var changelogFigures = []struct {
	dashes, name string // "--" for a setting, "" for a config field
	re           *regexp.Regexp
}{
	{"--", "max-counters", regexp.MustCompile(`(\d[\d,]*) counters\b`)},
	{"", "sub_windows", regexp.MustCompile(`(\d[\d,]*) sub-windows\b`)},
}

var (
	// A stated default: `--max-counters` (default 131,072) or
	// `sub_windows` (default 50).
	changelogDefault = regexp.MustCompile("`(--)?([a-z][a-z0-9_-]*)`\\s*\\(default ((?:[^);,]|,\\d)+)")
	// Any statement of a default, to catch one the pattern above misses.
	anyDefault      = regexp.MustCompile(`\(default |\bdefaults? (?:to|is) `)
	changelogHeader = regexp.MustCompile(`(?m)^## \[([^\]]+)\]`)
	digitsComma     = regexp.MustCompile(`(\d),(\d{3})`)
)

// TestChangelogDefaults checks the defaults CHANGELOG.md states against the
// code: for each setting (`--name`) or config field, the newest section
// that states its default must state the one in force (the settings
// table's, or fieldDefaults'); an older section that states another is
// history the newer one supersedes. 0.3.0 once said sub_windows defaults
// to 20 and the memory store holds 262,144 counters, where the code had 50
// and 131,072. Every default the file states must be written as
// `name` (default value), so that none escapes the check.
func TestChangelogDefaults(t *testing.T) {
	b, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	settings := map[string]string{}
	for _, st := range (&Settings{}).allSettings() {
		settings[st.name] = st.def
	}
	heads := changelogHeader.FindAllStringSubmatchIndex(text, -1)
	if len(heads) < 2 || text[heads[0][2]:heads[0][3]] != "Unreleased" {
		t.Fatalf("CHANGELOG.md: want ## [Unreleased] first, then the releases, newest first")
	}
	stated := map[string]string{} // name -> the section that stated it first (newest)
	checked := 0
	for i, h := range heads {
		end := len(text)
		if i+1 < len(heads) {
			end = heads[i+1][0]
		}
		section, body := text[h[2]:h[3]], text[h[1]:end]
		claims := changelogDefault.FindAllStringSubmatch(body, -1)
		if n := len(anyDefault.FindAllString(body, -1)); n != len(claims) {
			t.Errorf("[%s] states %d defaults, %d of them as `name` (default value): write each so, for this test to check it", section, n, len(claims))
		}
		for _, f := range changelogFigures {
			for _, m := range f.re.FindAllStringSubmatch(body, -1) {
				claims = append(claims, []string{m[0], f.dashes, f.name, m[1]})
			}
		}
		for _, c := range claims {
			name, got := c[2], normalDefault(c[3])
			want, ok := fieldDefaults[name]
			if c[1] == "--" {
				want, ok = settings[name]
			}
			if !ok {
				t.Errorf("[%s] states the default of %s%s, which is no setting and not in fieldDefaults", section, c[1], name)
				continue
			}
			key := c[1] + name
			if _, newer := stated[key]; newer {
				continue // history: a newer section states the default in force
			}
			stated[key] = section
			checked++
			if got != normalDefault(want) {
				t.Errorf("[%s] says %s defaults to %s; the code's default is %s", section, key, c[3], want)
			}
		}
	}
	for _, want := range []string{"sub_windows", "--max-counters"} {
		if _, ok := stated[want]; !ok {
			t.Errorf("CHANGELOG.md states no default of %s (want the check to cover it)", want)
		}
	}
	if checked == 0 {
		t.Error("no default checked")
	}
}

// normalDefault is a stated default without quotes, backticks and
// thousands separators: 131,072 is 131072.
func normalDefault(v string) string {
	v = strings.Trim(strings.TrimSpace(v), "`\"")
	return digitsComma.ReplaceAllString(v, "$1$2")
}
