package rls

import (
	"crypto/sha256"
	"encoding/binary"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// Tags of the counter key encoding. Each part after the domain opens with a
// tag, so a part's kind never depends on the bytes of another.
const (
	tagEntry    = 'e' // an entry: key, then its value
	tagPattern  = 'p' // an entry whose value is a shared wildcard pattern
	tagOverride = 'o' // a descriptor limit override: rate, unit, multiplier
	tagHashed   = 'h' // an entry whose value is longer than maxKeyValue: key, SHA-256 of value
)

// maxKeyValue is the longest entry value a counter key holds as it is; a
// longer one (a header an end client filled) is replaced by its SHA-256, so
// every value counts in its own counter while keys stay small in memory and
// in Redis.
const maxKeyValue = 128

// counterKey is the counter key of descriptor d in domain: the domain and
// every entry, each length-prefixed (see the package doc). rule is the
// matched rule, nil if none; override marks a descriptor limit override,
// which counts in its own counter with the descriptor's own values.
func counterKey(domain string, d *rlcommon.RateLimitDescriptor, rule *descriptors.Rule, override bool) string {
	es := d.GetEntries()
	n := len(domain) + 12
	for _, e := range es {
		n += len(e.GetKey()) + len(e.GetValue()) + 22
	}
	buf := make([]byte, 0, n)
	buf = appendPart(buf, domain)
	for i, e := range es {
		v, tag := e.GetValue(), byte(tagEntry)
		if !override && rule != nil && i < len(rule.Lineage) {
			if node := rule.Lineage[i]; node.ShareThreshold && node.Wildcard {
				v, tag = node.Value, tagPattern
			}
		}
		if len(v) > maxKeyValue {
			sum := sha256.Sum256([]byte(v))
			buf = append(buf, tagHashed)
			buf = appendPart(buf, e.GetKey())
			buf = append(buf, sum[:]...)
			continue
		}
		buf = append(buf, tag)
		buf = appendPart(buf, e.GetKey())
		buf = appendPart(buf, v)
	}
	if override {
		o := d.GetLimit()
		buf = append(buf, tagOverride)
		buf = binary.AppendUvarint(buf, uint64(o.GetRequestsPerUnit()))
		buf = binary.AppendUvarint(buf, uint64(o.GetUnit()))
		m := uint64(1)
		if o.GetUnitMultiplier() != nil {
			m = uint64(o.GetUnitMultiplier().GetValue())
		}
		buf = binary.AppendUvarint(buf, m)
	}
	return string(buf)
}

func appendPart(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}
