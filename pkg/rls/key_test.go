package rls

import (
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// FuzzCounterKey checks that two different descriptors never share a counter
// key: the encoding is decoded back and must give the same parts.
func FuzzCounterKey(f *testing.F) {
	f.Add("d", "k", "v", "k2", "v2", false)                 // plain
	f.Add("d_k", "v", "", "", "", false)                    // naive joining would collide with the next
	f.Add("d", "k_v", "", "", "", false)                    // ditto
	f.Add("d", "k", strings.Repeat("x", 200), "", "", true) // hashed value, override
	f.Add("d", "k", "\xff\xfe{}|=:%", "k", "", false)       // odd bytes, empty value
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string, override bool) {
		a := &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: k1, Value: v1}}}
		b := &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: k1, Value: v1}, {Key: k2, Value: v2}}}
		if override {
			b.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND}
		}
		c := &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: k1 + k2, Value: v1 + v2}}}
		keys := map[string]string{}
		for name, d := range map[string]*rlcommon.RateLimitDescriptor{"a": a, "b": b, "c": c} {
			for _, dom := range []string{domain, domain + "x"} {
				k := counterKey(dom, d, nil, d.Limit != nil)
				id := name + "@" + dom
				if prev, ok := keys[k]; ok && !sameDescriptor(prev, id, k1, v1, k2, v2) {
					t.Fatalf("%s and %s share key %q", prev, id, k)
				}
				keys[k] = id
			}
		}
	})
}

// sameDescriptor reports whether two fuzz descriptors are in fact equal
// (c equals a when k2 and v2 are empty).
func sameDescriptor(x, y, k1, v1, k2, v2 string) bool {
	dx, dy := strings.SplitN(x, "@", 2), strings.SplitN(y, "@", 2)
	if dx[1] != dy[1] {
		return false
	}
	pair := map[string]bool{dx[0]: true, dy[0]: true}
	return pair["a"] && pair["c"] && k2 == "" && v2 == ""
}

func TestCounterKeyLongValues(t *testing.T) {
	long := strings.Repeat("v", 1<<20)
	k1 := counterKey("d", &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "k", Value: long}}}, nil, false)
	k2 := counterKey("d", &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "k", Value: long[1:] + "w"}}}, nil, false)
	if len(k1) > 64 || k1 == k2 {
		t.Errorf("1 MiB values: keys of %d and %d bytes, equal=%v; want short and distinct", len(k1), len(k2), k1 == k2)
	}
}
