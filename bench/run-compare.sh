#!/usr/bin/env bash
# Compares the in-memory and the Redis store in one session (same machine
# load), then measures Redis calls per decision under an abusive client with
# and without the over-limit cache. Appends one JSON line per run to $1
# (default bench/out/compare.jsonl). Needs redis-server, jq.
#
# Environment: RUNS (3), DURATION (8s), CONCURRENCY (64), STORES ("memory
# redis"; empty runs only the abusive-client part).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/out/compare.jsonl}
mkdir -p "$(dirname "$out")"
RUNS=${RUNS:-3} DURATION=${DURATION:-8s} C=${CONCURRENCY:-64}
tmp=$(mktemp -d)
go build -o "$tmp/sluice" ./cmd/server
go build -o "$tmp/loadgen" ./cmd/loadgen
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --pidfile "$tmp/redis.pid" >/dev/null
trap 'kill $(cat "$tmp/redis.pid") 2>/dev/null; rm -rf "$tmp"' EXIT
sleep 0.5

start_server() { # args: extra flags
	"$tmp/sluice" --config bench/loadtest.yaml --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 --debug-addr 127.0.0.1:0 \
		--log-format json --store-timeout 100ms "$@" 2>"$tmp/server.log" &
	server_pid=$!
	for _ in $(seq 100); do
		addr=$(jq -r 'select(.msg=="listening") | .grpc_addr' "$tmp/server.log" 2>/dev/null || true)
		http=$(jq -r 'select(.msg=="listening") | .http_addr' "$tmp/server.log" 2>/dev/null || true)
		[ -n "$addr" ] && return 0
		sleep 0.1
	done
	echo "server did not start:" >&2; cat "$tmp/server.log" >&2; exit 1
}
metric() { curl -s "http://$http/metrics" | awk -v m="$1" '$1==m {s+=$2} END {print s+0}'; }

for store in ${STORES:-memory redis}; do
for d in 1 3; do
for run in $(seq "$RUNS"); do
	extra=(); [ "$store" = redis ] && extra=(--redis-url "redis://127.0.0.1:$port/0" --redis-prefix "b$run$d:")
	start_server "${extra[@]}"
	"$tmp/loadgen" -target "$addr" -json -concurrency "$C" -descriptors "$d" -keys 100000 \
		-duration "$DURATION" -warmup 1s -seed "$run" |
		jq -c --arg store "$store" --arg run "$run" '. + {store: $store, run: ($run|tonumber)}' >>"$out"
	kill -INT "$server_pid"; wait "$server_pid" || true
	jq -r '"\(.store) c=\(.concurrency) d=\(.descriptors) run=\(.run): \(.decisions_per_s|floor)/s p50 \(.latency_us.p50|floor)µs p99 \(.latency_us.p99|floor)µs err \(.error_total)"' <<<"$(tail -1 "$out")"
done; done; done

# An abusive client: every request repeats a denied one (hot keys only).
for cache in true false; do
	start_server --redis-url "redis://127.0.0.1:$port/0" --redis-prefix "abuse$cache:" --over-limit-cache="$cache"
	"$tmp/loadgen" -target "$addr" -json -concurrency 16 -descriptors 1 -over-share 1 -hot-keys 4 \
		-duration "$DURATION" -seed 1 >"$tmp/abuse.json"
	# The cache sits in front of Redis: calls it answered never reach Redis.
	calls=$(( $(metric 'sluice_store_calls_total{result="ok"}') - $(metric sluice_over_limit_cache_hits_total) ))
	decisions=$(metric 'sluice_request_duration_seconds_count{code="OK"}')
	jq -c --arg cache "$cache" --argjson calls "$calls" --argjson decisions "$decisions" \
		'. + {store: "redis", abusive: true, over_limit_cache: ($cache == "true"), redis_calls: $calls, server_decisions: $decisions, redis_calls_per_decision: ($calls / $decisions)}' \
		"$tmp/abuse.json" >>"$out"
	kill -INT "$server_pid"; wait "$server_pid" || true
	jq -r '"abusive cache=\(.over_limit_cache): \(.decisions_per_s|floor)/s p99 \(.latency_us.p99|floor)µs, \(.redis_calls_per_decision) Redis calls per decision"' <<<"$(tail -1 "$out")"
done
