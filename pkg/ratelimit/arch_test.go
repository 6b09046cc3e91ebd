package ratelimit_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoEnvoyProtos holds the one direction of imports: the decision and pkg/limiter
// import no Envoy proto, gRPC or go-redis package, directly or not, so every
// front end shares them and pkg/limiter is a plain Go library.
func TestNoEnvoyProtos(t *testing.T) {
	for _, pkg := range []string{"github.com/sluicehq/sluice/pkg/ratelimit", "github.com/sluicehq/sluice/pkg/limiter"} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, banned := range []string{"github.com/envoyproxy/", "google.golang.org/grpc", "github.com/redis/", "github.com/sluicehq/sluice/pkg/rls", "github.com/sluicehq/sluice/pkg/rlqs"} {
				if strings.HasPrefix(dep, banned) {
					t.Errorf("%s imports %s", pkg, dep)
				}
			}
		}
	}
}

// TestFunctionsFitOnAScreen keeps the decision and the Envoy adapters made of
// named stages: no function of pkg/ratelimit, pkg/rls or pkg/rlqs is longer than 60
// lines.
func TestFunctionsFitOnAScreen(t *testing.T) {
	const maxLines = 60
	for _, dir := range []string{".", "../rls", "../rlqs"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, decl := range file.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxLines {
					t.Errorf("%s: %s is %d lines, more than %d", f, fn.Name.Name, n, maxLines)
				}
			}
		}
	}
}
