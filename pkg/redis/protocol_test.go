package redis

import (
	"context"
	"io/fs"
	"regexp"
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
		{"O_HITFLAGS + 1 + Z_HITTAIL", lookup(t, "O_HITFLAGS").(int) + 1 + lookup(t, "Z_HITTAIL").(int), hitSize},
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

// TestScriptParts: the script is the protocol, the header, the algorithms'
// files and the call's path (lua/run/: call.lua, general.lua, run.lua), in
// that order, and the call's path, which reads the call's arguments and
// writes its reply, spells no struct format of its own: it reads the
// protocol's, so the layout stays defined once.
func TestScriptParts(t *testing.T) {
	t.Parallel()
	files, err := fs.Glob(luaFiles, "lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	at := func(f string) int {
		src, err := luaFiles.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		i := strings.Index(scriptBody, string(src))
		if i < 0 {
			t.Errorf("the script does not hold %s", f)
		}
		return i
	}
	path := []string{"lua/run/call.lua", "lua/run/general.lua", "lua/run/run.lua"}
	header, run := at("lua/header.lua"), at(path[0])
	if !strings.HasPrefix(scriptBody, luaProtocol()) || header > run {
		t.Errorf("the script does not start with the protocol, then lua/header.lua (at %d), and end with the call's path (at %d)", header, run)
	}
	for _, f := range files {
		if i := at(f); f != "lua/header.lua" && (i < header || i > run) {
			t.Errorf("%s is at %d, not between the header (%d) and the call's path (%d)", f, i, header, run)
		}
	}
	for i, f := range path {
		if i > 0 && at(f) < at(path[i-1]) {
			t.Errorf("%s is before %s", f, path[i-1])
		}
		src, err := luaFiles.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if lit := regexp.MustCompile(`'<[A-Za-z0-9]*'`).FindAllString(string(src), -1); len(lit) > 0 {
			t.Errorf("%s spells struct formats %q: use the protocol's (protocol.go's layout)", f, lit)
		}
	}
	if run, _ := fs.Glob(luaFiles, "lua/run/*.lua"); len(run) != len(path) {
		t.Errorf("lua/run holds %v, want %v", run, path)
	}
}
