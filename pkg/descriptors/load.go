package descriptors

import (
	"cmp"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Source is one config file held in memory, for Parse.
type Source struct {
	// Name is the file name used in errors, warnings and Rule.File.
	Name string
	// Data is the file's YAML.
	Data []byte
}

// Load reads the config files at paths and returns the validated Config.
// Each path is a YAML file, or a directory whose *.yaml and *.yml files are
// loaded (not its subdirectories), in name order. Names starting with "."
// are skipped, so a Kubernetes ConfigMap mount loads once: its visible files
// are symlinks into the hidden "..data" directory, and symlinks are
// followed. File names in errors and in the Config are the paths as given,
// joined with the directory entry's name.
//
// Load is pure: it logs nothing. On any problem it returns a nil Config and
// an errors.Join of every *Error found in every file, sorted by file, line
// and column, so that one run shows them all. A directory with no YAML file
// in it is an error; no paths at all give an empty Config.
func Load(paths ...string) (*Config, error) {
	var (
		srcs []Source
		errs []*Error
	)
	read := func(name string) {
		data, err := os.ReadFile(name)
		if err != nil {
			errs = append(errs, ioError(name, err))
			return
		}
		srcs = append(srcs, Source{Name: name, Data: data})
	}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			errs = append(errs, ioError(p, err))
			continue
		}
		if !fi.IsDir() {
			read(p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			errs = append(errs, ioError(p, err))
			continue
		}
		n := 0
		for _, e := range entries { // sorted by name
			name := e.Name()
			if strings.HasPrefix(name, ".") || !isYAML(name) {
				continue
			}
			full := filepath.Join(p, name)
			fi, err := os.Stat(full) // follows symlinks
			if err != nil {
				errs = append(errs, ioError(full, err))
				continue
			}
			if fi.IsDir() {
				continue
			}
			read(full)
			n++
		}
		if n == 0 {
			errs = append(errs, &Error{File: p, Msg: "no *.yaml or *.yml file in directory"})
		}
	}
	return build(srcs, errs)
}

// Parse builds a Config from files held in memory, with the same rules,
// errors and warnings as Load: each Source is one file and one domain.
func Parse(srcs ...Source) (*Config, error) {
	return build(srcs, nil)
}

func isYAML(name string) bool {
	ext := filepath.Ext(name)
	return ext == ".yaml" || ext == ".yml"
}

func ioError(name string, err error) *Error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &Error{File: name, Msg: "cannot read: " + err.Error()}
}

// build parses every source, checks that no domain appears twice, and
// returns the Config, or nil and all the errors.
func build(srcs []Source, errs []*Error) (*Config, error) {
	c := &Config{domains: make(map[string]*Domain)}
	var warns []*Error
	for _, s := range srcs {
		p := &parser{file: s.Name}
		d, domainNode := p.parseFile(s.Data)
		if d != nil && d.Name != "" {
			if first, ok := c.domains[d.Name]; ok {
				p.errorf(domainNode, "domain", "domain %q is already defined in %s:%d:%d (one domain per file; merge the two files)",
					d.Name, first.File, first.line, first.column)
			} else {
				c.domains[d.Name] = d
			}
		}
		errs = append(errs, p.errs...)
		warns = append(warns, p.warns...)
		c.Files = append(c.Files, s.Name)
	}
	if len(errs) > 0 {
		return nil, errors.Join(asErrors(sortErrors(errs))...)
	}
	for _, d := range c.domains {
		d.index = newIndex(d.Rules)
		c.sorted = append(c.sorted, d)
	}
	slices.SortFunc(c.sorted, func(a, b *Domain) int { return cmp.Compare(a.Name, b.Name) })
	slices.Sort(c.Files)
	c.Warnings = asErrors(sortErrors(warns))
	return c, nil
}

// sortErrors sorts errs by file, line, column, path and message and drops
// exact repeats (a YAML alias can report one node's problem twice).
func sortErrors(errs []*Error) []*Error {
	slices.SortStableFunc(errs, func(a, b *Error) int {
		return cmp.Or(
			cmp.Compare(a.File, b.File),
			cmp.Compare(a.Line, b.Line),
			cmp.Compare(a.Column, b.Column),
			cmp.Compare(a.Path, b.Path),
			cmp.Compare(a.Msg, b.Msg),
		)
	})
	return slices.CompactFunc(errs, func(a, b *Error) bool { return *a == *b })
}

func asErrors(errs []*Error) []error {
	if len(errs) == 0 {
		return nil
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return out
}
