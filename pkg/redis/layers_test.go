package redis

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// layerOf places each file of the package in its layer (see doc.go), the
// ground first: the wire (the layout of a call, its reply, the script, the
// keys), the nodes, the decider, the leases and the Store.
var layerOf = map[string]string{
	"protocol.go": "wire", "reply.go": "wire", "script.go": "wire", "key.go": "wire", "budget.go": "wire",
	"tlsdial.go": "wire", "client.go": "wire",
	"node.go": "node", "lanes.go": "node", "gate.go": "node", "nodes.go": "node",
	"cluster.go": "decider", "refund.go": "decider",
	"lease.go": "lease",
	"store.go": "store", "open.go": "store", "quota.go": "store", "tenants.go": "store", "heartbeat.go": "store",
	"doc.go": "",
}

// reaches says which other layers' names each layer may use: the one it
// stands on (the Store composes the leases and the decider, the leases
// decorate the decider's path). The wire is the vocabulary of every layer
// and is not listed. Of another layer's types only methods may be used,
// never fields, and no type embeds another layer's.
var reaches = map[string][]string{
	"store":   {"lease", "decider"},
	"lease":   {"decider"},
	"decider": {"node"},
	"node":    {},
	"wire":    {},
}

// TestLayersReachOneFloorDown: no file of the package uses a name (type,
// function, variable, field or method) of a layer its own does not stand
// on, no file reads or writes a field of another layer's type (only its
// methods), and no type embeds another layer's.
func TestLayersReachOneFloorDown(t *testing.T) {
	fset, files, pkg, info := typeCheck(t)
	layerOfObj := func(o types.Object) (string, bool) {
		if o == nil || o.Pkg() != pkg || !o.Pos().IsValid() {
			return "", false
		}
		l, ok := layerOf[filepath.Base(fset.Position(o.Pos()).Filename)]
		return l, ok
	}
	may := func(from, to string) bool {
		if from == to || to == "wire" {
			return true
		}
		for _, l := range reaches[from] {
			if l == to {
				return true
			}
		}
		return false
	}
	for name, f := range files {
		from := layerOf[name]
		report := func(n ast.Node, format string, args ...any) {
			t.Errorf("%s: "+format, append([]any{fset.Position(n.Pos())}, args...)...)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Ident:
				o := info.Uses[n]
				if o == nil || o.Parent() != pkg.Scope() {
					return true
				}
				if to, ok := layerOfObj(o); ok && !may(from, to) {
					report(n, "the %s layer uses %s of the %s layer", from, n.Name, to)
				}
			case *ast.SelectorExpr:
				sel := info.Selections[n]
				if sel == nil {
					return true
				}
				to, ok := layerOfObj(sel.Obj())
				if !ok {
					return true
				}
				switch {
				case !may(from, to):
					report(n, "the %s layer uses %s of the %s layer", from, n.Sel.Name, to)
				case sel.Kind() == types.FieldVal && to != from && to != "wire":
					report(n, "the %s layer reads field %s of the %s layer: use a method", from, n.Sel.Name, to)
				case len(sel.Index()) > 1 && to != from && to != "wire":
					report(n, "the %s layer reaches %s of the %s layer through an embedded field", from, n.Sel.Name, to)
				}
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok {
					if o, ok := info.Uses[k].(*types.Var); ok && o.IsField() {
						if to, ok := layerOfObj(o); ok && to != from && to != "wire" && !isOptions(n, info) {
							report(n, "the %s layer sets field %s of the %s layer: use its constructor", from, k.Name, to)
						}
					}
				}
			case *ast.Field:
				if len(n.Names) == 0 { // embedded
					if tn, ok := info.Types[n.Type]; ok {
						if nt, ok := deref(tn.Type).(*types.Named); ok {
							if to, ok := layerOfObj(nt.Obj()); ok && to != from && to != "wire" {
								report(n, "the %s layer embeds %s of the %s layer", from, nt.Obj().Name(), to)
							}
						}
					}
				}
			}
			return true
		})
	}
	// Every file is placed, so a new file is placed on purpose.
	var unplaced []string
	for name := range files {
		if _, ok := layerOf[name]; !ok {
			unplaced = append(unplaced, name)
		}
	}
	sort.Strings(unplaced)
	if len(unplaced) > 0 {
		t.Errorf("files in no layer (add them to layerOf): %v", unplaced)
	}
}

// isOptions reports whether kv is a field of a composite literal of a type
// named ...Options: a layer's options are part of its surface (its
// constructor's argument).
func isOptions(kv *ast.KeyValueExpr, info *types.Info) bool {
	for lit, tv := range info.Types {
		cl, ok := lit.(*ast.CompositeLit)
		if !ok || !slices.Contains(cl.Elts, ast.Expr(kv)) {
			continue
		}
		if nt, ok := deref(tv.Type).(*types.Named); ok {
			return strings.HasSuffix(nt.Obj().Name(), "Options")
		}
	}
	return false
}

func deref(t types.Type) types.Type {
	if p, ok := t.(*types.Pointer); ok {
		return p.Elem()
	}
	return t
}

// typeCheck parses and type-checks the package's own files (tests left
// out), importing its dependencies from the build cache's export data.
func typeCheck(t *testing.T) (*token.FileSet, map[string]*ast.File, *types.Package, *types.Info) {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, " "); ok && file != "" {
			exports[path] = file
		}
	}
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	var list []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
		list = append(list, f)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{},
		Types: map[ast.Expr]types.TypeAndValue{}}
	pkg, err := (&types.Config{Importer: imp}).Check("github.com/sluicehq/sluice/pkg/redis", fset, list, info)
	if err != nil {
		t.Fatalf("type-check: %v", err)
	}
	return fset, files, pkg, info
}
