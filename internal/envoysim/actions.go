package envoysim

import (
	"cmp"
	"fmt"
	"regexp"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// Entries returns the entries that one element of a route's rate_limits
// produces for req, in action order, and false when Envoy would send no
// descriptor for it (an action with nothing to add, such as an absent
// header without skip_if_absent). It simulates the request_headers,
// remote_address (sending req.ClientAddress), generic_key,
// header_value_match and metadata (source DYNAMIC, a path of one key, read
// from req.DynamicMetadata) actions, with Envoy's default descriptor keys.
// It returns an error for any other action, for header_value_match with a
// default_value, for metadata from the route entry or by a longer path, and
// for a header matcher HeadersMatch does not simulate.
func Entries(actions []*routev3.RateLimit_Action, req Request) ([]Entry, bool, error) {
	var out []Entry
	for i, a := range actions {
		switch {
		case a.GetRequestHeaders() != nil:
			rh := a.GetRequestHeaders()
			v, ok := req.Header(rh.GetHeaderName())
			if !ok {
				if rh.GetSkipIfAbsent() {
					continue
				}
				return nil, false, nil
			}
			out = append(out, Entry{descriptors.Entry{Key: rh.GetDescriptorKey(), Value: v}, rh.GetHeaderName()})
		case a.GetRemoteAddress() != nil:
			out = append(out, Entry{descriptors.Entry{Key: "remote_address", Value: req.ClientAddress}, "client address"})
		case a.GetGenericKey() != nil:
			gk := a.GetGenericKey()
			key := cmp.Or(gk.GetDescriptorKey(), "generic_key") // Envoy's default key
			out = append(out, Entry{descriptors.Entry{Key: key, Value: gk.GetDescriptorValue()}, ""})
		case a.GetHeaderValueMatch() != nil:
			hv := a.GetHeaderValueMatch()
			m, err := HeadersMatch(hv.GetHeaders(), req)
			if err != nil {
				return nil, false, fmt.Errorf("actions[%d]: %w", i, err)
			}
			expect := hv.GetExpectMatch() == nil || hv.GetExpectMatch().GetValue()
			if m != expect {
				if hv.GetDefaultValue() != "" {
					return nil, false, fmt.Errorf("actions[%d]: header_value_match default_value is not simulated", i)
				}
				return nil, false, nil
			}
			key := cmp.Or(hv.GetDescriptorKey(), "header_match") // Envoy's default key
			out = append(out, Entry{descriptors.Entry{Key: key, Value: hv.GetDescriptorValue()}, ""})
		case a.GetMetadata() != nil:
			e, ok, err := metadataEntry(a.GetMetadata(), req)
			switch {
			case err != nil:
				return nil, false, fmt.Errorf("actions[%d]: %w", i, err)
			case !ok && a.GetMetadata().GetSkipIfAbsent():
				continue
			case !ok:
				return nil, false, nil
			}
			out = append(out, e)
		default:
			return nil, false, fmt.Errorf("actions[%d]: action %T is not simulated; teach envoysim.Entries about it", i, a.GetActionSpecifier())
		}
	}
	return out, true, nil
}

// HeadersMatch reports whether every matcher in hms matches req, as Envoy's
// HeaderMatcher does: present_match, or string_match with exact, prefix,
// suffix, contains or safe_regex (RE2, matching the whole value), each
// honouring invert_match, and ignore_case for all but safe_regex, on which
// Envoy ignores it. It returns an error for any other matcher and for a
// safe_regex that does not compile.
func HeadersMatch(hms []*routev3.HeaderMatcher, req Request) (bool, error) {
	for _, hm := range hms {
		v, present := req.Header(hm.GetName())
		var m bool
		switch spec := hm.GetHeaderMatchSpecifier().(type) {
		case *routev3.HeaderMatcher_PresentMatch:
			m = present == spec.PresentMatch
		case *routev3.HeaderMatcher_StringMatch:
			var err error
			if m, err = stringMatch(spec.StringMatch, v); err != nil {
				return false, fmt.Errorf("header %s: %w", hm.GetName(), err)
			}
			m = present && m
		default:
			return false, fmt.Errorf("header %s: matcher %T is not simulated", hm.GetName(), spec)
		}
		if hm.GetInvertMatch() {
			m = !m
		}
		if !m {
			return false, nil
		}
	}
	return true, nil
}

// stringMatch reports whether v matches sm.
func stringMatch(sm *matcherv3.StringMatcher, v string) (bool, error) {
	fold := func(x string) string {
		if sm.GetIgnoreCase() {
			return strings.ToLower(x)
		}
		return x
	}
	switch p := sm.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return fold(v) == fold(p.Exact), nil
	case *matcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(fold(v), fold(p.Prefix)), nil
	case *matcherv3.StringMatcher_Suffix:
		return strings.HasSuffix(fold(v), fold(p.Suffix)), nil
	case *matcherv3.StringMatcher_Contains:
		return strings.Contains(fold(v), fold(p.Contains)), nil
	case *matcherv3.StringMatcher_SafeRegex:
		// Envoy's safe_regex is RE2 and must match the whole value; Go's
		// regexp is RE2 too. StringMatcher.ignore_case has no effect on it.
		re, err := regexp.Compile(`^(?:` + p.SafeRegex.GetRegex() + `)$`)
		if err != nil {
			return false, err
		}
		return re.MatchString(v), nil
	default:
		return false, fmt.Errorf("string matcher %T is not simulated", p)
	}
}

// metadataEntry is the entry of a metadata action for req: the string at
// its key in req.DynamicMetadata, else its default_value, and false when
// neither is there (Envoy then adds nothing; an empty string counts as
// absent, as in Envoy).
func metadataEntry(md *routev3.RateLimit_Action_MetaData, req Request) (Entry, bool, error) {
	if md.GetSource() != routev3.RateLimit_Action_MetaData_DYNAMIC {
		return Entry{}, false, fmt.Errorf("metadata from %v is not simulated", md.GetSource())
	}
	ns, path := md.GetMetadataKey().GetKey(), md.GetMetadataKey().GetPath()
	if len(path) != 1 || path[0].GetKey() == "" {
		return Entry{}, false, fmt.Errorf("metadata %s: a path of %d keys is not simulated (want one)", ns, len(path))
	}
	key := path[0].GetKey()
	if v := req.DynamicMetadata[ns][key]; v != "" {
		return Entry{descriptors.Entry{Key: md.GetDescriptorKey(), Value: v}, "metadata " + ns + ":" + key}, true, nil
	}
	if d := md.GetDefaultValue(); d != "" {
		return Entry{descriptors.Entry{Key: md.GetDescriptorKey(), Value: d}, ""}, true, nil
	}
	return Entry{}, false, nil
}
