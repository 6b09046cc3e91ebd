package envoysim

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// validator is what protoc-gen-validate generates on every Envoy message.
type validator interface{ ValidateAll() error }

// ValidateDeep runs ValidateAll on m and on the message inside every
// anypb.Any under it, recursively: ValidateAll checks an Any's type URL
// only, never what it holds, while Envoy validates a typed_config when it
// loads it. Each error is prefixed with path, extended by the field names,
// list indexes, map keys and, for an Any, the name of the message it holds,
// e.g. "bootstrap.static_resources.listeners[0]...typed_config(RateLimit)".
// It returns an error for m or an unpacked message that has no ValidateAll,
// and for an Any whose type is not linked into the binary.
func ValidateDeep(m proto.Message, path string) []error {
	var errs []error
	v, ok := m.(validator)
	if !ok {
		return []error{fmt.Errorf("%s: %s has no ValidateAll", path, m.ProtoReflect().Descriptor().FullName())}
	}
	if err := v.ValidateAll(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", path, err))
	}
	return append(errs, validateAnys(m.ProtoReflect(), path)...)
}

// ValidateAnys is ValidateDeep without ValidateAll on m itself: it
// validates only the messages held by the Anys under m. It suits a
// fragment, such as an Istio MERGE patch value, that lacks fields the whole
// message requires. If m is itself an Any, what it holds is validated.
func ValidateAnys(m proto.Message, path string) []error {
	return validateAnys(m.ProtoReflect(), path)
}

// validateAnys finds every Any under m and validates what it holds.
func validateAnys(m protoreflect.Message, path string) []error {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return []error{fmt.Errorf("%s: unpack %s: %w", path, a.GetTypeUrl(), err)}
		}
		return ValidateDeep(inner, fmt.Sprintf("%s(%s)", path, inner.ProtoReflect().Descriptor().Name()))
	}
	var errs []error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := range l.Len() {
				errs = append(errs, validateAnys(l.Get(i).Message(), fmt.Sprintf("%s[%d]", p, i))...)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				errs = append(errs, validateAnys(mv.Message(), fmt.Sprintf("%s[%v]", p, k.Interface()))...)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			errs = append(errs, validateAnys(v.Message(), p)...)
		}
		return true
	})
	return errs
}
