package redis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// decodeTag inverts counterKey's hash tag for the test: it returns the
// identity a key names, or the digest for a hashed one. It fails t when the
// tag is not well formed.
func decodeTag(t *testing.T, prefix, key string) (alg string, windowMs int64, plain bool, body string) {
	t.Helper()
	if !strings.HasPrefix(key, prefix) {
		t.Fatalf("key %q lacks prefix %q", key, prefix)
	}
	open := strings.IndexByte(key, '{')
	if open != len(prefix) {
		t.Fatalf("key %q: first '{' at %d, want %d (right after the prefix)", key, open, len(prefix))
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end < 0 || open+1+end != len(key)-1 {
		t.Fatalf("key %q: the first '}' after '{' is not the last byte", key)
	}
	tag := key[open+1 : len(key)-1]
	parts := strings.SplitN(tag, ":", 4)
	if len(parts) != 4 {
		t.Fatalf("tag %q has %d parts, want 4", tag, len(parts))
	}
	w, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		t.Fatalf("tag %q window: %v", tag, err)
	}
	switch parts[2] {
	case "h":
		return parts[0], w, false, parts[3]
	case "k":
		var b strings.Builder
		s := parts[3]
		for i := 0; i < len(s); i++ {
			if s[i] != '%' {
				b.WriteByte(s[i])
				continue
			}
			if i+2 >= len(s) {
				t.Fatalf("tag %q: truncated escape", tag)
			}
			switch s[i+1 : i+3] {
			case "25":
				b.WriteByte('%')
			case "7D":
				b.WriteByte('}')
			default:
				t.Fatalf("tag %q: unknown escape %q", tag, s[i:i+3])
			}
			i += 2
		}
		return parts[0], w, true, b.String()
	}
	t.Fatalf("tag %q: kind %q, want k or h", tag, parts[2])
	return
}

func hitFor(key string, w time.Duration) limiter.Hit {
	return limiter.Hit{Key: key, Limit: limiter.Limit{Requests: 10, Window: w}}
}

// checkRoundTrip checks that key names exactly the identity of h: the tag is
// well formed and decodes back to h's Key (or its digest), window and
// algorithm.
func checkRoundTrip(t *testing.T, prefix string, h limiter.Hit) string {
	t.Helper()
	key := counterKey(prefix, h)
	alg, w, plain, body := decodeTag(t, prefix, key)
	if alg != "sw" || w != h.Limit.Window.Milliseconds() {
		t.Errorf("counterKey(%q, %v) = %q: algorithm %q window %d, want sw %d", h.Key, h.Limit.Window, key, alg, w, h.Limit.Window.Milliseconds())
	}
	if plain {
		if body != h.Key {
			t.Errorf("counterKey(%q) = %q decodes to %q", h.Key, key, body)
		}
		if escapedLen(h.Key) > MaxPlainKey {
			t.Errorf("counterKey(%q): %d escaped bytes kept plain, want hashed", h.Key, escapedLen(h.Key))
		}
	} else {
		sum := sha256.Sum256([]byte(h.Key))
		if body != hex.EncodeToString(sum[:]) {
			t.Errorf("counterKey(%q) digest = %q, want sha256 of the key", h.Key, body)
		}
		if escapedLen(h.Key) <= MaxPlainKey {
			t.Errorf("counterKey(%q): short key hashed", h.Key)
		}
	}
	return key
}

func TestCounterKey(t *testing.T) {
	long := strings.Repeat("v", 4096)
	for _, tc := range []struct {
		name string
		key  string
	}{
		{"empty", ""},
		{"underscore", "a_b"},
		{"pipe", "a|b"},
		{"equals", "a=b"},
		{"colon", "a:b:k:c"},
		{"open brace", "{"},
		{"close brace", "}"},
		{"tag breakout", "x}{y}"},
		{"percent", "%"},
		{"looks escaped", "%7D"},
		{"looks escaped percent", "%25"},
		{"unicode", "héllo, 世界 🚦"},
		{"invalid utf-8", "\xff\xfe\x00"},
		{"nul bytes", "\x00\x00"},
		{"4 KiB", long},
		{"4 KiB of braces", strings.Repeat("}", 4096)},
		{"just under the hash threshold", strings.Repeat("a", MaxPlainKey)},
		{"just over the hash threshold", strings.Repeat("a", MaxPlainKey+1)},
		{"escapes push it over", strings.Repeat("}", MaxPlainKey/3+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := checkRoundTrip(t, DefaultPrefix, hitFor(tc.key, time.Minute))
			if len(key) > len(DefaultPrefix)+24+MaxPlainKey {
				t.Errorf("len(counterKey) = %d, want at most %d", len(key), len(DefaultPrefix)+24+MaxPlainKey)
			}
		})
	}
}

func TestCounterKeyDistinct(t *testing.T) {
	// Pairs that a naive join ("key_window", "a|b") would merge.
	hits := []limiter.Hit{
		hitFor("", time.Minute),
		hitFor("a", time.Minute),
		hitFor("a", time.Second),
		hitFor("a", 60*time.Second+time.Millisecond),
		hitFor("a:60000", time.Minute),
		hitFor("}", time.Minute),
		hitFor("%7D", time.Minute),
		hitFor("%", time.Minute),
		hitFor("%25", time.Minute),
		hitFor("a_b", time.Minute),
		hitFor("a|b", time.Minute),
		hitFor("a=b", time.Minute),
		hitFor(strings.Repeat("a", MaxPlainKey+1), time.Minute),
		hitFor(strings.Repeat("a", MaxPlainKey+2), time.Minute),
	}
	// A plain key that spells a digest must not meet the hashed key.
	sum := sha256.Sum256([]byte(strings.Repeat("a", MaxPlainKey+1)))
	hits = append(hits, hitFor("h:"+hex.EncodeToString(sum[:]), time.Minute))
	seen := map[string]int{}
	for i, h := range hits {
		k := counterKey(DefaultPrefix, h)
		if j, ok := seen[k]; ok {
			t.Errorf("hits %d and %d share key %q", j, i, k)
		}
		seen[k] = i
	}
}

func TestCleanPrefix(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "sluice:"},
		{"app:", "app:"},
		{"a{b}:", "a%7Bb%7D:"},
	} {
		if got := cleanPrefix(tc.in); got != tc.want {
			t.Errorf("cleanPrefix(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	checkRoundTrip(t, cleanPrefix("x{y}"), hitFor("}", time.Second))
}

func TestSlot(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want int
	}{
		{"123456789", 0x31C3 % 16384}, // the CRC-16/XMODEM check value
		{"foo", 12182},                // CLUSTER KEYSLOT foo
		{"{user1000}.following", slot("user1000")},
		{"foo{}{bar}", int(crc16("foo{}{bar}") % 16384)}, // empty tag: whole key
		{"foo{{bar}}zap", slot("{bar")},
	} {
		if got := slot(tc.key); got != tc.want {
			t.Errorf("slot(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
}

// FuzzCacheKey checks that two different counter identities never share a
// key and that the hash tag is well formed and holds the whole identity.
func FuzzCacheKey(f *testing.F) {
	f.Add("", "", int64(60000), int64(60000))                        // empty keys, same window: equal identities
	f.Add("a", "a", int64(1000), int64(60000))                       // same key, different windows
	f.Add("}", "%7D", int64(1000), int64(1000))                      // a brace and its escape
	f.Add("%", "%25", int64(1000), int64(1000))                      // a percent and its escape
	f.Add("a}{b", "a%7D{b", int64(7), int64(7))                      // a tag breakout attempt
	f.Add(strings.Repeat("}", 100), "", int64(1), int64(1))          // escapes push past MaxPlainKey
	f.Add("\xff\x00{", "\xff\x00", int64(86400000), int64(86400000)) // invalid UTF-8
	f.Fuzz(func(t *testing.T, k1, k2 string, w1, w2 int64) {
		if w1 <= 0 || w2 <= 0 || w1 > 1<<40 || w2 > 1<<40 {
			return
		}
		h1 := hitFor(k1, time.Duration(w1)*time.Millisecond)
		h2 := hitFor(k2, time.Duration(w2)*time.Millisecond)
		key1 := checkRoundTrip(t, DefaultPrefix, h1)
		key2 := checkRoundTrip(t, DefaultPrefix, h2)
		same := k1 == k2 && w1 == w2
		if same != (key1 == key2) {
			t.Errorf("identities (%q, %d) and (%q, %d): keys %q and %q", k1, w1, k2, w2, key1, key2)
		}
	})
}

// TestEveryAlgorithmIsWired: every limiter.Algorithm has its own key code
// and a section in the script (a request on it runs).
func TestEveryAlgorithmIsWired(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t, Options{})
	seen := map[string]limiter.Algorithm{}
	for _, a := range limiter.Algorithms() {
		code := a.Traits().Code
		if code == "" {
			t.Errorf("algorithm %v has no key code (limiter.Traits.Code)", a)
			continue
		}
		if other, ok := seen[code]; ok {
			t.Errorf("algorithms %v and %v share the key code %q", other, a, code)
		}
		seen[code] = a
		h := limiter.Hit{Key: "k", Limit: limiter.Limit{Requests: 3, Window: time.Minute, Algorithm: a}, Hits: 1}
		res, err := s.Apply(context.Background(), []limiter.Hit{h})
		if err != nil || len(res) != 1 || !res[0].Allowed || res[0].Remaining != 2 {
			t.Errorf("Apply one hit on 3/min with %v = %+v, %v; want Allowed, Remaining 2", a, res, err)
		}
	}
}
