package ratelimit

import "github.com/sluicehq/sluice/pkg/descriptors"

// CounterKey returns the key under which Decide counts a descriptor with
// these entries in domain when it matches rule (nil if it matches none): the
// domain and every entry, length-prefixed, so no two descriptors share a key
// whatever bytes they hold, except that an entry matched by a wildcard rule
// with share_threshold contributes the rule's pattern, so every value it
// matches shares one key; a value longer than 128 bytes is replaced by its
// SHA-256. Front ends that count outside Decide (pkg/rlqs, whose buckets
// share a limit through the store) name the limit with it, so one config
// means the same counters whichever protocol asks.
func CounterKey(domain string, entries []descriptors.Entry, rule *descriptors.Rule) string {
	return counterKey(domain, entries, rule, false)
}
