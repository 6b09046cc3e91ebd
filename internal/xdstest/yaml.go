package xdstest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"gopkg.in/yaml.v3"
)

// The YAML of a RateLimitConfig as Envoy Gateway's translator tests write
// it (envoyproxy/ratelimit's YAML shapes, with name): every field a
// generated config holds, null and empty ones included.
type yamlConfig struct {
	Name        string           `yaml:"name"`
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
}

type yamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *yamlRateLimit   `yaml:"rate_limit"`
	Descriptors    []yamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	QuotaMode      bool             `yaml:"quota_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
}

type yamlRateLimit struct {
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unit            string `yaml:"unit"`
	Unlimited       bool   `yaml:"unlimited"`
	Name            string `yaml:"name"`
	Replaces        []struct {
		Name string `yaml:"name"`
	} `yaml:"replaces"`
}

// ReadYAML reads the RateLimitConfig resources of one file of Envoy
// Gateway's translator output: one per YAML document. It refuses an
// unknown key, a unit the proto has no value for, and a flag the proto
// cannot carry (quota_mode, value_to_metric, share_threshold) set true.
func ReadYAML(path string) ([]*rlsconfv3.RateLimitConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var out []*rlsconfv3.RateLimitConfig
	for i := 0; ; i++ {
		var y yamlConfig
		if err := dec.Decode(&y); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		ds, err := protoDescriptors(y.Descriptors, "descriptors")
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		out = append(out, &rlsconfv3.RateLimitConfig{Name: y.Name, Domain: y.Domain, Descriptors: ds})
	}
	return out, nil
}

func protoDescriptors(ys []yamlDescriptor, path string) ([]*rlsconfv3.RateLimitDescriptor, error) {
	var out []*rlsconfv3.RateLimitDescriptor
	for i, y := range ys {
		at := fmt.Sprintf("%s[%d]", path, i)
		if y.QuotaMode || y.ValueToMetric || y.ShareThreshold {
			return nil, fmt.Errorf("%s: quota_mode, value_to_metric or share_threshold set: the RateLimitConfig proto has no such field", at)
		}
		d := &rlsconfv3.RateLimitDescriptor{Key: y.Key, Value: y.Value, ShadowMode: y.ShadowMode, DetailedMetric: y.DetailedMetric}
		if rl := y.RateLimit; rl != nil {
			unit, ok := rlsconfv3.RateLimitUnit_value[strings.ToUpper(rl.Unit)]
			if !ok && rl.Unit != "" {
				return nil, fmt.Errorf("%s.rate_limit.unit: %q is no RateLimitUnit", at, rl.Unit)
			}
			d.RateLimit = &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit(unit), RequestsPerUnit: rl.RequestsPerUnit,
				Unlimited: rl.Unlimited, Name: rl.Name}
			for _, r := range rl.Replaces {
				d.RateLimit.Replaces = append(d.RateLimit.Replaces, &rlsconfv3.RateLimitReplace{Name: r.Name})
			}
		}
		var err error
		if d.Descriptors, err = protoDescriptors(y.Descriptors, at+".descriptors"); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}
