package rls

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
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

// addHeaders fills resp.response_headers_to_add and raw_body. The limit the
// RateLimit field reports is, on a denial, the denying limit with the longest
// RetryAfter, else the limit with the least remaining; shadow-mode limits are
// never shown.
func (s *Service) addHeaders(cfg *descriptors.Config, resp *rlsv3.RateLimitResponse, vs []verdict, results []limiter.Result, over bool, retry time.Duration, exceeds bool) {
	if s.opts.Headers == 0 {
		return
	}
	chosen := -1
	var policy []string
	for i, v := range vs {
		if v.hit < 0 || v.shadow {
			continue
		}
		r := results[v.hit]
		if s.opts.Headers&HeadersDraft != 0 {
			if item := s.text(cfg, &vs[i]).policy; !contains(policy, item) {
				policy = append(policy, item)
			}
		}
		if chosen < 0 {
			chosen = i
			continue
		}
		c := results[vs[chosen].hit]
		if over {
			if !r.Allowed && (c.Allowed || r.RetryAfter > c.RetryAfter) {
				chosen = i
			}
		} else if r.Remaining < c.Remaining {
			chosen = i
		}
	}
	var hs []*corev3.HeaderValue
	if chosen >= 0 {
		v := vs[chosen]
		r := results[v.hit]
		reset := strconv.FormatInt(ceilSeconds(r.ResetAfter), 10)
		if s.opts.Headers&HeadersDraft != 0 {
			hs = append(hs,
				&corev3.HeaderValue{Key: "RateLimit-Policy", Value: strings.Join(policy, ", ")},
				&corev3.HeaderValue{Key: "RateLimit", Value: s.text(cfg, &v).quoted + ";r=" + strconv.FormatUint(r.Remaining, 10) + ";t=" + reset})
		}
		if s.opts.Headers&HeadersCompat != 0 {
			hs = append(hs,
				&corev3.HeaderValue{Key: "RateLimit-Limit", Value: strconv.FormatUint(uint64(v.limit.RequestsPerUnit), 10)},
				&corev3.HeaderValue{Key: "RateLimit-Remaining", Value: strconv.FormatUint(r.Remaining, 10)},
				&corev3.HeaderValue{Key: "RateLimit-Reset", Value: reset})
		}
	}
	if over {
		secs := max(ceilSeconds(retry), 1)
		hs = append(hs, &corev3.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(secs, 10)})
		if s.opts.RawBody {
			if exceeds {
				// No wait will admit this request: say so to the client.
				resp.RawBody = fmt.Appendf(nil, `{"error":"rate_limited","retry_after_seconds":%d,"exceeds_limit":true}`, secs)
			} else {
				resp.RawBody = fmt.Appendf(nil, `{"error":"rate_limited","retry_after_seconds":%d}`, secs)
			}
			hs = append(hs, &corev3.HeaderValue{Key: "Content-Type", Value: "application/json"})
		}
	}
	resp.ResponseHeadersToAdd = hs
}

// limitTexts caches the header text of the limits of one config.
type limitTexts struct {
	cfg *descriptors.Config
	m   sync.Map // *descriptors.Limit -> *limitText
}

// limitText is a limit's name as an sf-string and its RateLimit-Policy item.
type limitText struct{ quoted, policy string }

// text returns v's header text, from the cache of cfg's limits unless v is
// a per-request override.
func (s *Service) text(cfg *descriptors.Config, v *verdict) *limitText {
	build := func() *limitText {
		q := sfString(v.name)
		return &limitText{quoted: q, policy: q + ";q=" + strconv.FormatUint(uint64(v.limit.RequestsPerUnit), 10) +
			";w=" + strconv.FormatInt(ceilSeconds(v.limit.Window()), 10)}
	}
	if v.over {
		return build()
	}
	lt := s.texts.Load()
	if lt == nil || lt.cfg != cfg {
		lt = &limitTexts{cfg: cfg}
		s.texts.Store(lt)
	}
	if t, ok := lt.m.Load(v.limit); ok {
		return t.(*limitText)
	}
	t, _ := lt.m.LoadOrStore(v.limit, build())
	return t.(*limitText)
}

// limitName is the name a limit shows in headers: its configured name, else
// the rule's FullKey without the domain (stable across reloads).
func limitName(domain string, r *descriptors.Rule) string {
	if r.Limit.Name != "" {
		return r.Limit.Name
	}
	return strings.TrimPrefix(r.FullKey, domain+".")
}

// overrideName names a descriptor limit override: "override_10_per_minute",
// "override_10_per_5_minute".
func overrideName(l *descriptors.Limit) string {
	if l.UnitMultiplier > 1 {
		return fmt.Sprintf("override_%d_per_%d_%s", l.RequestsPerUnit, l.UnitMultiplier, l.Unit)
	}
	return fmt.Sprintf("override_%d_per_%s", l.RequestsPerUnit, l.Unit)
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

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
