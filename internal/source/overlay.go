package source

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// SetPolicy makes p the policy of every config from now on and applies it
// to the last config the source built, which goes into force. If p does
// not build on that config, nothing changes and the errors are returned
// (the policy and the config in force stay). It is safe for concurrent
// use with the source's deliveries.
func (cs *State) SetPolicy(p *descriptors.Policy) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.base == nil {
		cs.policy = p
		return nil
	}
	cfg := cs.base
	if !p.Zero() {
		var err error
		if cfg, err = p.Rebuild(cs.base); err != nil {
			return err
		}
	}
	cs.policy = p
	cs.put(cfg)
	return nil
}

// WatchOverlay loads the policy overlay at path (a file or a directory)
// and puts it into force with defaults, the process defaults; Run then
// watches it, reloading debounce after a change. An overlay that does not
// load is an error (returned, for the start to stop).
func (cs *State) WatchOverlay(path string, defaults descriptors.Defaults, debounce time.Duration) error {
	o := newOverlay(path, defaults, cs, debounce, cs.log)
	if err := o.Load(); err != nil {
		return err
	}
	cs.overlay = o
	return nil
}

// Policy returns the policy in force, nil for none.
func (cs *State) Policy() *descriptors.Policy {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.policy
}

// overlayFailed records an overlay that did not load or apply: the
// overlay and the config in force stay.
func (cs *State) overlayFailed(err error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.fail(err, "overlay error, keeping the overlay and the config in force", "overlay error, no config in force")
}

// overlayWatch watches a policy overlay's file or directory and applies each
// version that loads to a State, with the process defaults: an overlay
// that does not load, or does not apply to the config in force, is logged
// and shown on /config, and the overlay in force stays.
type overlayWatch struct {
	files    *fileSource
	state    *State
	defaults descriptors.Defaults
}

// newOverlay returns the watcher of the overlay at path (a file, or a
// directory whose *.yaml and *.yml files it reads) for state, reloaded
// debounce after a change. Load makes the first load.
func newOverlay(path string, defaults descriptors.Defaults, state *State, debounce time.Duration, log *zap.Logger) *overlayWatch {
	o := &overlayWatch{state: state, defaults: defaults}
	o.files = newFileSource(path, descriptors.YAMLFiles, debounce, log.With(zap.String("overlay", path)))
	o.files.build = o.apply
	return o
}

// Load loads the overlay once and applies it; it returns the errors of an
// overlay that does not load or apply, so that a start with a bad
// overlay stops.
func (o *overlayWatch) Load() error {
	var failed error
	o.files.load(func(_ *descriptors.Config, err error) { failed = err })
	return failed
}

// Run reloads the overlay whenever its files change, until ctx ends.
func (o *overlayWatch) Run(ctx context.Context) error {
	return o.files.Run(ctx, func(_ *descriptors.Config, err error) {
		if err != nil {
			o.state.overlayFailed(err)
		}
	})
}

// apply loads the overlay read and puts it into force with the defaults.
func (o *overlayWatch) apply(set *descriptors.FileSet) (*descriptors.Config, error) {
	ov, err := set.Overlay()
	if err != nil {
		return nil, err
	}
	if err := o.state.SetPolicy(&descriptors.Policy{Defaults: o.defaults, Overlay: ov}); err != nil {
		return nil, err
	}
	o.files.log.Info("overlay loaded", zap.Strings("overlay_files", ov.Files))
	return nil, nil
}
