package tenants

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"gopkg.in/yaml.v3"
)

// File is the tables held in one YAML file, for the in-memory store: a
// mapping of table names to mappings of entry values to row text.
//
//	api_tenants:
//	  acme: pro
//	  bigco: 50000/minute
//
// The file is read again when its size or modification time changes
// (checked each second by Changes), and each reload is reported as a Reset
// of every table. A file that cannot be read or parsed keeps the tables
// last read. File is safe for concurrent use.
type File struct {
	path string

	mu     sync.RWMutex
	tables map[string]map[string]string
	stamp  fileStamp
}

type fileStamp struct {
	size int64
	mod  time.Time
}

var (
	_ Source = (*File)(nil)
	_ Writer = (*File)(nil)
)

// OpenFile returns the tables of the file at path, which need not exist
// yet (no tables). It returns an error for a file that exists but does not
// parse.
func OpenFile(path string) (*File, error) {
	f := &File{path: path}
	if _, err := f.reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// reload reads the file if it changed, and reports whether it did.
func (f *File) reload() (bool, error) {
	st, err := os.Stat(f.path)
	if os.IsNotExist(err) {
		st, err = nil, nil
	}
	if err != nil {
		return false, err
	}
	var stamp fileStamp
	if st != nil {
		stamp = fileStamp{st.Size(), st.ModTime()}
	}
	f.mu.RLock()
	same := f.tables != nil && stamp == f.stamp
	f.mu.RUnlock()
	if same {
		return false, nil
	}
	tables := map[string]map[string]string{}
	if st != nil {
		data, err := os.ReadFile(f.path)
		if err != nil {
			return false, err
		}
		if err := yaml.Unmarshal(data, &tables); err != nil {
			return false, fmt.Errorf("%s: want a mapping of table names to mappings of values to rows: %w", f.path, err)
		}
	}
	f.mu.Lock()
	f.tables, f.stamp = tables, stamp
	f.mu.Unlock()
	return true, nil
}

// Row returns value's row of table as last read; it never fails.
func (f *File) Row(_ context.Context, table, value string) (string, bool, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r, ok := f.tables[table][value]
	return r, ok, nil
}

// Changes waits a second (or until ctx ends), reads the file again if it
// changed, and reports a Reset of every table if it did.
func (f *File) Changes(ctx context.Context, cursor string) ([]Change, string, error) {
	select {
	case <-ctx.Done():
		return nil, cursor, ctx.Err()
	case <-time.After(time.Second):
	}
	changed, err := f.reload()
	if err != nil || !changed {
		return nil, cursor, err
	}
	return []Change{{Reset: true}}, cursor, nil
}

// edit applies fn to the tables as on disk and writes them back
// atomically (a temporary file renamed over the file).
func (f *File) edit(fn func(tables map[string]map[string]string)) error {
	if _, err := f.reload(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.tables)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(f.tables); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.path), ".tenants-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), f.path)
}

func (f *File) table(tables map[string]map[string]string, name string) map[string]string {
	if tables[name] == nil {
		tables[name] = map[string]string{}
	}
	return tables[name]
}

// Set writes rows to table in the file.
func (f *File) Set(_ context.Context, table string, rows map[string]string) error {
	return f.edit(func(tables map[string]map[string]string) {
		t := f.table(tables, table)
		for v, r := range rows {
			t[v] = r
		}
	})
}

// Import writes rows to table in the file.
func (f *File) Import(_ context.Context, table string, rows [][2]string) error {
	return f.edit(func(tables map[string]map[string]string) {
		t := f.table(tables, table)
		for _, r := range rows {
			t[r[0]] = r[1]
		}
	})
}

// Delete removes values' rows from table in the file.
func (f *File) Delete(_ context.Context, table string, values ...string) error {
	return f.edit(func(tables map[string]map[string]string) {
		for _, v := range values {
			delete(tables[table], v)
		}
	})
}

// List calls fn with every row of table as last read.
func (f *File) List(_ context.Context, table string, fn func(value, row string) bool) error {
	if _, err := f.reload(); err != nil {
		return err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	for v, r := range f.tables[table] {
		if !fn(v, r) {
			return nil
		}
	}
	return nil
}
