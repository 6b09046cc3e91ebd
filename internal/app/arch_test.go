package app_test

import (
	"os/exec"
	"strings"
	"testing"
)

// floors places the server's packages on floors, the ground first: a
// package may import only packages on lower floors. This is the one
// direction of imports: cmd/server -> internal/app -> internal/source ->
// internal/settings -> the front ends, the store and the xDS client ->
// pkg/ratelimit -> pkg/descriptors -> pkg/limiter.
var floors = map[string]int{
	"pkg/limiter": 1, "internal/shortval": 1, "internal/version": 1,
	"pkg/descriptors": 2,
	"pkg/ratelimit":   3, "pkg/tenants": 3,
	"pkg/rls": 4, "pkg/rlqs": 4, "pkg/redis": 4, "pkg/xdsconfig": 4, "internal/statuspage": 4,
	"internal/settings": 5,
	"internal/source":   6,
	"internal/app":      7,
	"cmd/server":        8,
}

// serverOnly are the packages of the sluice command, which no package but
// those on a higher floor may import.
var serverOnly = []string{"internal/app", "internal/settings", "internal/source"}

// TestImportsPointOneWay: no package of the server imports one on its own
// floor or above it, and no other package of the module (tools, tests'
// helpers, benchmarks) imports the command's own packages.
func TestImportsPointOneWay(t *testing.T) {
	const module = "github.com/sluicehq/sluice/"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		floor, placed := floors[pkg]
		if placed {
			seen++
		}
		for _, imp := range fields[1:] {
			imp, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			to, toPlaced := floors[imp]
			switch {
			case placed && toPlaced && to >= floor:
				t.Errorf("%s (floor %d) imports %s (floor %d): imports point down only", pkg, floor, imp, to)
			case !placed && isServerOnly(imp):
				t.Errorf("%s imports %s, a package of the sluice command", pkg, imp)
			}
		}
	}
	if seen != len(floors) {
		t.Errorf("go list found %d of the %d packages placed on floors: update floors", seen, len(floors))
	}
}

func isServerOnly(pkg string) bool {
	for _, p := range serverOnly {
		if pkg == p {
			return true
		}
	}
	return false
}
