package source

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// MaxWaitFactor bounds how long a burst of changes can hold a reload back:
// at most MaxWaitFactor debounces after the burst's first change (1 s at the
// default 250 ms), a reload happens even while changes continue. A burst
// that one save or one ConfigMap swap makes is over within milliseconds; a
// file still changing after four quiet periods is being rewritten without
// pause, and waiting for it to stop would never reload.
// A reload in the middle of such writes may read a half-written file: its
// errors are reported and the config in force stays, until the next reload.
const MaxWaitFactor = 4

// fileSource is the config in files: --config, a file or a directory
// (whose files descriptors.Files selects), watched for changes.
type fileSource struct {
	path     string
	debounce time.Duration
	sel      descriptors.Selection
	log      *zap.Logger
	// build builds what a load read: (*FileSet).Build for a config; an
	// overlay's puts it into force itself.
	build func(*descriptors.FileSet) (*descriptors.Config, error)

	mu    sync.Mutex // serializes loads: the first (Load's), then Run's
	fp    [sha256.Size]byte
	fpSet bool
}

var _ Source = (*fileSource)(nil)

// newFileSource returns the source of the config at path, the files of a
// directory chosen by sel, reloaded debounce after a change (see
// MaxWaitFactor).
func newFileSource(path string, sel descriptors.Selection, debounce time.Duration, log *zap.Logger) *fileSource {
	return &fileSource{path: path, debounce: debounce, sel: sel, log: log, build: (*descriptors.FileSet).Build}
}

// Info describes the source: its kind and --config.
func (f *fileSource) Info() Info {
	return Info{Kind: "file", Path: f.path}
}

// Load makes the first load (loadFirst), waiting for it at most
// firstLoadWait. It reports whether the load ended within that wait.
func (f *fileSource) Load(deliver Deliver) bool {
	return f.loadFirst(deliver, firstLoadWait)
}

// load reads the files and, unless no file changed since the last load
// (an event about a log file beside the config, a touch), builds what it
// read and delivers the outcome. Each file is read once: the bytes compared
// are the bytes built, so a file rewritten meanwhile cannot leave a config
// in force that the fingerprint does not describe. It reports whether it
// loaded.
func (f *fileSource) load(deliver Deliver) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	var (
		changed bool
		cfg     *descriptors.Config
		err     error
	)
	lean(func() {
		set := f.sel.Read(f.path)
		fp := fingerprint(set)
		if changed = !f.fpSet || fp != f.fp; changed {
			f.fp, f.fpSet = fp, true
			cfg, err = f.build(set)
		}
	})
	// Delivered after lean's collection, not during it: Run watches a
	// symlink's new target once the load returns, and an edit there in
	// the meantime would go unseen.
	if changed {
		deliver(cfg, err)
	}
	return changed
}

// loadGCPercent is the garbage collector's target while files are read
// (the fingerprint and the build): Go's default. The server's own (400, set
// in internal/app) suits a live heap of a few MB; a load's garbage (every
// file's bytes, their YAML trees, the decoded documents) is
// several times the config it builds.
const loadGCPercent = 100

// lean runs load with the collector's target at most loadGCPercent (a
// target already lower, or off, stays), restores the target in force, and
// then gives the load's garbage (the bytes read, the YAML trees, the
// decoded documents) back to the system at once. At the server's target it
// stayed mapped until traffic's garbage reached the next collection: a
// directory of 100,000 one-rule files held 783 MB of RSS a minute after
// loading, 131 MB so (and peaked at 678 MB, 379 MB so).
func lean(load func()) {
	prev := debug.SetGCPercent(loadGCPercent)
	if prev < 0 || prev <= loadGCPercent {
		debug.SetGCPercent(prev)
	} else {
		defer debug.SetGCPercent(prev)
	}
	defer debug.FreeOSMemory()
	load()
}

// firstLoadWait is how long the start waits for the first load of the
// files before it opens the listeners anyway: /healthz must answer, and
// /readyz say why the server is not ready, while a load is stuck (a file
// system that does not answer) or slow (many files near the size limit).
// A real config loads in milliseconds.
const firstLoadWait = 2 * time.Second

// loadFirst loads the files once, as load, and reports whether the load
// ended within wait. When it did not, it returns and the load goes on in a
// goroutine of its own that ends with the load and delivers its outcome
// then; Run's loads wait for it (see mu). A read that never returns cannot
// be stopped: with pipes and devices skipped and the size bounded, only a
// file system that does not answer holds it.
func (f *fileSource) loadFirst(deliver Deliver, wait time.Duration) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.load(deliver)
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		f.log.Warn("config still loading; listening meanwhile, not ready until it loads",
			zap.String("config_file", f.path), zap.Duration("waited", wait))
		return false
	}
}

// fingerprint hashes what a load read: the names and contents of the files
// that its selection picked, read as a load reads them (no pipe or device,
// nothing past the size limit), and the paths and files it could not read
// with their errors, so that a change there counts.
func fingerprint(set *descriptors.FileSet) [sha256.Size]byte {
	h := sha256.New()
	for _, err := range set.Problems() {
		fmt.Fprintf(h, "error %v\x00", err)
	}
	for _, file := range set.Files {
		fmt.Fprintf(h, "%s\x00%d\x00", file.Name, len(file.Data))
		h.Write(file.Data)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// Run reloads the config whenever it changes, until ctx ends. It watches the
// directory that holds the config (the config itself when it is a
// directory), so it sees editors' rename-on-save and the symlink swap of a
// Kubernetes ConfigMap (..data -> ..2026_...). It loads once changes have
// been quiet for the debounce, so that a burst of writes is one reload, or
// at the latest MaxWaitFactor debounces after the burst began.
func (f *fileSource) Run(ctx context.Context, deliver Deliver) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(f.path)); err != nil {
		return err
	}
	f.watch(w)
	f.log.Info("watching config", zap.String("config_file", f.path))
	// A change between the first load and the watch has no event: load
	// once more now (nothing happens when no file changed).
	f.load(deliver)
	d := debounce{wait: f.debounce, max: MaxWaitFactor * f.debounce}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if f.relevant(ev) {
				timer.Reset(d.event(time.Now()))
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			f.log.Warn("config watch error", zap.Error(err))
		case <-timer.C:
			d.fired()
			f.load(deliver)
			f.watch(w)
		}
	}
}

// watch adds to w the config's directory (or the config itself when it is
// one), the directory holding it (a symlinked directory is swapped there),
// and the current target of a symlink, re-resolved after every reload, and,
// when the selection is recursive, every directory below the config. A
// ConfigMap's files are symlinks through ..data into a timestamped
// directory, and its update is the swap of ..data inside the watched
// directory. Adding a path already watched does nothing.
func (f *fileSource) watch(w *fsnotify.Watcher) {
	w.Add(filepath.Dir(f.path))
	if fi, err := os.Stat(f.path); err == nil && fi.IsDir() {
		w.Add(f.path)
		f.watchBelow(w, f.path)
	}
	if target, err := filepath.EvalSymlinks(f.path); err == nil {
		w.Add(filepath.Dir(target))
		if fi, err := os.Stat(target); err == nil && fi.IsDir() {
			w.Add(target)
		}
	}
}

// watchBelow adds the directories below dir that a recursive selection
// reads (fsnotify watches one directory, not a tree).
func (f *fileSource) watchBelow(w *fsnotify.Watcher, dir string) {
	if !f.sel.Recursive {
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), "..") || strings.HasPrefix(e.Name(), ".") && !f.sel.Dotfiles {
			continue
		}
		sub := filepath.Join(dir, e.Name())
		w.Add(sub)
		f.watchBelow(w, sub)
	}
}

// relevant reports whether ev may change the config. In the directory
// holding the config, only the config itself and Kubernetes' ..data links
// matter, so that a log file written there does not trigger reloads; a
// change of mode alone changes nothing. (A load is also skipped when no
// config file changed: see fingerprint.)
func (f *fileSource) relevant(ev fsnotify.Event) bool {
	if ev.Has(fsnotify.Chmod) && !ev.Has(fsnotify.Write) {
		return false
	}
	path := filepath.Clean(f.path)
	name := filepath.Clean(ev.Name)
	return filepath.Dir(name) != filepath.Dir(path) || name == path || strings.HasPrefix(filepath.Base(name), "..")
}

// debounce holds a burst of changes back until it has been quiet for wait,
// but no longer than max after the burst's first change.
type debounce struct {
	wait, max time.Duration
	first     time.Time // the burst's first change; zero when none is pending
}

// event notes a change at now and returns how long from now to wait before
// loading.
func (d *debounce) event(now time.Time) time.Duration {
	if d.first.IsZero() {
		d.first = now
	}
	return max(0, min(d.wait, d.first.Add(d.max).Sub(now)))
}

// fired ends the burst: the load is under way, and the next change starts a
// new burst.
func (d *debounce) fired() {
	d.first = time.Time{}
}
