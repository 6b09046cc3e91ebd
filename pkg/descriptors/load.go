package descriptors

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// DefaultMaxFileBytes is the largest config file a Selection reads when its
// MaxFileBytes is 0: 4 MiB, far above a real config (a file of 10,000
// rules is about 1 MB) and far below what takes seconds and gigabytes to
// decode (a 100 MB YAML took 6.4 s and 1.6 GB).
const DefaultMaxFileBytes = 4 << 20

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
	// MaxFileBytes is the largest file read, in bytes; a larger one is an
	// error naming the file and the limit. 0 is DefaultMaxFileBytes.
	MaxFileBytes int64
	// MaxFileSetting names the setting that raises MaxFileBytes, for that
	// error ("--config-max-bytes"); empty names none.
	MaxFileSetting string
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
// subdirectories' files, unless s.Recursive). A directory entry that is
// not a regular file (a named pipe, a device, a socket, or a link to one)
// is skipped: reading a pipe blocks until something writes to it, and a
// device such as /dev/zero never ends. Names starting with "." are
// skipped (unless s.Dotfiles; ".." always), so that a Kubernetes ConfigMap
// mount loads once: its visible files are symlinks into the hidden "..data"
// directory, and symlinks are followed. A returned name is the path as
// given, joined with the directory entry's name.
//
// Files reads no file (Load warns of the entries skipped). The error, if any, is an errors.Join of *Error values
// (without line or column): a path that does not exist or cannot be listed,
// and a directory with no selected file. The names found are returned with
// it, so that a caller can still tell what changed.
func (s Selection) Files(paths ...string) ([]string, error) {
	names, _, errs := s.files(paths)
	if len(errs) > 0 {
		return names, errors.Join(asErrors(sortErrors(errs))...)
	}
	return names, nil
}

// files is Files with the problems as a list, and the directory entries
// skipped as not regular files as warnings.
func (s Selection) files(paths []string) (names []string, skipped, errs []*Error) {
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
		found, skip, derr := s.dir(p)
		skipped = append(skipped, skip...)
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
	return names, skipped, errs
}

// dir returns the files of directory p that s selects, in name order, and
// the entries it skipped as not regular files.
func (s Selection) dir(p string) (names []string, skipped []*Error, _ *Error) {
	entries, err := os.ReadDir(p) // sorted by name
	if err != nil {
		return nil, nil, ioError(p, err)
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "..") || strings.HasPrefix(name, ".") && !s.Dotfiles {
			continue
		}
		full := filepath.Join(p, name)
		if s.Recursive && e.IsDir() { // a directory, not a symlink to one
			sub, skip, err := s.dir(full)
			if err != nil {
				return nil, nil, err
			}
			names, skipped = append(names, sub...), append(skipped, skip...)
			continue
		}
		if s.Ext != nil && !slices.Contains(s.Ext, filepath.Ext(name)) {
			continue
		}
		// Stat follows symlinks. A link that leads nowhere is returned, so
		// that reading it reports the problem.
		fi, err := os.Stat(full)
		switch {
		case err == nil && fi.IsDir():
			continue
		case err == nil && !fi.Mode().IsRegular():
			skipped = append(skipped, &Error{File: full, Msg: "skipped: " + notRegular(fi.Mode())})
			continue
		}
		names = append(names, full)
	}
	return names, skipped, nil
}

// notRegular says what a file that is not regular is, for a message.
func notRegular(m fs.FileMode) string {
	kind := "special file"
	switch {
	case m&fs.ModeNamedPipe != 0:
		kind = "named pipe"
	case m&fs.ModeSocket != 0:
		kind = "socket"
	case m&fs.ModeDevice != 0:
		kind = "device"
	}
	return "not a regular file (a " + kind + ")"
}

// ReadFile reads one config file as Load does: a file that is not regular
// (a named pipe, a device, a socket) is not read, and one over the size
// limit (MaxFileBytes) is read no further than the limit. Either is an
// *Error naming the file, as is any failure to read it.
func (s Selection) ReadFile(name string) ([]byte, error) {
	data, err := s.readFile(name)
	if err != nil {
		return data, err
	}
	return data, nil
}

// readFile is ReadFile with a typed error.
func (s Selection) readFile(name string) ([]byte, *Error) {
	// O_NONBLOCK: a named pipe named directly opens at once (and is then
	// refused) instead of waiting for a writer; it changes nothing for a
	// regular file.
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, ioError(name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, ioError(name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, &Error{File: name, Msg: "cannot read: " + notRegular(fi.Mode())}
	}
	limit := s.maxFileBytes()
	if fi.Size() > limit {
		return nil, s.tooLarge(name, fi.Size())
	}
	// Files of /proc and the like report a size of 0 whatever they hold:
	// the read itself stops past the limit.
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, ioError(name, err)
	}
	if int64(len(data)) > limit {
		return nil, s.tooLarge(name, -1)
	}
	return data, nil
}

// maxFileBytes is MaxFileBytes or its default.
func (s Selection) maxFileBytes() int64 {
	if s.MaxFileBytes > 0 {
		return s.MaxFileBytes
	}
	return DefaultMaxFileBytes
}

// tooLarge is the error of a file of size bytes (-1: not known) over the
// limit.
func (s Selection) tooLarge(name string, size int64) *Error {
	msg := fmt.Sprintf("file is over the limit of %d bytes for a config file", s.maxFileBytes())
	if size >= 0 {
		msg = fmt.Sprintf("file is %d bytes, over the limit of %d bytes for a config file", size, s.maxFileBytes())
	}
	if s.MaxFileSetting != "" {
		msg += " (" + s.MaxFileSetting + " raises it)"
	}
	return &Error{File: name, Msg: msg}
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
// file is an error; no paths at all give an empty Config. A file is read
// as ReadFile reads it; a directory entry that is not a regular file is
// skipped, with a warning in Config.Warnings naming it. Load is
// s.Read(paths...).Build().
func (s Selection) Load(paths ...string) (*Config, error) {
	return s.Read(paths...).Build()
}

// FileSet is what a load read, before it is built: every selected file's
// name and contents, in the order Load builds them, and the problems met
// reading them. A caller that loads only when something changed (a watcher
// of the files) reads once, compares what it read with the last read, and
// builds those same bytes, so that the Config it swaps in is the one it
// compared. A FileSet is not modified by Build and may be built again.
type FileSet struct {
	// Files are the files read, in load order.
	Files []Source
	// errs are the paths and files that could not be read, as Load
	// reports them; skipped the directory entries that are no regular
	// files, which Load's Config warns of.
	errs, skipped []*Error
}

// Read reads the config files at paths as Load does (the files Files
// returns, each as ReadFile reads it), without decoding them.
func (s Selection) Read(paths ...string) *FileSet {
	names, skipped, errs := s.files(paths)
	set := &FileSet{errs: errs, skipped: skipped}
	for _, name := range names {
		data, rerr := s.readFile(name)
		if rerr != nil {
			set.errs = append(set.errs, rerr)
			continue
		}
		set.Files = append(set.Files, Source{Name: name, Data: data})
	}
	return set
}

// Problems returns the paths and files that could not be read, each an
// *Error as Load reports it ("config/a.yaml: cannot read: permission
// denied"), in the order they were met; nil when every file was read.
func (fs *FileSet) Problems() []error {
	return asErrors(fs.errs)
}

// Build decodes and builds the files read, as Load does: the validated
// Config, or nil and every problem (the reading's and the files') joined.
func (fs *FileSet) Build() (*Config, error) {
	var docs []*Document
	errs := slices.Clone(fs.errs)
	for _, f := range fs.Files {
		doc, derrs := decodeYAML(f.Name, f.Data)
		docs = append(docs, doc)
		errs = append(errs, derrs...)
	}
	cfg, err := build(docs, errs)
	if cfg != nil && len(fs.skipped) > 0 {
		cfg.Warnings = append(asErrors(fs.skipped), cfg.Warnings...)
	}
	return cfg, err
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
