package main

import (
	"strings"
	"testing"

	"github.com/google/go-licenses/licenses"
)

func TestProblems(t *testing.T) {
	ok := []row{{Module: "github.com/a/b", Version: "v1.0.0", License: "MIT", Type: licenses.Notice, File: "LICENSE"},
		{Module: "github.com/c/d", Version: "v2.0.0", License: "MPL-2.0", Type: licenses.Reciprocal, File: "LICENSE"}}
	text := render(ok, []string{"./cmd/server"})
	if errs := problems(ok, text, text, "T.md"); len(errs) != 0 {
		t.Errorf("notice and reciprocal licenses, file up to date: %v, want none", errs)
	}
	for _, c := range []struct {
		name string
		add  row
		want string
	}{
		{"GPL", row{Module: "github.com/e/f", Version: "v1.0.0", License: "GPL-3.0", Type: licenses.Restricted, File: "COPYING"}, "github.com/e/f v1.0.0: license GPL-3.0 (COPYING) is restricted"},
		{"AGPL", row{Module: "github.com/e/f", Version: "v1.0.0", License: "AGPL-3.0", Type: licenses.Forbidden, File: "LICENSE"}, "is FORBIDDEN"},
		{"none found", row{Module: "github.com/e/f", Version: "v1.0.0", License: "unknown", Type: licenses.Unknown, File: "(none found)"}, "is unknown"},
	} {
		rows := append(append([]row{}, ok...), c.add)
		text := render(rows, []string{"./cmd/server"})
		errs := problems(rows, text, text, "T.md")
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), c.want) {
			t.Errorf("%s: %v, want one error containing %q", c.name, errs, c.want)
		}
	}
	stale := render(ok[:1], []string{"./cmd/server"})
	if errs := problems(ok, text, stale, "T.md"); len(errs) != 1 || !strings.Contains(errs[0].Error(), "T.md is out of date") {
		t.Errorf("a module added since the file was written: %v, want T.md out of date", errs)
	}
	if !strings.Contains(string(text), "| github.com/c/d | v2.0.0 | MPL-2.0 | reciprocal | LICENSE |\n") {
		t.Errorf("render:\n%s\nwant a row for github.com/c/d", text)
	}
}
