package xdsconfig

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// TypeURL is the type of the resources the Client subscribes to: a
// RateLimitConfig of go-control-plane's ratelimit module, as Envoy Gateway
// serves them and envoyproxy/ratelimit reads them.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// SourcePrefix starts the descriptors.Document.File of every resource:
// "xds:" and the resource name.
const SourcePrefix = "xds:"

// Document converts one RateLimitConfig into the tree descriptors.Build
// checks, without checking anything itself. File is "xds:" and rc's name;
// no field has a position. Every field the proto has is given (Set), but
// for two that proto3 cannot tell from absent: a unit of UNKNOWN (0) is
// left absent, so Build reports "missing unit", and requests_per_unit is
// given when it is not 0 or the limit is not unlimited (0 is a valid limit
// that admits nothing; an unlimited limit has none). A nil entry of a
// descriptor or replaces list stays nil, which Build reports as a value
// its source could not decode. The proto has no metadata, quota_mode,
// value_to_metric or share_threshold: they stay absent (false), and a
// resource of a newer proto that carries them (or any field this one does
// not know) builds with a warning naming it (Build). A nil rc
// gives a nil Document, which Build skips.
func Document(rc *rlsconfv3.RateLimitConfig) *descriptors.Document {
	if rc == nil {
		return nil
	}
	return &descriptors.Document{
		File:        SourcePrefix + rc.GetName(),
		Domain:      descriptors.Set(rc.GetDomain()),
		Descriptors: nodes(rc.GetDescriptors()),
	}
}

// nodes converts a list of descriptors.
func nodes(ds []*rlsconfv3.RateLimitDescriptor) []*descriptors.Node {
	if len(ds) == 0 {
		return nil
	}
	out := make([]*descriptors.Node, len(ds))
	for i, d := range ds {
		if d == nil {
			continue
		}
		out[i] = &descriptors.Node{
			Key:            descriptors.Set(d.GetKey()),
			Value:          descriptors.Set(d.GetValue()),
			RateLimit:      rateLimit(d.GetRateLimit()),
			Descriptors:    nodes(d.GetDescriptors()),
			ShadowMode:     descriptors.Set(d.GetShadowMode()),
			DetailedMetric: descriptors.Set(d.GetDetailedMetric()),
		}
	}
	return out
}

// rateLimit converts a RateLimitPolicy; nil stays nil (no limit).
func rateLimit(p *rlsconfv3.RateLimitPolicy) *descriptors.RateLimitNode {
	if p == nil {
		return nil
	}
	rl := &descriptors.RateLimitNode{
		Name:      descriptors.Set(p.GetName()),
		Unlimited: descriptors.Set(p.GetUnlimited()),
	}
	if p.GetUnit() != rlsconfv3.RateLimitUnit_UNKNOWN {
		// String gives the enum's name ("SECOND"), or the number of a value
		// this proto does not know, which Build reports as an unknown unit.
		rl.Unit = descriptors.Set(p.GetUnit().String())
	}
	if p.GetRequestsPerUnit() != 0 || !p.GetUnlimited() {
		rl.RequestsPerUnit = descriptors.Set(p.GetRequestsPerUnit())
	}
	if rs := p.GetReplaces(); len(rs) > 0 {
		list := make([]*descriptors.ReplaceNode, len(rs))
		for i, r := range rs {
			if r != nil {
				list[i] = &descriptors.ReplaceNode{Name: descriptors.Set(r.GetName())}
			}
		}
		rl.Replaces = descriptors.Set(list)
	}
	return rl
}

// Decode unpacks the resources of one xDS response into Documents, one per
// resource, in order. A resource that is not a RateLimitConfig, or that
// does not unmarshal, or whose name an earlier resource has, gives an
// *descriptors.Error on "xds:<name>" (or "xds:resources[i]" when the name
// is unknown) instead of a Document. A nameless resource is named
// "resources[i]" in errors. Decode checks nothing else: Build does.
func Decode(resources []*anypb.Any) ([]*descriptors.Document, []error) {
	docs, errs, _ := decode(resources)
	return docs, errs
}

// decode is Decode, and also returns a warning for every field of a
// resource that this build's proto does not know (unknownFields).
func decode(resources []*anypb.Any) (docs []*descriptors.Document, errs, warns []error) {
	seen := make(map[string]int)
	for i, res := range resources {
		at := fmt.Sprintf("%sresources[%d]", SourcePrefix, i)
		if res.GetTypeUrl() != TypeURL {
			errs = append(errs, &descriptors.Error{File: at, Path: "type_url",
				Msg: fmt.Sprintf("want %s, got %q", TypeURL, res.GetTypeUrl())})
			continue
		}
		rc := new(rlsconfv3.RateLimitConfig)
		if err := proto.Unmarshal(res.GetValue(), rc); err != nil {
			errs = append(errs, &descriptors.Error{File: at, Path: "value", Msg: fmt.Sprintf("not a RateLimitConfig: %v", err)})
			continue
		}
		doc := Document(rc)
		if rc.GetName() == "" {
			doc.File = at
		} else if first, dup := seen[rc.GetName()]; dup {
			errs = append(errs, &descriptors.Error{File: doc.File, Path: "name",
				Msg: fmt.Sprintf("resource name %q is also the name of resources[%d] (each resource needs its own name)", rc.GetName(), first)})
			continue
		}
		seen[rc.GetName()] = i
		docs = append(docs, doc)
		warns = append(warns, unknownFields(doc.File, "", rc.ProtoReflect())...)
	}
	return docs, errs, warns
}

// unknownFields warns of every field of m and the messages in it that this
// build's RateLimitConfig proto does not know (a newer control plane's, such
// as quota_mode, value_to_metric or share_threshold, which the proto of
// go-control-plane's ratelimit module Sluice is built with lacks): protobuf
// keeps them aside, so without a word they would change nothing.
func unknownFields(file, path string, m protoreflect.Message) []error {
	var warns []error
	if raw := m.GetUnknown(); len(raw) > 0 {
		var nums []string
		for len(raw) > 0 {
			num, _, n := protowire.ConsumeField(raw)
			if n < 0 {
				break
			}
			nums = append(nums, strconv.Itoa(int(num)))
			raw = raw[n:]
		}
		warns = append(warns, &descriptors.Error{File: file, Path: strings.TrimPrefix(path, "."),
			Msg: fmt.Sprintf("field number %s of %s is unknown to this build's proto and ignored; set what it asks for in a file config",
				strings.Join(nums, ", "), m.Descriptor().FullName())})
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind {
			return true
		}
		at := path + "." + string(fd.Name())
		if fd.IsList() {
			for i := range v.List().Len() {
				warns = append(warns, unknownFields(file, fmt.Sprintf("%s[%d]", at, i), v.List().Get(i).Message())...)
			}
		} else if !fd.IsMap() {
			warns = append(warns, unknownFields(file, at, v.Message())...)
		}
		return true
	})
	return warns
}

// Build decodes resources and builds them into one Config with
// descriptors.Build. It returns the Config, or nil and every problem
// joined with errors.Join: each an *descriptors.Error reading
// "xds:<resource name>: <field path>: <message>". The same domain in two
// resources is an error. No resources at all give an empty Config (every
// domain unknown). Fields the proto does not know are kept aside by
// protobuf and change nothing: each is a Config.Warnings entry naming the
// resource, the path and the field number. Build is pure and safe for
// concurrent use.
func Build(resources []*anypb.Any) (*descriptors.Config, error) {
	docs, errs, warns := decode(resources)
	cfg, err := descriptors.Build(docs...)
	if err == nil && len(errs) == 0 {
		cfg.Warnings = append(cfg.Warnings, warns...)
		return cfg, nil
	}
	if err != nil {
		errs = append(errs, unjoin(err)...)
	}
	return nil, errors.Join(errs...)
}

// unjoin splits an errors.Join into its errors.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
