// Package descriptors loads, validates and matches rate-limit descriptor
// configs in the YAML format of envoyproxy/ratelimit, field for field, so an
// existing config loads unchanged.
//
// It owns the config format and its validation (Load, Parse, Build, Error),
// the immutable descriptor tree (Config, Domain, Rule, Limit, Unit) and the
// matching of a request descriptor's entries to a rule (Config.Match),
// following envoyproxy/ratelimit: exact value, then the first matching
// wildcard in config order, then the key-only rule, and the request must be
// exactly as deep as the rule.
//
// Loading is two stages, so that every source shares one set of rules:
//   - decode: a source turns what it holds into Documents, a positioned,
//     source-neutral tree (Document, Node, RateLimitNode, Field). The YAML
//     decoder (Load, Parse) reports only what YAML can get wrong: syntax,
//     unknown and duplicate keys, values of the wrong kind, and files that
//     aliases make too large. An xDS source converts RateLimitConfig protos
//     into the same tree, with File "xds:<resource name>" and no positions.
//   - build: Build checks every rule of the format (domains, keys, units,
//     windows, unlimited, replaces, warnings) and makes the Config. Its
//     errors are positioned by the source's own form: "file:line:col: path:
//     message" for a file, "xds:name: path: message" for a resource.
//
// Every key of the format is declared once, in Schema: the mapping it is
// written in, its YAML key, the field of the RateLimitConfig proto that
// carries it over xDS (or none), its docs line, how the decoder reads it and
// what a reader is shown of it (Domain.Show, Rule.Show, Limit.Show). The
// decoder, the builder's refusal of counting keys beside unlimited, /config
// and the docs read it. Config.Version identifies a Config by every field of
// its model.
//
// Which files of a directory a load reads is one function, Selection.Files
// (Files for the default, *.yaml and *.yml; a Recursive selection of every
// file for envoyproxy/ratelimit's runtime layout). A caller that watches
// the files reads them once with Selection.Read, compares what it read with
// its last read, and builds those bytes (FileSet.Build).
//
// It does not count, decide or talk to Envoy or Redis: what a matched rule
// means for a request (replaces, shadow_mode, quota_mode, share_threshold
// counters) is pkg/rls's and pkg/limiter's business. It does no I/O beyond
// reading the files it is given, logs nothing and keeps no global state;
// watching files and swapping configs on reload belong to the caller, which
// keeps the last good Config when a reload fails.
//
// Place in the import chain: pkg/ratelimit imports it (and through it the
// front ends, pkg/rls and pkg/rlqs), pkg/xdsconfig converts xDS resources
// into its Documents, and internal/source and internal/app load and show
// configs with it; of Sluice it imports only pkg/limiter (for the Algorithm a limit carries), beside the
// standard library and gopkg.in/yaml.v3.
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
//   - Sluice additions, optional keys that an old config never sets:
//     rate_limit.unit_multiplier (an integer >= 1, default 1, for a window
//     of at most MaxWindow, ten years), rate_limit.algorithm (any algorithm
//     of pkg/limiter's table, sliding_window when unset) with its parameters
//     burst, sub_windows and overdraw, rate_limits (several limits on one
//     descriptor), classes (priority classes sharing one pool) and a
//     top-level failure_mode (error, allow, deny or local).
//   - Scalars are read as envoyproxy/ratelimit's YAML 1.1 decoder reads them:
//     `value: 200` is the string "200", bools also accept yes/no/on/off, and
//     anchors, aliases and merge keys (<<) work.
//
// Errors: every problem is an *Error reading "file:line:col: path: message",
// where path follows the YAML ("descriptors[1].rate_limit.unit") and the
// message says what was found and what is allowed. A YAML syntax error has
// no path. For the common mistakes (a mis-indented key or list item, an
// unclosed '{' or '[', a missing comma in one, a tab in the indentation, an
// unquoted value starting with '*', '&', '@' or holding ": ", an unclosed quote, an alias with
// no anchor) it is at the line and column of the mistake and says what is
// wrong; for others it keeps yaml.v3's words and line (which may be the
// start of the block that holds the problem) at column 1. When the repair
// is certain (a value to quote, a '{' or '[' to close at the end of its
// line) the rest of the file is still checked, so its other problems show
// in the same run; after any other syntax error the file reports only
// that one. The other files of a load are always checked and all their
// problems reported. A file that cannot be read has
// no line or column ("file: cannot read: ...").
//
// Bounds, so that no file can stall a reload (aliases can make a small
// file expand exponentially): descriptors nest at most 64 deep, a file
// expands to at most 100,000 mappings, and at most 1,000 errors are
// reported per file by each stage.
package descriptors
