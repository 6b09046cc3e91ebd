package app

// The JSON of /config's rules as a client reads them: the tests decode
// /config into these, so that what it shows is checked from outside.

// configView is a domain as /config shows it: its descriptor tree with
// its names, limits and algorithms, as loaded.
type configView struct {
	Domain      string     `json:"domain"`
	File        string     `json:"file"`
	FailureMode string     `json:"failure_mode,omitempty"`
	Descriptors []ruleView `json:"descriptors"`
}

type ruleView struct {
	Key            string         `json:"key"`
	Value          string         `json:"value,omitempty"`
	Rule           string         `json:"rule"` // the name metrics and the status page use
	Limit          *limitView     `json:"rate_limit,omitempty"`
	Limits         []*limitView   `json:"rate_limits,omitempty"` // a rule with several limits: all of them
	Unlimited      bool           `json:"unlimited,omitempty"`
	ShadowMode     bool           `json:"shadow_mode,omitempty"`
	QuotaMode      bool           `json:"quota_mode,omitempty"`
	DetailedMetric bool           `json:"detailed_metric,omitempty"`
	ValueToMetric  bool           `json:"value_to_metric,omitempty"`
	ShareThreshold bool           `json:"share_threshold,omitempty"`
	Metadata       map[string]any `json:"metadata,omitempty"`
	Line           int            `json:"line"`
	Classes        *classesView   `json:"classes,omitempty"` // a pool's classes
	Descriptors    []ruleView     `json:"descriptors,omitempty"`
}

// classesView is a pool's classes as the config gives them, with each
// ceiling in force and what it admits in requests.
type classesView struct {
	Key      string        `json:"key"`
	Ceilings []ceilingView `json:"ceilings"`
	Lowest   string        `json:"lowest"` // the class of a missing or unknown value
}

type ceilingView struct {
	Value    string `json:"value"`
	Ceiling  string `json:"ceiling"`
	Requests uint32 `json:"requests"` // floor(requests_per_unit x ceiling)
}

type limitView struct {
	Name            string   `json:"name,omitempty"`
	RequestsPerUnit uint32   `json:"requests_per_unit"`
	Unit            string   `json:"unit"`
	UnitMultiplier  uint32   `json:"unit_multiplier,omitempty"`
	Window          string   `json:"window"`
	Algorithm       string   `json:"algorithm"`
	Burst           uint32   `json:"burst,omitempty"`
	SubWindows      uint8    `json:"sub_windows,omitempty"`
	Overdraw        *bool    `json:"overdraw,omitempty"`
	Replaces        []string `json:"replaces,omitempty"`
}
