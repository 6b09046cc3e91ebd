package rls

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// HeaderSet selects the response header sets Sluice asks Envoy to add
// (RateLimitResponse.response_headers_to_add). The zero value sends none.
// Any non-zero set also sends Retry-After on OVER_LIMIT.
type HeaderSet uint8

const (
	// HeadersDraft sends RateLimit-Policy and RateLimit as defined by the
	// IETF draft-ietf-httpapi-ratelimit-headers-10 (Structured Fields).
	HeadersDraft HeaderSet = 1 << iota
	// HeadersCompat sends RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset as plain integers, as envoyproxy/ratelimit does with
	// its response headers enabled.
	HeadersCompat
)

// DefaultCompatNames are the HeadersCompat header names: the limit, the
// remaining and the reset, as envoyproxy/ratelimit names them by default.
var DefaultCompatNames = [3]string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}

// ParseHeaderSet parses the --response-headers setting: a comma-separated
// list of "draft", "compat" and "none" ("none" alone sends nothing). It
// returns an error naming the unknown word.
func ParseHeaderSet(s string) (HeaderSet, error) {
	var h HeaderSet
	for _, w := range strings.Split(s, ",") {
		switch strings.TrimSpace(strings.ToLower(w)) {
		case "draft":
			h |= HeadersDraft
		case "compat":
			h |= HeadersCompat
		case "none", "":
		default:
			return 0, fmt.Errorf("unknown response header set %q (want draft, compat, draft,compat or none)", strings.TrimSpace(w))
		}
	}
	return h, nil
}

// String returns the setting spelling of h ("draft,compat", "none").
func (h HeaderSet) String() string {
	var ws []string
	if h&HeadersDraft != 0 {
		ws = append(ws, "draft")
	}
	if h&HeadersCompat != 0 {
		ws = append(ws, "compat")
	}
	if len(ws) == 0 {
		return "none"
	}
	return strings.Join(ws, ",")
}

// inlineHeaders is how many headers a headerList holds without another
// allocation: RateLimit-Policy, RateLimit and Retry-After, the default set.
const inlineHeaders = 3

// headerList is the response headers of one response: the first
// inlineHeaders in its own memory, more each in one of their own.
type headerList struct {
	list []*corev3.HeaderValue
	ptr  [inlineHeaders]*corev3.HeaderValue
	hv   [inlineHeaders]corev3.HeaderValue
}

// add appends the header key: value.
func (h *headerList) add(key, value string) {
	n := len(h.list)
	if n >= inlineHeaders {
		h.list = append(h.list, &corev3.HeaderValue{Key: key, Value: value})
		return
	}
	if n == 0 {
		h.list = h.ptr[:0]
	}
	h.hv[n].Key, h.hv[n].Value = key, value
	h.list = append(h.list, &h.hv[n])
}

// addHeaders fills resp.response_headers_to_add (from h's memory) and
// raw_body from d: the RateLimit fields report d's binding limit,
// RateLimit-Policy lists every counted limit that is not in shadow mode,
// and Retry-After comes with OVER_LIMIT. The values that vary per call
// share one string.
func (s *Service) addHeaders(resp *rlsv3.RateLimitResponse, d *ratelimit.Decision, h *headerList) {
	if s.opts.Headers == 0 {
		return
	}
	if d.Binding >= 0 {
		st := &d.Statuses[d.Binding]
		r := st.Result
		reset := uint64(ceilSeconds(r.ResetAfter))
		var buf [96]byte
		b := buf[:0]
		var ends [3]int // the end in b of RateLimit, then of the compat remaining and reset
		if s.opts.Headers&HeadersDraft != 0 {
			b = append(b, s.texts.get(d.Config, st.Override, st.Name, st.Limit).quoted...)
			b = strconv.AppendUint(append(b, ";r="...), r.Remaining, 10)
			b = strconv.AppendUint(append(b, ";t="...), reset, 10)
		}
		ends[0] = len(b)
		if s.opts.Headers&HeadersCompat != 0 {
			b = strconv.AppendUint(b, r.Remaining, 10)
			ends[1] = len(b)
			b = strconv.AppendUint(b, reset, 10)
		}
		ends[2] = len(b)
		text := string(b)
		if s.opts.Headers&HeadersDraft != 0 {
			h.add("RateLimit-Policy", s.policy(d))
			h.add("RateLimit", text[:ends[0]])
		}
		if s.opts.Headers&HeadersCompat != 0 {
			h.add(s.opts.CompatNames[0], strconv.FormatUint(uint64(st.Limit.CeilingRequests()), 10))
			h.add(s.opts.CompatNames[1], text[ends[0]:ends[1]])
			h.add(s.opts.CompatNames[2], text[ends[1]:ends[2]])
		}
	}
	if d.Code == ratelimit.OverLimit {
		s.addOverLimit(resp, d, h)
	}
	resp.ResponseHeadersToAdd = h.list
}

// addOverLimit adds Retry-After and, with Options.RawBody, the raw body and
// its Content-Type, to the response to an OVER_LIMIT decision.
func (s *Service) addOverLimit(resp *rlsv3.RateLimitResponse, d *ratelimit.Decision, h *headerList) {
	secs := max(ceilSeconds(d.RetryAfter), 1)
	h.add("Retry-After", strconv.FormatInt(secs, 10))
	if !s.opts.RawBody {
		return
	}
	if d.ExceedsLimit {
		// No wait will admit this request: say so to the client.
		resp.RawBody = fmt.Appendf(nil, `{"error":"rate_limited","retry_after_seconds":%d,"exceeds_limit":true}`, secs)
	} else {
		resp.RawBody = fmt.Appendf(nil, `{"error":"rate_limited","retry_after_seconds":%d}`, secs)
	}
	h.add("Content-Type", "application/json")
}

// policy is the RateLimit-Policy value: one item per distinct counted limit
// that is not in shadow mode (every limit of a rule's rate_limits), in
// descriptor and config order. A single item is the cached text itself.
func (s *Service) policy(d *ratelimit.Decision) string {
	var room [4]string
	items := room[:0]
	for i := range d.Statuses {
		st := &d.Statuses[i]
		if !st.Counted() || st.Shadow {
			continue
		}
		for _, ls := range st.Limits {
			if item := s.texts.get(d.Config, st.Override, ls.Name, ls.Limit).policy; !slices.Contains(items, item) {
				items = append(items, item)
			}
		}
	}
	return strings.Join(items, ", ")
}

// textCache caches the header text of the limits of the config in force.
// It is safe for concurrent use.
type textCache struct {
	cur atomic.Pointer[limitTexts]
}

// limitTexts caches the header text of the limits of one config.
type limitTexts struct {
	cfg *descriptors.Config
	m   sync.Map // *descriptors.Limit -> *limitText
}

// limitText is what responses say of one limit: its name as an sf-string,
// its RateLimit-Policy item and its DescriptorStatus.current_limit. The
// current_limit message is shared by every response that reports the limit
// and must never be modified (gRPC only reads it to marshal it).
type limitText struct {
	quoted, policy string
	current        *rlsv3.RateLimitResponse_RateLimit
}

// get returns the header text of limit l called name, from the cache of
// cfg's limits unless l is a per-request override.
//
// The policy item is "name";q=requests_per_unit;w=window seconds for every
// algorithm. For a token bucket that is its refill rate (q tokens every w
// seconds; the bucket holds up to its burst), and the RateLimit field's r
// is the whole tokens in the bucket now, t the seconds until it is full
// again: the draft's quota and window are a rate, which a token bucket
// keeps over any long period, and its burst is what r can show above q.
// For a pool's class, q is the class's ceiling in requests,
// floor(requests_per_unit x ceiling), the most the class is ever admitted.
func (c *textCache) get(cfg *descriptors.Config, override bool, name string, l *descriptors.Limit) *limitText {
	build := func() *limitText {
		q := sfString(name)
		return &limitText{quoted: q, policy: q + ";q=" + strconv.FormatUint(uint64(l.CeilingRequests()), 10) +
			";w=" + strconv.FormatInt(ceilSeconds(l.Window()), 10), current: currentLimit(l)}
	}
	if override {
		return build()
	}
	lt := c.cur.Load()
	if lt == nil || lt.cfg != cfg {
		lt = &limitTexts{cfg: cfg}
		c.cur.Store(lt)
	}
	if t, ok := lt.m.Load(l); ok {
		return t.(*limitText)
	}
	t, _ := lt.m.LoadOrStore(l, build())
	return t.(*limitText)
}

// sfString renders s as a Structured Fields string (RFC 9651 section 3.3.3):
// quoted, with '"' and '\' escaped; bytes outside printable ASCII, which an
// sf-string cannot hold, become '?'.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
