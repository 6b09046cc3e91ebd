package envoysim

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	earlyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
)

// EarlyHeaderMutations returns req as an HTTP connection manager's
// early_header_mutation_extensions leave it: applied before route selection
// and before every HTTP filter, so neither a route's match nor a rate limit
// action sees what they remove or overwrite. That is where an edge strips
// the headers a client must not set (a priority class, an internal key).
// It simulates envoy.http.early_header_mutation.header_mutation with remove
// and append mutations of literal values, and returns an error for any
// other extension, a remove_on_match, or a value with a %...% formatter.
// req is not modified.
func EarlyHeaderMutations(exts []*corev3.TypedExtensionConfig, req Request) (Request, error) {
	if len(exts) == 0 {
		return req, nil
	}
	out := req
	out.Headers = maps.Clone(req.Headers)
	if out.Headers == nil {
		out.Headers = map[string]string{}
	}
	for _, ext := range exts {
		hm := &earlyv3.HeaderMutation{}
		if !ext.GetTypedConfig().MessageIs(hm) {
			return req, fmt.Errorf("early header mutation %s: only envoy.http.early_header_mutation.header_mutation is simulated", ext.GetName())
		}
		if err := ext.GetTypedConfig().UnmarshalTo(hm); err != nil {
			return req, fmt.Errorf("early header mutation %s: %w", ext.GetName(), err)
		}
		for i, m := range hm.GetMutations() {
			if err := mutate(out.Headers, m.GetRemove(), m.GetAppend()); err != nil {
				return req, fmt.Errorf("early header mutation %s: mutations[%d]: %w", ext.GetName(), i, err)
			}
		}
	}
	return out, nil
}

// mutate applies one mutation to h (lower-case names): remove names a
// header to delete, else add is a header to add by its append_action.
func mutate(h map[string]string, remove string, add *corev3.HeaderValueOption) error {
	if remove != "" {
		delete(h, strings.ToLower(remove))
		return nil
	}
	if add == nil {
		return errors.New("only remove and append are simulated")
	}
	name, v := strings.ToLower(add.GetHeader().GetKey()), add.GetHeader().GetValue()
	if strings.Contains(v, "%") {
		return fmt.Errorf("header %s: value %q: formatters are not simulated", name, v)
	}
	old, ok := h[name]
	switch add.GetAppendAction() {
	case corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:
		if ok {
			v = old + "," + v
		}
	case corev3.HeaderValueOption_ADD_IF_ABSENT:
		if ok {
			return nil
		}
	case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
		if !ok {
			return nil
		}
	}
	h[name] = v
	return nil
}
