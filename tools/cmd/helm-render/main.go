// Command helm-render renders a Helm chart as helm template does, with
// Helm's own Go packages (helm.sh/helm/v3's loader, chartutil and engine;
// no helm binary, and not the action package, whose Kubernetes client
// doubles what a build compiles), and prints the manifests, each document
// after a "# Source: chart/templates/..." line, in file order.
// The values are checked against the chart's values.schema.json, and a
// template's fail stops the render, both reported on stderr with status 1.
//
//	helm-render -chart deploy/helm/sluice -name sluice -namespace sluice [-lint] [-f values.yaml]...
//
// With -lint it runs helm lint's checks (strict) on the chart with those
// values first and fails on any finding.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// files is a repeatable -f flag.
type files []string

func (f *files) String() string     { return strings.Join(*f, ",") }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "helm-render: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("helm-render", flag.ContinueOnError)
	chartDir := fs.String("chart", "", "the chart's directory")
	name := fs.String("name", "sluice", "the release name")
	namespace := fs.String("namespace", "sluice", "the release namespace")
	lint := fs.Bool("lint", false, "run helm lint's checks (strict) first")
	var valueFiles files
	fs.Var(&valueFiles, "f", "a values file (repeatable; later ones win)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *chartDir == "" {
		return errors.New("-chart is required")
	}
	vals := map[string]any{}
	for _, f := range valueFiles {
		v, err := chartutil.ReadValuesFile(f)
		if err != nil {
			return err
		}
		vals = merge(vals, v)
	}
	if *lint {
		if err := lintChart(*chartDir, *namespace, vals); err != nil {
			return err
		}
	}
	chrt, err := loader.Load(*chartDir)
	if err != nil {
		return err
	}
	opts := chartutil.ReleaseOptions{Name: *name, Namespace: *namespace, Revision: 1, IsInstall: true}
	// ToRenderValues checks the values against values.schema.json.
	top, err := chartutil.ToRenderValues(chrt, vals, opts, chartutil.DefaultCapabilities.Copy())
	if err != nil {
		return err
	}
	out, err := engine.Render(chrt, top)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(out)) {
		body := strings.TrimSpace(out[name])
		if body == "" || path.Ext(name) != ".yaml" {
			continue // partials, NOTES.txt, a template that rendered nothing
		}
		if _, err := fmt.Fprintf(stdout, "---\n# Source: %s\n%s\n", name, body); err != nil {
			return err
		}
	}
	return nil
}

// lintChart runs helm lint's checks with vals and fails on any finding
// above info (helm lint --strict).
func lintChart(dir, namespace string, vals map[string]any) error {
	res := lint.All(dir, vals, namespace, false)
	var errs []error
	for _, m := range res.Messages {
		if m.Severity > support.InfoSev {
			errs = append(errs, fmt.Errorf("lint: %s", m))
		}
	}
	return errors.Join(errs...)
}

// merge returns dst with src's keys over it, maps merged key by key, as
// helm -f merges values files.
func merge(dst, src map[string]any) map[string]any {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}
