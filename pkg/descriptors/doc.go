// Package descriptors loads, validates and matches rate-limit descriptor
// configs in the YAML format of envoyproxy/ratelimit, field for field, so an
// existing config loads unchanged.
//
// It owns the config format and its validation (Load, Parse, Error), the
// immutable descriptor tree (Config, Domain, Rule, Limit, Unit) and the
// matching of a request descriptor's entries to a rule (Config.Match),
// following envoyproxy/ratelimit: exact value, then the first matching
// wildcard in config order, then the key-only rule, and the request must be
// exactly as deep as the rule.
//
// It does not count, decide or talk to Envoy or Redis: what a matched rule
// means for a request (replaces, shadow_mode, quota_mode, share_threshold
// counters) is pkg/rls's and pkg/limiter's business. It does no I/O beyond
// reading the files it is given, logs nothing and keeps no global state;
// watching files and swapping configs on reload belong to the caller, which
// keeps the last good Config when a reload fails.
//
// Place in the import chain: pkg/rls and cmd/server import it; it imports no
// other Sluice package (only the standard library and gopkg.in/yaml.v3).
//
// Format choices beyond envoyproxy/ratelimit:
//   - One file is one domain, and a file holds one YAML document: a second,
//     non-empty document is an error (envoyproxy/ratelimit silently reads only
//     the first). The same domain in two files is an error; domains are not
//     merged.
//   - Validation is strict: unknown keys, duplicate keys and duplicate
//     key/value siblings are errors, as are a missing unit or
//     requests_per_unit on a limit that is not unlimited (envoyproxy/ratelimit
//     would read a missing requests_per_unit as 0 and block every hit).
//     Problems envoyproxy/ratelimit accepts and that are merely suspicious are
//     Config.Warnings.
//   - Sluice additions: rate_limit.unit_multiplier (an integer >= 1, default
//     1), rate_limit.algorithm (only "sliding_window" for now) and a
//     top-level failure_mode (allow or deny).
//   - Scalars are read as envoyproxy/ratelimit's YAML 1.1 decoder reads them:
//     `value: 200` is the string "200", bools also accept yes/no/on/off, and
//     anchors, aliases and merge keys (<<) work.
package descriptors
