package testclock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testclock"
)

func TestClock(t *testing.T) {
	var zero testclock.Clock
	if got := zero.Now(); !got.Equal(time.Unix(0, 0)) {
		t.Errorf("zero Clock Now() = %v, want the Unix epoch", got)
	}
	c := testclock.NewMilli(1_800_000_000_123)
	if got := c.Now().UnixMilli(); got != 1_800_000_000_123 {
		t.Errorf("NewMilli(1_800_000_000_123).Now() = %d ms", got)
	}
	c.Advance(1500 * time.Microsecond)
	if got := c.Now().UnixNano(); got != 1_800_000_000_124_500_000 {
		t.Errorf("after Advance(1.5ms) Now() = %d ns, want 1_800_000_000_124_500_000", got)
	}
	c.Advance(-time.Second)
	if got := c.Now().UnixMilli(); got != 1_799_999_999_124 {
		t.Errorf("after Advance(-1s) Now() = %d ms, want 1_799_999_999_124", got)
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	c.Set(at)
	if got := c.Now(); !got.Equal(at) {
		t.Errorf("after Set(%v) Now() = %v", at, got)
	}
	c.SetMilli(7)
	if got := c.Now(); !got.Equal(time.UnixMilli(7)) {
		t.Errorf("after SetMilli(7) Now() = %v", got)
	}
	if got := testclock.New(at).Now(); !got.Equal(at) {
		t.Errorf("New(%v).Now() = %v", at, got)
	}
}

// TestClockConcurrent: concurrent Advances all apply (run with -race).
func TestClockConcurrent(t *testing.T) {
	c := testclock.NewMilli(0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	if got := c.Now().UnixMilli(); got != 8000 {
		t.Errorf("after 8000 concurrent Advance(1ms): %d ms, want 8000", got)
	}
}
