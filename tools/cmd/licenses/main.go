// Command licenses writes or checks THIRD_PARTY_LICENSES.md, the inventory
// of every module whose packages a Go binary links, with each module's
// license as go-licenses classifies it (Google's license classifier, the
// one behind the go-licenses tool).
//
//	licenses -dir REPO -write FILE ./cmd/server
//	licenses -dir REPO -check FILE ./cmd/server
//
// -check fails when FILE is not what -write would write (a module was added,
// removed, upgraded or relicensed: run make licenses and review the change),
// or when a module's license is unknown, forbidden or restricted (GPL-like:
// it would require the whole binary's source under its terms), none of which
// an Apache-2.0 binary can ship. Notice, permissive, unencumbered and
// reciprocal (MPL-2.0: file-level, satisfied by the module's own published
// source) licenses pass.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-licenses/licenses"
	"k8s.io/klog/v2"
)

// confidence is the classifier's threshold, go-licenses' default.
const confidence = 0.9

// disallowed are the license types the check refuses.
var disallowed = map[licenses.Type]bool{licenses.Unknown: true, licenses.Forbidden: true, licenses.Restricted: true}

func main() {
	// go-licenses warns through klog about every package with assembly or C
	// files ("can't be inspected for further dependencies"): true of the
	// standard library's neighbours and no finding about licenses.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "licenses: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("licenses", flag.ContinueOnError)
	dir := fs.String("dir", ".", "the module whose packages are named")
	write := fs.String("write", "", "write the inventory to this file")
	check := fs.String("check", "", "check that this file is the inventory and every license is allowed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*write == "") == (*check == "") || fs.NArg() == 0 {
		return errors.New("usage: licenses -dir DIR (-write FILE | -check FILE) PACKAGE...")
	}
	file, err := filepath.Abs(*write + *check)
	if err != nil {
		return err
	}
	if err := os.Chdir(*dir); err != nil {
		return err
	}
	rows, err := inventory(fs.Args())
	if err != nil {
		return err
	}
	text := render(rows, fs.Args())
	if *write != "" {
		return os.WriteFile(file, text, 0o644)
	}
	got, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	return errors.Join(problems(rows, text, got, filepath.Base(file))...)
}

// problems returns what -check reports: every library whose license type
// is disallowed, and an inventory file (got, named name) that is not text.
func problems(rows []row, text, got []byte, name string) []error {
	var errs []error
	for _, r := range rows {
		if disallowed[r.Type] {
			errs = append(errs, fmt.Errorf("%s %s: license %s (%s) is %s: an Apache-2.0 binary cannot ship it", r.Module, r.Version, r.License, r.File, r.Type))
		}
	}
	if !bytes.Equal(got, text) {
		errs = append(errs, fmt.Errorf("%s is out of date with the binary's modules: run make licenses and review the diff", name))
	}
	return errs
}

// row is one library of the inventory.
type row struct {
	Module, Version, License string
	Type                     licenses.Type
	File                     string // the license file, relative to the module
}

// inventory classifies the license of every library the packages link.
func inventory(pkgs []string) ([]row, error) {
	c, err := licenses.NewClassifier(confidence)
	if err != nil {
		return nil, err
	}
	libs, err := licenses.Libraries(context.Background(), c, false, nil, pkgs...)
	if err != nil {
		return nil, err
	}
	cwd, _ := os.Getwd()
	var rows []row
	for _, l := range libs {
		r := row{Module: l.Name(), Version: l.Version(), License: "unknown", Type: licenses.Unknown, File: "(none found)"}
		if l.LicensePath != "" {
			name, typ, err := c.Identify(l.LicensePath)
			if err == nil {
				r.License, r.Type = name, typ
			}
			r.File = relLicense(l.LicensePath, r.Version, cwd)
		}
		if r.Version == "" {
			r.Version = "(this repository)"
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Module < rows[j].Module })
	return rows, nil
}

// relLicense is a license file's path inside its module: after
// "@version/" in the module cache, or relative to the main module.
func relLicense(path, version, cwd string) string {
	if i := strings.Index(path, "@"+version+"/"); version != "" && i >= 0 {
		return filepath.ToSlash(path[i+len(version)+2:])
	}
	if rel, err := filepath.Rel(cwd, path); err == nil {
		return filepath.ToSlash(rel)
	}
	return filepath.Base(path)
}

// render is the inventory as Markdown.
func render(rows []row, pkgs []string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Third-party licenses\n\n")
	fmt.Fprintf(&b, "Every module that `%s` links, with its license as go-licenses' classifier\n", strings.Join(pkgs, " "))
	fmt.Fprintf(&b, "identifies it in the file named (inside the module's source). Generated by `make licenses`;\n")
	fmt.Fprintf(&b, "`make licenses-check` (CI) fails when this file is out of date or a license is unknown,\n")
	fmt.Fprintf(&b, "forbidden or restricted. The release archives ship this file beside LICENSE.\n\n")
	fmt.Fprintf(&b, "| Module | Version | License | Type | File |\n| --- | --- | --- | --- | --- |\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.Module, r.Version, r.License, r.Type, r.File)
	}
	return b.Bytes()
}
