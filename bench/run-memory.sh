#!/usr/bin/env bash
# Runs cmd/loadgen against cmd/server on the in-memory store over the matrix
# of bench/RESULTS-memory.md and appends one JSON report per run to $1
# (default bench/out/memory.jsonl). Each run gets a fresh server on
# 127.0.0.1 ports chosen at run time (read from its "listening" log line),
# so no run inherits another's counters.
#
# Environment: RUNS (default 3), DURATION (10s), WARMUP (1s),
# CONCURRENCY ("1 16 64"), DESCRIPTORS ("1 3"), KEYS ("100 1000000"),
# MIXES ("0 0.5", the -over-share values), CPUPROFILE (a path: record the
# server with perf during the last run of the matrix, if perf exists).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/out/memory.jsonl}
mkdir -p "$(dirname "$out")"
RUNS=${RUNS:-3} DURATION=${DURATION:-10s} WARMUP=${WARMUP:-1s}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/sluice" ./cmd/server
go build -o "$bin/loadgen" ./cmd/loadgen

start_server() {
	"$bin/sluice" --config bench/loadtest.yaml --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 --debug-addr 127.0.0.1:0 \
		--log-format json --log-level info 2>"$bin/server.log" &
	server_pid=$!
	for _ in $(seq 100); do
		addr=$(jq -r 'select(.msg=="listening") | .grpc_addr' "$bin/server.log" 2>/dev/null || true)
		[ -n "$addr" ] && return 0
		sleep 0.1
	done
	echo "server did not start:" >&2; cat "$bin/server.log" >&2; exit 1
}

for c in ${CONCURRENCY:-1 16 64}; do
for d in ${DESCRIPTORS:-1 3}; do
for k in ${KEYS:-100 1000000}; do
for mix in ${MIXES:-0 0.5}; do
for run in $(seq "$RUNS"); do
	start_server
	load=$(cut -d' ' -f1 /proc/loadavg)
	"$bin/loadgen" -target "$addr" -json -concurrency "$c" -connections 1 -descriptors "$d" \
		-keys "$k" -over-share "$mix" -duration "$DURATION" -warmup "$WARMUP" -seed "$run" |
		jq -c --arg run "$run" --arg load "$load" '. + {run: ($run|tonumber), loadavg_before: ($load|tonumber)}' >>"$out"
	kill -INT "$server_pid"; wait "$server_pid" || true
	jq -r '"c=\(.concurrency) d=\(.descriptors) keys=\(.keys) over=\(.over_share) run=\(.run): \(.decisions_per_s|floor)/s p99 \(.latency_us.p99|floor)µs err \(.error_total)"' <<<"$(tail -1 "$out")"
done; done; done; done; done
