package ratelimit

import (
	"strconv"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// SlotTokenKey is the reserved key of a descriptor's last entry that carries
// a slot token, and the field of the response's dynamic metadata that hands
// one out. A request admitted with a concurrency limit (an algorithm that
// counts requests in flight) takes its slots under a token of its own, which
// the response returns in its dynamic metadata (Decision.SlotToken; Envoy
// keeps it under the namespace envoy.filters.http.ratelimit); the release
// that Envoy sends when the stream ends carries it back as the entry
// {SlotTokenKey, token} after the descriptor's own, read from that metadata
// by a metadata rate limit action (source DYNAMIC). Decide strips the entry
// before matching, counting and observing, so the descriptor matches and
// counts as without it. A release frees only its token's slots: none
// without the entry or with a value that is not a live token, so the release
// Envoy sends for a request that was denied or answered by the failure mode
// (which took no slot) frees nothing, and a token freed once frees nothing
// again.
const SlotTokenKey = "sluice_slot"

// descriptorEntries returns d's entries without a trailing slot token entry
// (SlotTokenKey), and the token it carries: 0 when there is none or its
// value is not a token (the decimal text of 1 to limiter.MaxSlotToken, as
// FormatSlotToken writes it).
func descriptorEntries(d *Descriptor) ([]descriptors.Entry, uint64) {
	n := len(d.Entries)
	if n == 0 || d.Entries[n-1].Key != SlotTokenKey {
		return d.Entries, 0
	}
	return d.Entries[:n-1], ParseSlotToken(d.Entries[n-1].Value)
}

// ParseSlotToken returns the slot token that s spells, as FormatSlotToken
// writes it, and 0 for any other text (the token of no slot).
func ParseSlotToken(s string) uint64 {
	t, err := strconv.ParseUint(s, 10, 64)
	if err != nil || t == 0 || t > limiter.MaxSlotToken || strconv.FormatUint(t, 10) != s {
		return 0
	}
	return t
}

// FormatSlotToken is the text of slot token t, as responses hand it out:
// its decimal digits.
func FormatSlotToken(t uint64) string { return strconv.FormatUint(t, 10) }

// slotTokens gives the hits of a request their slot tokens, each holding
// the token its descriptor sent back (0 for none): a hit of an algorithm
// that counts requests in flight keeps it when it releases (a refund), and
// takes the request's own token when it acquires (drawn once, on the first
// such hit); other hits carry none. It returns the request's token when a
// hit acquires at least one slot, else 0.
func slotTokens(hits []limiter.Hit) (acquired uint64) {
	var own uint64
	for i := range hits {
		h := &hits[i]
		switch {
		case !h.Limit.Algorithm.Traits().InFlight:
			h.SlotToken = 0
		case h.Refund:
		default:
			if own == 0 {
				own = limiter.NewSlotToken()
			}
			h.SlotToken = own
			if h.Hits > 0 {
				acquired = own
			}
		}
	}
	return acquired
}
