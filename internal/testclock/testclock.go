// Package testclock is the one fake clock of Sluice's tests: a Clock that
// reads a settable time instead of the system's, so tests move time instead
// of sleeping, which makes them fast and exact. It is a test helper shared by several
// packages, so it lives in internal/; production code never imports it.
package testclock

import (
	"sync/atomic"
	"time"
)

// Clock is a fake clock safe for concurrent use. Its time has nanosecond
// resolution, no monotonic reading and no location beyond time.Local (it is
// built with time.Unix), and it moves only when Set or Advance is called. The
// zero value reads the Unix epoch.
type Clock struct {
	ns atomic.Int64 // Unix nanoseconds
}

// New returns a Clock reading t.
func New(t time.Time) *Clock {
	c := &Clock{}
	c.Set(t)
	return c
}

// NewMilli returns a Clock reading the Unix millisecond ms, the unit of
// pkg/limiter's times.
func NewMilli(ms int64) *Clock { return New(time.UnixMilli(ms)) }

// Now returns the clock's time. Its signature is time.Now's, so c.Now can be
// passed wherever a func() time.Time clock is injected.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Set moves the clock to t, forward or back.
func (c *Clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// SetMilli moves the clock to the Unix millisecond ms, forward or back.
func (c *Clock) SetMilli(ms int64) { c.Set(time.UnixMilli(ms)) }

// Advance moves the clock by d; a negative d moves it back. Concurrent
// Advances all apply.
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
