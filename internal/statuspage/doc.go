// Package statuspage is Sluice's live status page, /ui: what is being
// limited right now, for whom, and whether the limiter is healthy.
//
// It owns three things:
//
//   - Recorder, a ratelimit.Observer told of every counted descriptor: per
//     domain and rule it keeps per-second counts (decisions, hits, over
//     limit, near limit, shadow over limit) for the last two minutes and
//     the descriptor values with the most hits right now, in a space-saving
//     top-k summary (Metwally et al., 2005) of fixed size, so its memory is
//     bounded whatever the number of distinct values (long values are
//     shortened and hashed; rules or domains marked sensitive keep none);
//   - the store's health: Recorder is also a ratelimit.StoreObserver, told
//     of every store call with the decision's own timing of it, whose
//     latencies and errors it counts;
//   - Handler: the page itself (HTML, CSS and JS embedded with go:embed, no
//     external fetch, works offline) and the JSON it polls, /ui/api.
//
// It imports pkg/ratelimit, pkg/descriptors and pkg/limiter, and nothing of
// Envoy or gRPC; internal/app wires it into the HTTP listener.
package statuspage
