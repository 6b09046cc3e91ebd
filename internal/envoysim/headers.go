package envoysim

import (
	"strconv"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// Header is one response header as Envoy writes it (a lower-case name).
type Header struct{ Name, Value string }

// unitSeconds is the window of a RateLimit unit in seconds, as Envoy's
// rate limit filter converts it for the quota policy (WEEK and UNKNOWN
// have none: no policy item).
var unitSeconds = map[rlsv3.RateLimitResponse_RateLimit_Unit]int64{
	rlsv3.RateLimitResponse_RateLimit_SECOND: 1, rlsv3.RateLimitResponse_RateLimit_MINUTE: 60,
	rlsv3.RateLimitResponse_RateLimit_HOUR: 3600, rlsv3.RateLimitResponse_RateLimit_DAY: 86400,
	rlsv3.RateLimitResponse_RateLimit_MONTH: 30 * 86400, rlsv3.RateLimitResponse_RateLimit_YEAR: 365 * 86400,
}

// XRateLimitHeaders returns the x-ratelimit-* headers Envoy's HTTP rate
// limit filter builds from a response's statuses with
// enable_x_ratelimit_headers: DRAFT_VERSION_03 (its XRateLimitHeaderUtils):
// of the statuses with a current_limit, the first with the least
// limit_remaining gives x-ratelimit-limit's first item, x-ratelimit-remaining
// and x-ratelimit-reset (duration_until_reset in whole seconds, truncated);
// every such status then adds `, N;w=WINDOW` (and `;name="NAME"` when the
// limit has a name) to x-ratelimit-limit, in order. No status with a limit:
// no headers.
func XRateLimitHeaders(resp *rlsv3.RateLimitResponse) []Header {
	var min *rlsv3.RateLimitResponse_DescriptorStatus
	var policy strings.Builder
	for _, st := range resp.GetStatuses() {
		cl := st.GetCurrentLimit()
		if cl == nil {
			continue
		}
		if min == nil || st.GetLimitRemaining() < min.GetLimitRemaining() {
			min = st
		}
		if w := unitSeconds[cl.GetUnit()]; w > 0 {
			policy.WriteString(", " + strconv.FormatUint(uint64(cl.GetRequestsPerUnit()), 10) + ";w=" + strconv.FormatInt(w, 10))
			if cl.GetName() != "" {
				policy.WriteString(`;name="` + cl.GetName() + `"`)
			}
		}
	}
	if min == nil {
		return nil
	}
	return []Header{
		{"x-ratelimit-limit", strconv.FormatUint(uint64(min.GetCurrentLimit().GetRequestsPerUnit()), 10) + policy.String()},
		{"x-ratelimit-remaining", strconv.FormatUint(uint64(min.GetLimitRemaining()), 10)},
		{"x-ratelimit-reset", strconv.FormatInt(min.GetDurationUntilReset().GetSeconds(), 10)},
	}
}

// LimitedResponseHeaders returns the headers Envoy adds to the 429 it sends
// for an OVER_LIMIT response, in the order it writes them: the service's
// response_headers_to_add, x-envoy-ratelimited, then the x-ratelimit-*
// headers (names in lower case, as Envoy writes every header).
func LimitedResponseHeaders(resp *rlsv3.RateLimitResponse) []Header {
	var out []Header
	for _, h := range resp.GetResponseHeadersToAdd() {
		out = append(out, Header{strings.ToLower(h.GetKey()), h.GetValue()})
	}
	out = append(out, Header{"x-envoy-ratelimited", "true"})
	return append(out, XRateLimitHeaders(resp)...)
}
