package xdsconfig

import (
	"strings"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	b := newBackoff(Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Jitter: 0.5})
	b.rand = func() float64 { return 0.5 } // the middle: no jitter
	var got []time.Duration
	for range 6 {
		got = append(got, b.next())
	}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Errorf("step %d = %v, want %v", i, got[i], want[i]*time.Millisecond)
		}
	}
	b.reset()
	for _, tc := range []struct {
		r    float64
		want time.Duration
	}{{0, 50 * time.Millisecond}, {0.999999, 150 * time.Millisecond}} {
		b.n = 0
		b.rand = func() float64 { return tc.r }
		if d := b.next(); d < tc.want-time.Millisecond || d > tc.want+time.Millisecond {
			t.Errorf("rand %v: wait %v, want %v (Jitter 0.5 spreads the step by ±50%%)", tc.r, d, tc.want)
		}
	}
	// Many attempts never overflow into a negative or zero wait.
	b.rand = func() float64 { return 0.5 }
	for range 100 {
		b.next()
	}
	if d := b.next(); d != time.Second {
		t.Errorf("after many attempts: %v, want the 1s cap", d)
	}
	d := newBackoff(Backoff{})
	if d.Initial != DefaultBackoffInitial || d.Max != DefaultBackoffMax || d.Jitter != 0 {
		t.Errorf("defaults = %+v", d.Backoff)
	}
}

func TestErrorDetailBounded(t *testing.T) {
	line := strings.Repeat("x", 99) + "\n"
	msg := errorDetail(errorString(strings.Repeat(line, 1000) + "last"))
	if len(msg) > maxErrorDetail+100 || !strings.HasSuffix(msg, "... (838 more lines)") {
		t.Errorf("errorDetail: %d bytes, ending %q", len(msg), msg[len(msg)-40:])
	}
	if short := errorDetail(errorString("a\nb")); short != "a\nb" {
		t.Errorf("errorDetail(short) = %q", short)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
