package source

import (
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"

	"go.uber.org/zap"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// TestFileSourceReadsOnce: a load opens each config file once, whether it
// loads or finds nothing changed: what it compares is what it builds. The
// kernel counts the opens (inotify's IN_OPEN, one event per open).
func TestFileSourceReadsOnce(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	write(t, a, "domain: a\n")
	write(t, b, "domain: b\n")
	opens := watchOpens(t, a, b)
	fs := newFileSource(dir, descriptors.YAMLFiles, 0, zap.NewNop())
	deliver := func(c *descriptors.Config, err error) {
		if err != nil || len(c.Domains()) != 2 {
			t.Errorf("load = %v, %v; want domains a and b", c.Domains(), err)
		}
	}
	for _, step := range []struct {
		name   string
		loaded bool
	}{{"first load", true}, {"nothing changed", false}} {
		if got := fs.load(deliver); got != step.loaded {
			t.Errorf("%s: load = %v, want %v", step.name, got, step.loaded)
		}
		if got := opens(); got[a] != 1 || got[b] != 1 {
			t.Errorf("%s: opens per file = %v, want 1 each", step.name, got)
		}
	}
}

// watchOpens watches files for opens and returns a function that counts
// the opens of each since it was last called.
func watchOpens(t *testing.T, files ...string) func() map[string]int {
	t.Helper()
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	byWatch := map[int32]string{}
	for _, f := range files {
		wd, err := syscall.InotifyAddWatch(fd, f, syscall.IN_OPEN)
		if err != nil {
			t.Fatalf("inotify watch %s: %v", f, err)
		}
		byWatch[int32(wd)] = f
	}
	return func() map[string]int {
		counts := map[string]int{}
		buf := make([]byte, 64*(syscall.SizeofInotifyEvent+syscall.NAME_MAX+1))
		for {
			n, err := syscall.Read(fd, buf)
			if err == syscall.EAGAIN {
				return counts
			}
			if err != nil || n <= 0 {
				t.Fatalf("inotify read: %d, %v", n, err)
			}
			for off := 0; off+syscall.SizeofInotifyEvent <= n; {
				ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
				if ev.Mask&syscall.IN_OPEN != 0 {
					counts[byWatch[ev.Wd]]++
				}
				off += syscall.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}
}
