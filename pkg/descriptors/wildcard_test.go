package descriptors

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzMatchSegments checks the wildcard matcher against a regular
// expression built from the same pattern, where each '*' is ".*".
func FuzzMatchSegments(f *testing.F) {
	for _, seed := range [][2]string{
		{"foo*", "foobar"},             // trailing wildcard
		{"/api*v1", "/api/users/v1"},   // middle wildcard
		{"foo*bar*baz", "foobarbaz"},   // several, each matching nothing
		{"a*a", "a"},                   // prefix and suffix may not overlap
		{"*", ""},                      // a lone star matches the empty value
		{"*ab*ab*", "abab"},            // repeated parts
		{"x*\n*y", "x\n\ny"},           // newlines are ordinary characters
		{"a**b", "ab"},                 // adjacent stars
		{"é*ü", "éßü"},                 // non-ASCII runes
		{"aa*aa", "aaa"},               // overlapping affixes
		{"ab*ba*ab", "abababab"},       // greedy choice must not matter
		{"*.json", "/x/y.json.bak"},    // leading wildcard needs the suffix
		{"t*prod", "tenant-prod-prod"}, // suffix occurs twice
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, pattern, value string) {
		if !utf8.ValidString(pattern) || !utf8.ValidString(value) {
			return // regexp matches runes; on valid UTF-8 runes and bytes agree
		}
		if !strings.Contains(pattern, "*") {
			pattern += "*"
		}
		parts := strings.Split(pattern, "*")
		quoted := make([]string, len(parts))
		for i, s := range parts {
			quoted[i] = regexp.QuoteMeta(s)
		}
		want := regexp.MustCompile(`(?s)\A` + strings.Join(quoted, ".*") + `\z`).MatchString(value)
		if got := matchSegments(parts, value); got != want {
			t.Errorf("matchSegments(%q, %q) = %v, want %v", pattern, value, got, want)
		}
	})
}
