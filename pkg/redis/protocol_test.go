package redis

import (
	"context"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestProtocolSizes holds the two sides of the wire layout together: the
// script's struct library, given the protocol's formats as the script gets
// them (luaProtocol), measures every format as Go does (formatSize), and
// the sizes that the script reads as numbers are the formats' own.
func TestProtocolSizes(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Addr(t))
	var formats []string
	for _, f := range layout {
		if _, ok := f.value.(string); ok {
			formats = append(formats, f.lua)
		}
	}
	script := luaProtocol() + "return { struct.size(" + strings.Join(formats, "), struct.size(") + ") }"
	got, err := c.Eval(context.Background(), script, nil).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range formats {
		var f string
		for _, l := range layout {
			if l.lua == name {
				f = l.value.(string)
			}
		}
		if want := int64(formatSize(f)); got[i] != want {
			t.Errorf("struct.size(%s = %q) = %d in Lua, formatSize = %d in Go", name, f, got[i], want)
		}
	}
	for _, tc := range []struct {
		name string
		got  any
		want int
	}{
		{"Z_HIT", lookup(t, "Z_HIT"), hitSize},
		{"Z_UNDO", lookup(t, "Z_UNDO"), undoSize},
		{"Z_UNDOKEY", lookup(t, "Z_UNDOKEY"), undoKeySize},
		{"Z_HITREST + O_HITFLAGS", lookup(t, "Z_HITREST").(int) + lookup(t, "O_HITFLAGS").(int), hitSize},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %d", tc.name, tc.got, tc.want)
		}
	}
}

func lookup(t *testing.T, name string) any {
	t.Helper()
	for _, l := range layout {
		if l.lua == name {
			return l.value
		}
	}
	t.Fatalf("layout has no %s", name)
	return nil
}

// TestScriptParts: every file of lua/ is joined (luaOrder names it), and
// run.lua, which reads the call's arguments and writes its reply, spells
// no struct format of its own: it reads the protocol's, so the layout stays
// defined once.
func TestScriptParts(t *testing.T) {
	t.Parallel()
	files, err := fs.Glob(luaFiles, "lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if name := strings.TrimSuffix(strings.TrimPrefix(f, "lua/"), ".lua"); !slices.Contains(luaOrder, name) {
			t.Errorf("%s is not in luaOrder: the script would not hold it", f)
		}
	}
	run, err := luaFiles.ReadFile("lua/run.lua")
	if err != nil {
		t.Fatal(err)
	}
	if lit := regexp.MustCompile(`'<[A-Za-z0-9]*'`).FindAllString(string(run), -1); len(lit) > 0 {
		t.Errorf("run.lua spells struct formats %q: use the protocol's (protocol.go's layout)", lit)
	}
}
