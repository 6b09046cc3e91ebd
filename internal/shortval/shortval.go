// Package shortval shortens descriptor values that end clients fill (a
// header of any length) for where they are shown by their text: the status
// page and metric labels. A shortened value keeps its start, so it stays
// readable, and a hash of the whole value, so values that share a start
// stay distinct. Counter keys do not use it: they hash long values whole
// (pkg/ratelimit).
package shortval

import (
	"strconv"
	"unicode/utf8"
)

// Append appends v to b, or when v is longer than max bytes its start (cut
// on a UTF-8 sequence boundary), "…#" and 40 bits of v's FNV-1a hash in
// hex, so that what it appends is at most max bytes. max must be at least
// 14. It is safe for concurrent use.
func Append(b []byte, v string, max int) []byte {
	if len(v) <= max {
		return append(b, v...)
	}
	b = append(b, CutString(v, max-14)...)
	b = append(b, "…#"...)
	return strconv.AppendUint(b, FNV64(v)&0xffffffffff, 16)
}

// FNV64 is the 64-bit FNV-1a hash of s.
func FNV64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// Cut shortens b to at most n bytes without splitting a UTF-8 sequence.
func Cut(b []byte, n int) []byte {
	for n > 0 && n < len(b) && !utf8.RuneStart(b[n]) {
		n--
	}
	return b[:min(n, len(b))]
}

// CutString is Cut for a string.
func CutString(s string, n int) string {
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:min(n, len(s))]
}
