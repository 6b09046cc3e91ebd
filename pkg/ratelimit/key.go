package ratelimit

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// Tags of the counter key encoding. Each part after the domain opens with a
// tag, so a part's kind never depends on the bytes of another.
const (
	tagEntry    = 'e' // an entry: key, then its value
	tagPattern  = 'p' // an entry whose value is a shared wildcard pattern
	tagOverride = 'o' // the descriptor's own limit override counts here
	tagHashed   = 'h' // an entry whose value is longer than maxKeyValue: key, SHA-256 of value
)

// maxKeyValue is the longest entry value a counter key holds as it is; a
// longer one (a header an end client filled) is replaced by its SHA-256, so
// every value counts in its own counter while keys stay small in memory and
// in Redis.
const maxKeyValue = 128

// counterKey is the counter key of a descriptor with these entries in
// domain: the domain and every entry, each length-prefixed, so no two
// descriptors share a counter whatever bytes their values hold. An entry
// matched by a wildcard rule with share_threshold contributes the rule's
// pattern instead of its value, so every matching value shares one counter.
// A pool's class leaves its class entry out: every class of a pool counts on
// the pool's counter. rule is the matched rule, nil if none. override marks a descriptor limit
// override, which counts in a counter of its own (never the configured
// limit's), identified by the entries alone: the store adds the window and
// the algorithm, and the override's requests_per_unit is left out, so a
// changed override keeps its count.
func counterKey(domain string, entries []descriptors.Entry, rule *descriptors.Rule, override bool) string {
	n := len(domain) + 12
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 22
	}
	var room [160]byte // most keys fit: then the string is their one allocation
	buf := room[:0]
	if n > len(room) {
		buf = make([]byte, 0, n)
	}
	buf = appendPart(buf, domain)
	if !override {
		entries = entries[:rule.PoolEntries(len(entries))] // a pool's class counts on the pool
	}
	for i, e := range entries {
		v, tag := e.Value, byte(tagEntry)
		if !override && rule != nil && i < len(rule.Lineage) {
			if node := rule.Lineage[i]; node.ShareThreshold && node.Wildcard {
				v, tag = node.Value, tagPattern
			}
		}
		if len(v) > maxKeyValue {
			sum := sha256.Sum256([]byte(v))
			buf = append(buf, tagHashed)
			buf = appendPart(buf, e.Key)
			buf = append(buf, sum[:]...)
			continue
		}
		buf = append(buf, tag)
		buf = appendPart(buf, e.Key)
		buf = appendPart(buf, v)
	}
	if override {
		buf = append(buf, tagOverride)
	}
	return string(buf)
}

func appendPart(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}
