package rlqs

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// Match returns the entries of a bucket id (BucketId.bucket, a map) in the
// order that the domain's descriptor tree gives them, and the rule those
// entries match, exactly as a ShouldRateLimit descriptor with the same
// entries in that order matches (descriptors.Config.Match). It returns the
// entries sorted by key and a nil rule when no order matches a rule.
//
// The order: starting with the domain's top-level rules, take the first
// rule in config order whose key is in the bucket id and whose descriptor
// (the entries taken so far plus this key's entry) matches a rule; continue
// among that rule's children with the keys left. When the keys run out, the
// rule reached is the bucket's. When a level offers no key left, go back
// and try the next key of the level above. So {route: search, api_key: a}
// is [api_key=a, route=search] under a tree api_key > route, and a bucket
// matches only a rule exactly as deep as its number of keys, as descriptors
// do. Each step goes down to a distinct node of the tree, so the search
// visits each node at most once. Match is safe for concurrent use.
func Match(cfg *descriptors.Config, domain string, bucket map[string]string) ([]descriptors.Entry, *descriptors.Rule) {
	d := cfg.Domain(domain)
	if d == nil || len(bucket) == 0 {
		return sortedEntries(bucket), nil
	}
	m := matcher{cfg: cfg, domain: domain, bucket: bucket, path: make([]descriptors.Entry, 0, len(bucket))}
	if r := m.walk(d.Rules); r != nil {
		return m.path, r
	}
	return sortedEntries(bucket), nil
}

// matcher is one Match's depth-first search.
type matcher struct {
	cfg    *descriptors.Config
	domain string
	bucket map[string]string
	path   []descriptors.Entry // the entries taken, in order
}

// walk tries each key of level (the children of the rule m.path matched, or
// the top-level rules) that the bucket holds and m.path does not, in config
// order, and returns the rule reached when every key is taken, nil if none.
func (m *matcher) walk(level []*descriptors.Rule) *descriptors.Rule {
	for i, r := range level {
		v, ok := m.bucket[r.Key]
		if !ok || m.taken(r.Key) || seenKey(level[:i], r.Key) {
			continue
		}
		m.path = append(m.path, descriptors.Entry{Key: r.Key, Value: v})
		if got := m.cfg.Match(m.domain, m.path); got != nil {
			if len(m.path) == len(m.bucket) {
				return got
			}
			if found := m.walk(next(got, len(m.path))); found != nil {
				return found
			}
		}
		m.path = m.path[:len(m.path)-1]
	}
	return nil
}

// next is the level below got, the rule n entries matched: its children;
// for a pool's class matched without a class entry (the pool's own depth),
// the pool's children and its class entry, so that a bucket id naming a
// class, or a child of the pool, matches as its descriptor does.
func next(got *descriptors.Rule, n int) []*descriptors.Rule {
	c := got.Class
	if c == nil || n != len(c.Pool.Lineage) {
		return got.Children
	}
	return append(c.Pool.Children[:len(c.Pool.Children):len(c.Pool.Children)], c.Pool.Pool.Lowest.Rule)
}

func (m *matcher) taken(key string) bool {
	for _, e := range m.path {
		if e.Key == key {
			return true
		}
	}
	return false
}

// seenKey reports whether a rule of rules has key: that key was tried at
// this level already (siblings may share a key with different values).
func seenKey(rules []*descriptors.Rule, key string) bool {
	for _, r := range rules {
		if r.Key == key {
			return true
		}
	}
	return false
}

func sortedEntries(bucket map[string]string) []descriptors.Entry {
	out := make([]descriptors.Entry, 0, len(bucket))
	for k, v := range bucket {
		out = append(out, descriptors.Entry{Key: k, Value: v})
	}
	slices.SortFunc(out, func(a, b descriptors.Entry) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// maxIDValue is the longest value a bucket's identity in a stream holds as
// it is; a longer one (a header an end client filled) is replaced by its
// SHA-256, so that a stream's memory stays bounded by its bucket count.
const maxIDValue = 128

// bucketKey is the identity of a bucket id within a stream: its entries
// sorted by key, each key and value length-prefixed (a long value replaced
// by its digest), so that two bucket ids share it exactly when they are the
// same map (BucketId: the order of keys does not matter).
func bucketKey(bucket map[string]string) string {
	var buf []byte
	for _, e := range sortedEntries(bucket) {
		buf = binary.AppendUvarint(buf, uint64(len(e.Key)))
		buf = append(buf, e.Key...)
		if len(e.Value) > maxIDValue {
			sum := sha256.Sum256([]byte(e.Value))
			buf = append(buf, 'h')
			buf = append(buf, sum[:]...)
			continue
		}
		buf = append(buf, 'v')
		buf = binary.AppendUvarint(buf, uint64(len(e.Value)))
		buf = append(buf, e.Value...)
	}
	return string(buf)
}
