package xdsconfig_test

import (
	"slices"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/xdsconfig"
)

// protoMessages are the messages of the RateLimitConfig proto that each
// mapping of the format is.
var protoMessages = map[descriptors.Level]protoreflect.MessageDescriptor{
	descriptors.LevelDomain:     (&rlsconfv3.RateLimitConfig{}).ProtoReflect().Descriptor(),
	descriptors.LevelDescriptor: (&rlsconfv3.RateLimitDescriptor{}).ProtoReflect().Descriptor(),
	descriptors.LevelRateLimit:  (&rlsconfv3.RateLimitPolicy{}).ProtoReflect().Descriptor(),
}

// TestSchemaNamesEveryProtoField: every field of the proto's messages is
// the xDS field of one key of the format (descriptors.Schema), and every
// key's xDS field is one of its message's: a proto that gains a field (a
// newer go-control-plane: quota_mode, say) fails here until the key says
// so and Document converts it.
func TestSchemaNamesEveryProtoField(t *testing.T) {
	claimed := map[protoreflect.FullName]bool{}
	for _, k := range descriptors.Schema() {
		if k.XDS == "" {
			continue
		}
		md := protoMessages[k.Level]
		if md.Name() != protoreflect.Name(k.Level.XDSMessage()) {
			t.Fatalf("%s's message is %s, want %s", k.Level, md.Name(), k.Level.XDSMessage())
		}
		f := md.Fields().ByName(protoreflect.Name(k.XDS))
		if f == nil {
			t.Errorf("%s of a %s: %s has no field %s", k.Name, k.Level, md.Name(), k.XDS)
			continue
		}
		claimed[f.FullName()] = true
	}
	notKeys := map[protoreflect.FullName]bool{
		// The resource's name: a file's name stands for it in errors.
		"ratelimit.config.ratelimit.v3.RateLimitConfig.name": true,
	}
	for _, md := range protoMessages {
		for i := range md.Fields().Len() {
			f := md.Fields().Get(i)
			if !claimed[f.FullName()] && !notKeys[f.FullName()] {
				t.Errorf("the proto's %s is the xDS field of no key of the format", f.FullName())
			}
		}
	}
	// A replaces item holds a name, which the replaces key reads itself.
	rd := (&rlsconfv3.RateLimitReplace{}).ProtoReflect().Descriptor()
	if rd.Fields().Len() != 1 || rd.Fields().Get(0).Name() != "name" {
		t.Errorf("RateLimitReplace has %d fields, want name only", rd.Fields().Len())
	}
}

// TestDocumentGivesEveryXDSKey: a RateLimitConfig with every field set
// converts to a Document that gives every key with an xDS field, at every
// level.
func TestDocumentGivesEveryXDSKey(t *testing.T) {
	rc := &rlsconfv3.RateLimitConfig{}
	populate(rc.ProtoReflect(), 0)
	doc := xdsconfig.Document(rc)
	if len(doc.Descriptors) == 0 || doc.Descriptors[0] == nil || doc.Descriptors[0].RateLimit == nil {
		t.Fatalf("Document of a full RateLimitConfig = %+v", doc)
	}
	given := map[descriptors.Level][]string{
		descriptors.LevelDomain:     doc.Given(),
		descriptors.LevelDescriptor: doc.Descriptors[0].Given(),
		descriptors.LevelRateLimit:  doc.Descriptors[0].RateLimit.Given(),
	}
	for _, k := range descriptors.Schema() {
		if k.XDS != "" && !slices.Contains(given[k.Level], k.Name) {
			t.Errorf("%s of a %s: the proto's %s.%s is not converted (the %s gives %q)", k.Name, k.Level,
				k.Level.XDSMessage(), k.XDS, k.Level, given[k.Level])
		}
	}
}

// populate sets every field of m to a value that is not its zero: lists
// of messages get one item, filled in turn, three lists deep.
func populate(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		switch {
		case f.IsList() && f.Kind() == protoreflect.MessageKind:
			if depth < 3 {
				l := m.Mutable(f).List()
				item := l.NewElement()
				populate(item.Message(), depth+1)
				l.Append(item)
			}
		case f.Kind() == protoreflect.MessageKind:
			populate(m.Mutable(f).Message(), depth+1)
		case f.Kind() == protoreflect.StringKind:
			m.Set(f, protoreflect.ValueOfString("x"))
		case f.Kind() == protoreflect.BoolKind:
			m.Set(f, protoreflect.ValueOfBool(true))
		case f.Kind() == protoreflect.Uint32Kind:
			m.Set(f, protoreflect.ValueOfUint32(1))
		case f.Kind() == protoreflect.EnumKind:
			m.Set(f, protoreflect.ValueOfEnum(1))
		}
	}
}
