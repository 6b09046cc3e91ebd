package envoysim

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// Request is a simulated downstream GET request.
type Request struct {
	Path string // the :path pseudo-header, query string included
	// Headers holds the request headers by lower-case name, without
	// pseudo-headers.
	Headers map[string]string
	// Authority is the value of :authority and host. When it is "", those
	// two are looked up in Headers like any other name.
	Authority string
	// Scheme is the value of :scheme. When it is "", :scheme is looked up
	// in Headers.
	Scheme string
	// ClientAddress is the downstream address: the value the
	// remote_address action sends.
	ClientAddress string
	// DynamicMetadata is the stream's dynamic metadata by filter namespace,
	// then key, holding string values: what the metadata action (source
	// DYNAMIC) reads. The rate limit filter keeps its service's response
	// metadata under envoy.filters.http.ratelimit.
	DynamicMetadata map[string]map[string]string
}

// Header returns the value Envoy would see for the header name, and
// whether the request has it. Pseudo-headers come from Path, Authority and
// Scheme; :method is always GET. Other names are looked up in Headers
// case-insensitively.
func (r Request) Header(name string) (string, bool) {
	switch name {
	case ":path":
		return r.Path, true
	case ":method":
		return "GET", true
	case ":authority", "host":
		if r.Authority != "" {
			return r.Authority, true
		}
	case ":scheme":
		if r.Scheme != "" {
			return r.Scheme, true
		}
	}
	v, ok := r.Headers[strings.ToLower(name)]
	return v, ok
}

// String formats r for error messages as "GET <path>" followed by each
// header as " name:value", in name order.
func (r Request) String() string {
	var b strings.Builder
	b.WriteString("GET " + r.Path)
	for _, k := range slices.Sorted(maps.Keys(r.Headers)) {
		fmt.Fprintf(&b, " %s:%s", k, r.Headers[k])
	}
	return b.String()
}

// SampleRequests returns, for each path in turn, a request with every
// combination of the named headers: 2^len(names) requests a path, the first
// with none of them. A header carries values[name], or "sample-<name>" if
// values has no entry for it. Every other field is copied from base, whose
// Path and Headers are ignored. Callers bound len(names): 8 names already
// make 256 requests a path.
func SampleRequests(base Request, paths, names []string, values map[string]string) []Request {
	var out []Request
	for _, p := range paths {
		for set := range 1 << len(names) {
			req := base
			req.Path, req.Headers = p, map[string]string{}
			for i, n := range names {
				if set&(1<<i) != 0 {
					req.Headers[n] = sampleValue(values, n)
				}
			}
			out = append(out, req)
		}
	}
	return out
}

func sampleValue(values map[string]string, name string) string {
	if v, ok := values[name]; ok {
		return v
	}
	return "sample-" + name
}

// Entry is a descriptor entry with where its value came from.
type Entry struct {
	descriptors.Entry
	// Source is "" for a value fixed by the config, else the name of the
	// header the value was read from, "client address", or "metadata
	// <namespace>:<key>" for dynamic metadata.
	Source string
}

// Descriptor is one descriptor that Envoy sends to the rate limit service
// for a request.
type Descriptor struct {
	Req     Request
	Route   string // the name of the route whose rate_limits produced it
	Domain  string // the rate limit filter's domain
	Entries []Entry
	// HitsAddend is the rate limit's hits_addend as configured: "" when
	// unset (the request's hits), a number, or a format Envoy fills in
	// ("%RESP(x-tokens-used)%").
	HitsAddend string
	// NegativeHits is hits_addend.is_negative_hits: the hits are given back.
	NegativeHits bool
	// StreamDone is apply_on_stream_done: Envoy sends the descriptor when
	// the stream ends, not on the request path, and ignores the answer.
	StreamDone bool
}

// Shape names d with every request-derived value replaced by its source,
// e.g. "edge [api_key=<x-api-key>, route=search]", so that the descriptors
// of many sample requests collapse into the few a config must cover.
func (d Descriptor) Shape() string {
	parts := make([]string, len(d.Entries))
	for i, e := range d.Entries {
		v := e.Value
		if e.Source != "" {
			v = "<" + e.Source + ">"
		}
		parts[i] = e.Key + "=" + v
	}
	return d.Domain + " [" + strings.Join(parts, ", ") + "]"
}

// FormatEntries formats es as "[key=value, key=value]".
func FormatEntries(es []Entry) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Key + "=" + e.Value
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
