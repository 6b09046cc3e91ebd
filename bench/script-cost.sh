#!/usr/bin/env bash
# script-cost.sh: Redis's instructions per decision inside the script, in
# the load test's steady state (pkg/redis BenchmarkScriptSteady: batches of
# 12 single-hit requests of the default sliding window, every counter hit
# every 625 ms), counted by valgrind's callgrind on a redis-server of its
# own: a figure that the machine's noise (other processes, CPU frequency)
# does not move, for comparing two versions of the script.
#
# It warms KEYS (2000) counters up with WARM (20000) calls, uncounted, then
# counts CALLS (400) calls of BATCH (12) decisions. Environment: KEYS, WARM,
# CALLS, BATCH, HITS (descriptors per request: 1), ALG (sliding_window;
# the others run a minute's limit too, never reached: 2^40 a minute, 1000
# for the logs; a token bucket that far from its limit is full again within
# a millisecond, so its key is gone at the next decision, as under the load
# test's rules; concurrency acquires under a slot token and releases the
# counter's last slot in the same call, so a decision is both), CEILING
# (every request a pool's class of this ceiling, in permille: 800 for 80%;
# unset for a plain limit), CLOCK (the Unix ms the benchmark's clock
# starts at: the same CLOCK gives two versions of the script the same
# sub-window boundaries, which otherwise follow the wall clock at the start
# and move the figure by a few percent from run to run; unset: now),
# REDIS_SERVER
# (redis-server; a build with symbols names the functions: KEEP=1 keeps
# the callgrind output for callgrind_annotate).
# Needs go, redis-server, valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
KEYS=${KEYS:-2000} WARM=${WARM:-20000} CALLS=${CALLS:-400} BATCH=${BATCH:-12} HITS=${HITS:-1}
. bench/lib.sh
tmp=$(mktemp -d)
port=$(freeport)
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$tmp/cg.out" \
	"${REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
vg=$!
trap 'kill $vg 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
go test -c -o "$tmp/redis.test" ./pkg/redis
[ -z "${CLOCK:-}" ] || redis-cli -p "$port" set steady:bench-clock "$CLOCK" >/dev/null
bench() { # iterations
	RLS_TEST_REDIS_ADDR="127.0.0.1:$port" SLUICE_BENCH_PREFIX=steady: SLUICE_BENCH_KEYS=$KEYS SLUICE_BENCH_BATCH=$BATCH SLUICE_BENCH_HITS=$HITS SLUICE_BENCH_ALG=${ALG:-} SLUICE_BENCH_CEILING=${CEILING:-} \
		"$tmp/redis.test" -test.run '^$' -test.bench '^BenchmarkScriptSteady$' -test.benchtime "$1x" >"$tmp/bench.out" 2>&1 ||
		{ cat "$tmp/bench.out" >&2; exit 1; }
}
bench "$WARM"
callgrind_control -i on "$vg" >/dev/null
bench "$CALLS"
callgrind_control -d "$vg" >/dev/null
callgrind_control -i off "$vg" >/dev/null
ir=$(cat "$tmp"/cg.out* | awk '/^summary:/ {s += $2} END {printf "%.0f\n", s}')
echo "$((ir / (CALLS * BATCH))) instructions per decision ($CALLS calls of $BATCH requests of $HITS descriptors, $KEYS counters)"
