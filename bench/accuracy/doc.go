// Package accuracy measures how far Sluice's sliding window counter
// (limiter.Evaluate: limiter.SlidingWindow) strays from an exact sliding log.
//
// It replays a synthetic, deterministic trace (many sources with their own
// limits; steady Poisson clients, bursty on/off clients, clients with long
// idle gaps, and clockwork clients just over their limit) through two
// limiters per source, with a simulated millisecond clock:
//
//   - the sliding window counter: limiter.Evaluate on one State per
//     source, exactly what the in-memory store and the Redis script decide;
//   - the exact sliding log: a ring of the source's admitted timestamps,
//     admitting a request iff fewer than Limit requests were admitted in
//     (t-Window, t].
//
// Both follow the same rule: a denied request consumes nothing.
//
// Two comparisons are reported. Stateful: each limiter runs on its own
// history, as two real deployments would; once they disagree their
// histories differ, so one early over-admission can make the counter deny a
// request later that the log admits (and the reverse): errors compound and
// partly cancel. Stateless: each request is asked of the counter, and of
// the exact log rule applied to the counter's own admitted history; this
// isolates the error of each single decision (did this admission push the
// true count in the last Window over Limit?), and its over-admission is what
// a client can actually get beyond its limit. The peak ratio is the largest
// exact count of counter-admitted requests in any sliding Window, over
// Limit.
//
// The package imports pkg/limiter only; it is a measurement, not part of the
// service. Run the full report with
//
//	go run ./bench/accuracy/cmd -requests 10000000
package accuracy
