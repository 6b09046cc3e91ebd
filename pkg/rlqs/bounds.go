package rlqs

import (
	"slices"
	"time"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// Bounds on buckets. A new bucket past Options.MaxBuckets (the stream's) or
// Options.MaxTotalBuckets (all streams') first takes the place of one of the
// stream's idle buckets, the least recently active first; a stream that
// finds none answers it from its rule's overflow group (overflow.go) and
// asks the other streams, through Service.owed, to give up their idle
// buckets at their next reports, so that it is tracked at its own next
// report.

// room is what one report may evict to make room: the stream's evictable
// buckets, least recently active first.
type room struct {
	next []evictable
}

type evictable struct {
	key string
	b   *bucket
}

// evictable reports whether b may be evicted at report: it was held by the
// report but without a request (Envoy is told to abandon it in the
// response), or no report has held it for ttl, so Envoy no longer has it.
func (b *bucket) evictable(report uint64, now time.Time, ttl time.Duration) bool {
	if b.report == report {
		return !b.idleSince.IsZero() && !b.abandon
	}
	return now.Sub(b.seen) >= ttl
}

// lastActive is when b last reported a request, as far as its state tells:
// the first report since without one, else its last report.
func (b *bucket) lastActive() time.Time {
	if !b.idleSince.IsZero() {
		return b.idleSince
	}
	return b.seen
}

// roomFor returns the report's evictable buckets when the report may need
// them: it holds fresh new buckets past a bound, or other streams wait for
// room (owed); nil otherwise. It must run before the report's new buckets
// are added.
func (s *Service) roomFor(st *stream, fresh int, now time.Time) *room {
	past := len(st.buckets)+fresh > s.opts.MaxBuckets || s.buckets.Load()+int64(fresh) > int64(s.opts.MaxTotalBuckets)
	if (fresh == 0 || !past) && !s.owing(now) {
		return nil
	}
	r := &room{}
	for k, b := range st.buckets {
		if b.evictable(st.reports, now, s.opts.AssignmentTTL) {
			r.next = append(r.next, evictable{k, b})
		}
	}
	slices.SortFunc(r.next, func(x, y evictable) int { return x.b.lastActive().Compare(y.b.lastActive()) })
	return r
}

// evict forgets the next evictable bucket of r, counted under bound, and
// returns the claims it leaves unused and whether there was one. An evicted
// bucket that the report holds is answered with an AbandonAction.
func (s *Service) evict(st *stream, r *room, bound string) ([]limiter.Claim, bool) {
	for r != nil && len(r.next) > 0 {
		e := r.next[0]
		r.next = r.next[1:]
		if st.buckets[e.key] != e.b {
			continue
		}
		delete(st.buckets, e.key)
		s.buckets.Add(-1)
		s.opts.Metrics.bucketsAdded(-1)
		s.opts.Metrics.evict(bound)
		e.b.abandon = true
		return st.regroup(e.b, nil), true
	}
	return nil, false
}

// admit returns the stream's new bucket for key: tracked when the bounds
// leave room, if need be in place of an evictable bucket of r; else nil,
// the bucket being past a bound. It returns the claims evictions leave
// unused.
func (s *Service) admit(st *stream, r *room, key string, now time.Time) (*bucket, []limiter.Claim) {
	var release []limiter.Claim
	if len(st.buckets) >= s.opts.MaxBuckets {
		rel, ok := s.evict(st, r, "max_buckets")
		if !ok {
			s.opts.Metrics.overflow("max_buckets")
			s.degraded("a stream reports more buckets than --rlqs-max-buckets, none idle; the rest share their rule's overflow limit", st.domain, nil)
			return nil, nil
		}
		release = rel
	}
	for s.buckets.Add(1) > int64(s.opts.MaxTotalBuckets) {
		s.buckets.Add(-1)
		rel, ok := s.evict(st, r, "max_total_buckets")
		if !ok {
			s.owe(now)
			s.opts.Metrics.overflow("max_total_buckets")
			s.degraded("quota streams track --rlqs-max-total-buckets buckets in all, none idle; new ones share their rule's overflow limit", st.domain, nil)
			return nil, release
		}
		release = append(release, rel...)
	}
	b := &bucket{}
	st.buckets[key] = b
	s.opts.Metrics.bucketsAdded(1)
	return b, release
}

// giveRoom evicts evictable buckets of r, as many as other streams wait for
// (owed), and returns the claims they leave unused.
func (s *Service) giveRoom(st *stream, r *room) []limiter.Claim {
	var release []limiter.Claim
	for s.takeOwed() {
		rel, ok := s.evict(st, r, "max_total_buckets")
		if !ok {
			s.owed.Add(1)
			break
		}
		release = append(release, rel...)
	}
	return release
}

// owe records that a new bucket found no room under MaxTotalBuckets, so
// that other streams evict one of their idle buckets: at most MaxBuckets
// are owed at once.
func (s *Service) owe(now time.Time) {
	s.owedAt.Store(now.UnixNano())
	if s.owed.Add(1) > int64(s.opts.MaxBuckets) {
		s.owed.Add(-1)
	}
}

// owing reports whether other streams wait for room. What is owed lapses
// an assignment TTL after the last bucket that found none: by then its
// stream has reported again, and asks again if it still needs room.
func (s *Service) owing(now time.Time) bool {
	if s.owed.Load() <= 0 {
		return false
	}
	if now.UnixNano()-s.owedAt.Load() > int64(s.opts.AssignmentTTL) {
		s.owed.Store(0)
		return false
	}
	return true
}

// takeOwed takes one bucket of what is owed, false when nothing is.
func (s *Service) takeOwed() bool {
	for {
		n := s.owed.Load()
		if n <= 0 {
			return false
		}
		if s.owed.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// newBuckets counts the usages of a report whose bucket the stream does not
// track (a bucket repeated in the report counts each time).
func newBuckets(st *stream, keys []string) int {
	n := 0
	for _, k := range keys {
		if st.buckets[k] == nil {
			n++
		}
	}
	return n
}

// overBucket returns the report's bucket past a bound for key (over holds
// them by key), bound to its overflow groups in cfg, made if new.
func (s *Service) overBucket(st *stream, over map[string]*bucket, cfg *descriptors.Config, dom *descriptors.Domain, key string, id map[string]string) *bucket {
	if b := over[key]; b != nil {
		return b
	}
	b := &bucket{}
	s.bindOverflow(st, b, cfg, dom, id)
	over[key] = b
	return b
}
