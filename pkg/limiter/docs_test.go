package limiter_test

import (
	"bytes"
	"os"
	"regexp"
	"testing"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestAlgorithmTablesNameEveryAlgorithm checks that the algorithm tables
// of the README and docs/algorithms.md (the first table of each page that
// names algorithms; later tables, such as the refunds', may repeat them)
// have a row for every algorithm of the registry, and none for an
// algorithm it does not have (docs/algorithms.md's once lacked concurrency).
func TestAlgorithmTablesNameEveryAlgorithm(t *testing.T) {
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)`(?: \\(default\\))? \\|")
	for _, page := range []string{"../../README.md", "../../docs/algorithms.md"} {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rows := map[string]int{}
		for _, m := range row.FindAllSubmatch(firstTable(b, row), -1) {
			rows[string(m[1])]++
		}
		for _, a := range limiter.Algorithms() {
			if n := rows[a.String()]; n != 1 {
				t.Errorf("%s: the algorithm table has %d rows for %s, want 1", page, n, a)
			}
			delete(rows, a.String())
		}
		for name := range rows {
			t.Errorf("%s: the algorithm table has a row for %s, which is no algorithm", page, name)
		}
	}
}

// firstTable returns the lines of the first Markdown table in page that
// holds a row matching row, up to the blank line that ends it.
func firstTable(page []byte, row *regexp.Regexp) []byte {
	loc := row.FindIndex(page)
	if loc == nil {
		return nil
	}
	rest := page[loc[0]:]
	if end := bytes.Index(rest, []byte("\n\n")); end >= 0 {
		rest = rest[:end]
	}
	return rest
}
