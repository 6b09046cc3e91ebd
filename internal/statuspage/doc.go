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
//   - a limiter.Store decorator (Recorder.WrapStore) that times every store
//     call and counts its errors;
//   - Handler: the page itself (HTML, CSS and JS embedded with go:embed, no
//     external fetch, works offline) and the JSON it polls, /ui/api.
//
// It imports pkg/ratelimit, pkg/descriptors and pkg/limiter, and nothing of
// Envoy or gRPC; internal/app wires it into the HTTP listener.
package statuspage
