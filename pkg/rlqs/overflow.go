package rlqs

import (
	"slices"
	"time"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// A bucket past a bound (Options.MaxBuckets, Options.MaxTotalBuckets) is
// never left without an assignment: bucket ids may hold values end clients
// choose, and a bucket Sluice does not answer is enforced by Envoy's
// no_assignment_behavior (allow all, by default), so a client that fills
// the bounds would leave every new tenant unlimited. First the stream's
// idle buckets make room (evictor); past that, the bucket is answered, for
// the report at hand and untracked, from its rule's overflow group: one
// shared limit per rule and limit that the store divides among the streams
// as any other, so that what the over-bound buckets of a rule admit in the
// fleet stays within the rule's limit.
//
// The overflow group's key is the bucket's counter key with every value
// that the rule matches per value (a key-only node, or a wildcard without
// share_threshold) replaced by the node's own value, plus overflowSuffix so
// that it names no bucket's counter. When every such bucket id counts on a
// counter of its own (no share_threshold wildcard or pool class on the
// path), each is assigned the stream's whole share of the group, as it
// would be of its own limit were it tracked; otherwise they split it as the
// buckets of a group do. A rule whose values are all fixed has no overflow
// group of its own: its bucket joins the group it would be tracked in.

// overflowSuffix ends the key of an overflow group. Every other group's key
// ends with its algorithm's digits, so no bucket's counter shares it.
const overflowSuffix = "\x00overflow"

// maxHanded is the most entries a group keeps of what it handed to buckets
// past a bound: beyond it the two oldest are merged, which overstates what
// is live until they expire, so a stream reporting very often stays bounded.
const maxHanded = 32

// bindOverflow resolves b, a bucket past a bound, in cfg and attaches it to
// the groups it is answered from: its rule's overflow groups. b is not
// added to the groups' members: what it is assigned is kept in their
// handed, by report.
func (s *Service) bindOverflow(st *stream, b *bucket, cfg *descriptors.Config, dom *descriptors.Domain, id map[string]string) {
	entries, rule := Match(cfg, dom.Name, id)
	b.cfg, b.policy, b.over = cfg, s.policyOf(rule), true
	if b.policy != policyShare {
		return
	}
	masked, perValue := overflowEntries(entries, rule)
	suffix := ""
	if masked != nil {
		entries, suffix = masked, overflowSuffix
	}
	key := ratelimit.CounterKey(dom.Name, entries, rule)
	for _, l := range rule.Limits {
		if !l.Shares() {
			continue
		}
		g := s.groupOf(st, key, suffix, l)
		g.perValue = perValue
		st.overflow[g.id()] = g
		b.groups = append(b.groups, g)
	}
	b.held = make([]heldPart, len(b.groups))
}

// overflowEntries returns entries with the value of every entry that rule's
// node matches per value replaced by the node's value, nil when there is
// none; and whether each bucket id of the rule counts on a counter of its
// own (no share_threshold wildcard and no pool class on the path).
func overflowEntries(entries []descriptors.Entry, rule *descriptors.Rule) ([]descriptors.Entry, bool) {
	n := min(rule.PoolEntries(len(entries)), len(rule.Lineage))
	own := n == len(entries)
	var masked []descriptors.Entry
	for i := range n {
		node := rule.Lineage[i]
		switch {
		case node.ShareThreshold && node.Wildcard:
			own = false
		case node.Value == "" || node.Wildcard:
			if masked == nil {
				masked = slices.Clone(entries)
			}
			masked[i].Value = node.Value
		}
	}
	return masked, own && masked != nil
}

// hand records that a bucket past a bound was assigned part in report,
// live in Envoy until expires (Unix ns).
func (g *group) hand(part, report uint64, expires int64) {
	if n := len(g.handed); n > 0 && g.handed[n-1].report == report {
		last := &g.handed[n-1]
		last.fill, last.expires = g.combine(last.fill, part), max(last.expires, expires)
		return
	}
	if len(g.handed) == maxHanded {
		g.handed[1].fill = g.combine(g.handed[0].fill, g.handed[1].fill)
		g.handed = slices.Delete(g.handed, 0, 1)
	}
	g.handed = append(g.handed, heldPart{fill: part, report: report, expires: expires})
}

// combine adds up two parts handed to buckets past a bound: the larger for
// a perValue group (each bucket counts on its own counter), else their sum.
func (g *group) combine(a, b uint64) uint64 {
	if g.perValue {
		return max(a, b)
	}
	return a + b
}

// handedLive is what the live parts handed to buckets past a bound admit,
// those handed in report except (0: none) left out.
func (g *group) handedLive(now int64, except uint64) uint64 {
	n := uint64(0)
	for _, h := range g.handed {
		if h.expires > now && h.report != except {
			n = g.combine(n, h.fill)
		}
	}
	return n
}

// pruneOverflow drops what the stream's overflow groups handed out that
// has expired, and forgets the groups left with nothing live and no
// tracked bucket. It returns their claims, to release.
func (st *stream) pruneOverflow(now int64) []limiter.Claim {
	var release []limiter.Claim
	for gid, g := range st.overflow {
		live := g.handed[:0]
		for _, h := range g.handed {
			if h.expires > now {
				live = append(live, h)
			}
		}
		g.handed = live
		if len(g.handed) > 0 || g.buckets > 0 {
			continue
		}
		delete(st.overflow, gid)
		if st.groups[gid] == g {
			delete(st.groups, gid)
			release = append(release, g.claim)
		}
	}
	return release
}

// overflowDemand adds b, a bucket past a bound of report, to the demand and
// count of the groups it is answered from: its demand added as a tracked
// bucket's is, or the largest taken for a perValue group (each of its
// buckets needs its own share).
func overflowDemand(b *bucket, report uint64, now time.Time) {
	for _, g := range b.groups {
		if g.claimed != report {
			continue
		}
		g.overN++
		if d := b.demandRate(now); g.perValue {
			g.rate = max(g.rate, d)
		} else {
			g.rate += d
		}
	}
}

// observeOver sets the demand of b, a bucket past a bound, from one usage:
// count requests over elapsed (newBucketSpan when Envoy gives less than
// minSpan).
func (b *bucket) observeOver(count uint64, elapsed time.Duration) {
	if elapsed < minSpan {
		elapsed = newBucketSpan
	}
	b.rate = float64(count) / elapsed.Seconds()
}
