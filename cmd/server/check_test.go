package main

import (
	"bytes"
	"path/filepath"
	"testing"
)

// TestCheckWindowTooLong is the regression test of issue 12 item 1: a window
// that overflowed int64 (a year x 300) loaded ("ok") and then answered
// INTERNAL on every matching call. sluice check now refuses it, with the
// file, line and column of unit_multiplier.
func TestCheckWindowTooLong(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.yaml")
	write(t, file, "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, unit_multiplier: 300, requests_per_unit: 5}\n")
	var out, errOut bytes.Buffer
	if code := cli([]string{"check", dir}, &out, &errOut, func(string) string { return "" }); code != 1 {
		t.Errorf("check = %d, want 1", code)
	}
	want := file + ":4:47: descriptors[0].rate_limit.unit_multiplier: want an integer from 1 to 10 with unit year (a window is at most 10 years of 365 days), got the integer 300\n"
	if got := errOut.String(); got != want {
		t.Errorf("check stderr = %q, want %q", got, want)
	}
	if out.Len() != 0 {
		t.Errorf("check stdout = %q, want nothing", out.String())
	}
}
