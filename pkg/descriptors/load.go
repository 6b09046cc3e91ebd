package descriptors

import (
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

// Selection says which files of a directory a load reads. A file named
// directly is always read, whatever its name. The zero Selection reads every
// file of a directory.
type Selection struct {
	// Ext lists the extensions, with the dot (".yaml"), of the files read
	// from a directory; nil reads every file.
	Ext []string
	// Recursive also reads the files of a directory's subdirectories (not
	// of symlinks to directories), depth first in name order:
	// envoyproxy/ratelimit's runtime layout, whose loader walks the whole
	// tree under RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
	Recursive bool
	// Dotfiles also reads files (and, when Recursive, directories) whose
	// names start with "." (envoyproxy/ratelimit's
	// RUNTIME_IGNOREDOTFILES=false). Names starting with ".." are never
	// read: they are Kubernetes' ..data link and timestamped directories,
	// which hold a ConfigMap's files a second time.
	Dotfiles bool
}

// YAMLFiles is the Selection of Load and Files: *.yaml and *.yml.
var YAMLFiles = Selection{Ext: []string{".yaml", ".yml"}}

// Files returns the files that Load reads for paths, with YAMLFiles.
func Files(paths ...string) ([]string, error) {
	return YAMLFiles.Files(paths...)
}

// Files returns the config files that a load of paths reads, in the order
// it reads them. Each path is a file, returned as is, or a directory, whose
// regular files that s selects are returned in name order (not its
// subdirectories' files, unless s.Recursive). Names starting with "." are
// skipped (unless s.Dotfiles; ".." always), so that a Kubernetes ConfigMap
// mount loads once: its visible files are symlinks into the hidden "..data"
// directory, and symlinks are followed. A returned name is the path as
// given, joined with the directory entry's name.
//
// Files reads no file. The error, if any, is an errors.Join of *Error values
// (without line or column): a path that does not exist or cannot be listed,
// and a directory with no selected file. The names found are returned with
// it, so that a caller can still tell what changed.
func (s Selection) Files(paths ...string) ([]string, error) {
	names, errs := s.files(paths)
	if len(errs) > 0 {
		return names, errors.Join(asErrors(sortErrors(errs))...)
	}
	return names, nil
}

// files is Files with the problems as a list.
func (s Selection) files(paths []string) ([]string, []*Error) {
	var (
		names []string
		errs  []*Error
	)
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			errs = append(errs, ioError(p, err))
			continue
		}
		if !fi.IsDir() {
			names = append(names, p)
			continue
		}
		found, derr := s.dir(p)
		if derr != nil {
			errs = append(errs, derr)
		} else if len(found) == 0 {
			msg := "no " + s.what() + " in directory"
			if s.Recursive {
				msg += " or below it"
			}
			errs = append(errs, &Error{File: p, Msg: msg})
		}
		names = append(names, found...)
	}
	return names, errs
}

// dir returns the files of directory p that s selects, in name order.
func (s Selection) dir(p string) ([]string, *Error) {
	entries, err := os.ReadDir(p) // sorted by name
	if err != nil {
		return nil, ioError(p, err)
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "..") || strings.HasPrefix(name, ".") && !s.Dotfiles {
			continue
		}
		full := filepath.Join(p, name)
		if s.Recursive && e.IsDir() { // a directory, not a symlink to one
			sub, err := s.dir(full)
			if err != nil {
				return nil, err
			}
			names = append(names, sub...)
			continue
		}
		if s.Ext != nil && !slices.Contains(s.Ext, filepath.Ext(name)) {
			continue
		}
		// Stat follows symlinks. A link that leads nowhere is returned, so
		// that reading it reports the problem.
		if fi, err := os.Stat(full); err == nil && fi.IsDir() {
			continue
		}
		names = append(names, full)
	}
	return names, nil
}

// what names the files s selects, for an error: "*.yaml or *.yml file".
func (s Selection) what() string {
	if len(s.Ext) == 0 {
		return "file"
	}
	pats := make([]string, len(s.Ext))
	for i, e := range s.Ext {
		pats[i] = "*" + e
	}
	return strings.Join(pats, " or ") + " file"
}

// Load reads the config files at paths, as YAMLFiles.Load does.
func Load(paths ...string) (*Config, error) {
	return YAMLFiles.Load(paths...)
}

// Load reads the config files at paths and returns the validated Config.
// Each path is a YAML file, or a directory whose files s selects (see
// Files). File names in errors and in the Config are the paths as given,
// joined with the directory entry's name.
//
// Load is pure: it logs nothing. On any problem it returns a nil Config and
// an errors.Join of every *Error found in every file, sorted by file, line
// and column, so that one run shows them all. A directory with no selected
// file is an error; no paths at all give an empty Config.
func (s Selection) Load(paths ...string) (*Config, error) {
	names, errs := s.files(paths)
	var docs []*Document
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			errs = append(errs, ioError(name, err))
			continue
		}
		doc, derrs := decodeYAML(name, data)
		docs = append(docs, doc)
		errs = append(errs, derrs...)
	}
	return build(docs, errs)
}

// Parse builds a Config from files held in memory, with the same rules,
// errors and warnings as Load: each Source is one file and one domain.
func Parse(srcs ...Source) (*Config, error) {
	var (
		docs []*Document
		errs []*Error
	)
	for _, s := range srcs {
		doc, derrs := decodeYAML(s.Name, s.Data)
		docs = append(docs, doc)
		errs = append(errs, derrs...)
	}
	return build(docs, errs)
}

func ioError(name string, err error) *Error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &Error{File: name, Msg: "cannot read: " + err.Error()}
}
