package redis

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// DefaultPrefix is the key prefix when Options.Prefix and Settings.Prefix are
// empty.
const DefaultPrefix = "sluice:"

// MaxPlainKey is the longest escaped Hit.Key, in bytes, that a counter key
// holds as it is; a longer one is replaced by its SHA-256 digest, so that
// keys stay short whatever a descriptor value holds.
const MaxPlainKey = 256

// counterKey returns the Redis key of h's counter:
//
//	prefix "{" algorithm ":" window_ms ":k:" escaped(Key) "}"   escaped Key of at most MaxPlainKey bytes
//	prefix "{" algorithm ":" window_ms ":h:" hex(sha256(Key)) "}" otherwise
//
// for example "sluice:{swd50:60000:k:\x03api...}". A fixed window on a
// calendar has "@" and its name after window_ms ("fwd:2592000000@month@Europe/Berlin"),
// part of its identity: a zone name holds no brace or colon. A counter with a
// penalty (limiter.Limit.Penalty) has "!" and its block, escalate, max and
// forget after that ("fw:1000!600000x2<86400000~86400000"); the script keeps
// its block in the key plus ":p", in the same slot. algorithm is the
// algorithm's code (limiter.Traits.Code), followed by packedLayout when the
// counter is a packed string (limiter.Traits.Packed, and every counter of
// N > 1 sub-windows) and, for N > 1 sub-windows, N ("swd20"), since N is
// part of the counter's identity and of its layout. The braces are the Cluster
// hash tag: it holds the whole counter identity (Key, window, algorithm), so a
// counter is one slot. escaped replaces "%" with "%25" and "}" with "%7D" and
// keeps every other byte (binary safe), so no "}" appears inside the tag and
// the encoding is injective; "k:" and "h:" keep plain keys and digests apart.
// The prefix must hold no brace (see cleanPrefix); h.Limit must Validate.
func counterKey(prefix string, h limiter.Hit) string {
	var b strings.Builder
	esc := escapedLen(h.Key)
	hashed := esc > MaxPlainKey
	n := len(prefix) + 24 + esc
	if hashed {
		n = len(prefix) + 24 + 2*sha256.Size
	}
	b.Grow(n)
	b.WriteString(prefix)
	b.WriteByte('{')
	t := h.Limit.Algorithm.Traits()
	b.WriteString(t.Code)
	if n := h.Limit.SubWindowCount(); n > 1 {
		b.WriteString(packedLayout)
		b.Write(strconv.AppendInt(make([]byte, 0, 2), n, 10))
	} else if t.Packed {
		b.WriteString(packedLayout)
	}
	b.WriteByte(':')
	var num [20]byte
	b.Write(strconv.AppendInt(num[:0], h.Limit.Window.Milliseconds(), 10))
	if c := h.Limit.Calendar.Name(); c != "" {
		b.WriteByte('@')
		b.WriteString(c)
	}
	if p := h.Limit.Penalty; p.On() {
		b.WriteByte('!')
		b.Write(strconv.AppendInt(num[:0], p.Block.Milliseconds(), 10))
		b.WriteByte('x')
		b.Write(strconv.AppendInt(num[:0], int64(p.Escalate), 10))
		b.WriteByte('<')
		b.Write(strconv.AppendInt(num[:0], p.Max.Milliseconds(), 10))
		b.WriteByte('~')
		b.Write(strconv.AppendInt(num[:0], p.Forget.Milliseconds(), 10))
	}
	if hashed {
		sum := sha256.Sum256([]byte(h.Key))
		var hx [2 * sha256.Size]byte
		hex.Encode(hx[:], sum[:])
		b.WriteString(":h:")
		b.Write(hx[:])
	} else {
		b.WriteString(":k:")
		if esc == len(h.Key) {
			b.WriteString(h.Key)
		} else {
			for i := 0; i < len(h.Key); i++ {
				switch c := h.Key[i]; c {
				case '%':
					b.WriteString("%25")
				case '}':
					b.WriteString("%7D")
				default:
					b.WriteByte(c)
				}
			}
		}
	}
	b.WriteByte('}')
	return b.String()
}

func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if s[i] == '%' || s[i] == '}' {
			n += 2
		}
	}
	return n
}

// packedLayout marks the keys of counters that are one packed string
// (lua/fixed.lua, token.lua, sliding_sub.lua), read by the call's one MGET: sliding windows of N > 1
// sub-windows (N slots as narrow as their counts, and a head: "swd50"),
// fixed windows ("fwd": window index and count) and token buckets ("tbd":
// the bucket's t, f and d). The layouts they replaced were hashes ("sw50",
// "fw", "tb") and a string of sparse records ("swp50", never released):
// their keys are ignored (not read, not written, so a fleet that still runs
// the old layout never meets a key of the wrong type) and expire by their
// TTL (within two windows; a token bucket's when it is full again).
const packedLayout = "d"

// cleanPrefix returns the prefix to use: DefaultPrefix for "", else p with
// "{" and "}" percent-escaped, since a brace in the prefix would move the
// Cluster hash tag out of the counter identity.
func cleanPrefix(p string) string {
	if p == "" {
		return DefaultPrefix
	}
	return strings.NewReplacer("{", "%7B", "}", "%7D").Replace(p)
}

// slot returns the Redis Cluster slot of key: CRC16 (XMODEM) of its hash tag
// (the bytes between the first "{" and the first "}" after it, when not
// empty), else of the whole key, modulo 16384.
func slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, init 0), the Redis Cluster key
// hash.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
