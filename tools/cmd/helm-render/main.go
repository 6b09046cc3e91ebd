// Command helm-render renders a Helm chart as helm template does, with
// Helm's own Go packages (helm.sh/helm/v3; no helm binary), and prints the
// manifests, each document after a "# Source: chart/templates/..." line.
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
	"os"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/getter"
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
	vals, err := (&values.Options{ValueFiles: valueFiles}).MergeValues(getter.Providers{})
	if err != nil {
		return err
	}
	if *lint {
		l := action.NewLint()
		l.Strict, l.Namespace = true, *namespace
		res := l.Run([]string{*chartDir}, vals)
		var errs []error
		for _, m := range res.Messages {
			if m.Severity > support.InfoSev {
				errs = append(errs, fmt.Errorf("lint: %s", m))
			}
		}
		if err := errors.Join(append(errs, res.Errors...)...); err != nil {
			return err
		}
	}
	chrt, err := loader.Load(*chartDir)
	if err != nil {
		return err
	}
	install := action.NewInstall(&action.Configuration{})
	install.DryRun, install.ClientOnly, install.Replace, install.IncludeCRDs = true, true, true, true
	install.ReleaseName, install.Namespace = *name, *namespace
	rel, err := install.Run(chrt, vals)
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, rel.Manifest)
	return err
}
