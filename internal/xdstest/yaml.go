package xdstest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// ReadYAML reads the RateLimitConfig resources of one file of Envoy
// Gateway's translator output: one per YAML document, in the proto's own
// JSON mapping (protojson), so that it reads every field the proto has.
// Envoy Gateway writes every field of a newer proto, zero ones included:
// a key of the descriptor format that this proto has no field for
// (descriptors.Schema: quota_mode, value_to_metric, share_threshold) is
// dropped when it holds its zero value and refused when it is set. Any
// other unknown key, and a unit the proto has no value for, are refused;
// a unit is read in any case ("minute").
func ReadYAML(path string) ([]*rlsconfv3.RateLimitConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []*rlsconfv3.RateLimitConfig
	for i := 0; ; i++ {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		rc := new(rlsconfv3.RateLimitConfig)
		if err := fit(doc, rc.ProtoReflect().Descriptor(), ""); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		js, err := json.Marshal(doc)
		if err == nil {
			err = protojson.Unmarshal(js, rc)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		out = append(out, rc)
	}
	return out, nil
}

// fit makes m, a mapping that holds the message md, fit the proto: it
// drops the keys of the format that md lacks and that hold their zero
// value (refusing one that is set), upper-cases enum names, and does the
// same in the messages below. protojson refuses what is left that md does
// not know.
func fit(m map[string]any, md protoreflect.MessageDescriptor, path string) error {
	for key, v := range m {
		at := strings.TrimPrefix(path+"."+key, ".")
		f := md.Fields().ByName(protoreflect.Name(key))
		switch {
		case f == nil && formatKey(md, key) && zero(v):
			delete(m, key)
		case f == nil && formatKey(md, key):
			return fmt.Errorf("%s: set to %v, but the RateLimitConfig proto has no such field", at, v)
		case f == nil:
		case f.Kind() == protoreflect.EnumKind:
			if s, ok := v.(string); ok {
				m[key] = strings.ToUpper(s)
			}
		case f.Kind() == protoreflect.MessageKind:
			if err := fitMessages(v, f.Message(), at); err != nil {
				return err
			}
		}
	}
	return nil
}

// fitMessages fits v, a mapping or a list of them that hold md.
func fitMessages(v any, md protoreflect.MessageDescriptor, path string) error {
	switch v := v.(type) {
	case map[string]any:
		return fit(v, md, path)
	case []any:
		for i, item := range v {
			if m, ok := item.(map[string]any); ok {
				if err := fit(m, md, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// formatKey reports whether key is a key of the format in the mapping that
// md is (descriptors.Schema).
func formatKey(md protoreflect.MessageDescriptor, key string) bool {
	for _, k := range descriptors.Schema() {
		if k.Name == key && k.Level.XDSMessage() == string(md.Name()) {
			return true
		}
	}
	return false
}

// zero reports whether a decoded YAML value is its type's zero: null,
// false, 0, "" or empty.
func zero(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case bool:
		return !v
	case int:
		return v == 0
	case float64:
		return v == 0
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	}
	return false
}
