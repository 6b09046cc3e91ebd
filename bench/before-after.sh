#!/usr/bin/env bash
# before-after.sh BEFORE AFTER: two revisions of Sluice on one fresh
# redis-server each run, alternating, same config (bench/loadtest.yaml), same
# load generator (cmd/loadgen of AFTER). For every run and revision: a 2 s
# warmup, then a measured run, and one line of decisions/s, p99, service CPU
# per decision (utime+stime of /proc/<pid>/stat), Redis CPU per decision
# (INFO cpu), of it the time inside script calls, and script calls per
# decision (INFO commandstats: evalsha, eval, fcall).
#
# Environment: RUNS (3), DURATION (6s), CONC (64), DESCS (1), KEYS (10000),
# BEFORE_FLAGS and AFTER_FLAGS (extra flags for each service, e.g. to compare
# two settings of one revision), HOT (1: the hot key instead, as in
# peer-compare.sh: bench/hotkey.yaml, one counter of 100,000 a minute, CONC
# callers on 2 instances sharing one fresh Redis, each run DURATION of a
# minute; one line of decisions/s, admitted, errors, p99 and script calls).
# Examples: bench/before-after.sh efb2e67 HEAD
#           AFTER_FLAGS="--redis-calls-in-flight 2" bench/before-after.sh HEAD HEAD
# Needs go, git, redis-server, redis-cli, jq, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?usage: bench/before-after.sh BEFORE AFTER} after=${2:?usage: bench/before-after.sh BEFORE AFTER}
RUNS=${RUNS:-3} DURATION=${DURATION:-6s} CONC=${CONC:-64} DESCS=${DESCS:-1} KEYS=${KEYS:-10000}
read -r -a before_flags <<<"${BEFORE_FLAGS:-}"
read -r -a after_flags <<<"${AFTER_FLAGS:-}"
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for rev in before after; do git worktree remove --force "$tmp/$rev" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
for rev in before after; do
	git worktree add -q --detach "$tmp/$rev" "${!rev}"
	(cd "$tmp/$rev" && go build -o "$tmp/sluice-$rev" ./cmd/server)
done
(cd "$tmp/after" && go build -o "$tmp/loadgen" ./cmd/loadgen)
# shellcheck source=bench/lib.sh
. bench/lib.sh
hz=$(getconf CLK_TCK)

# measure REV RUN: one fresh Redis and service, a warmup, one measured run.
measure() {
	local rev=$1 run=$2 rport grpc http debug flags=()
	[ "$rev" = before ] && flags=("${before_flags[@]}")
	[ "$rev" = after ] && flags=("${after_flags[@]}")
	rport=$(freeport) grpc=$(freeport) http=$(freeport) debug=$(freeport)
	redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
		--pidfile "$tmp/redis.pid" --logfile "$tmp/redis.log" >/dev/null
	for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
	"$tmp/sluice-$rev" --config bench/loadtest.yaml --grpc-addr "127.0.0.1:$grpc" --http-addr "127.0.0.1:$http" \
		--debug-addr "127.0.0.1:$debug" --log-level warn --ui=false --redis-url "redis://127.0.0.1:$rport/0" \
		"${flags[@]}" >"$tmp/$rev.log" 2>&1 &
	local pid=$!
	pids+=("$pid")
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/healthcheck" >/dev/null 2>&1 && break; sleep 0.1; done
	local lg=(-target "127.0.0.1:$grpc" -concurrency "$CONC" -descriptors "$DESCS" -keys "$KEYS" -seed "$run")
	"$tmp/loadgen" "${lg[@]}" -duration 2s >/dev/null
	redis-cli -p "$rport" config resetstat >/dev/null
	local t0 r0 t1 r1 calls usec
	t0=$(ticks "$pid")
	r0=$(redis_cpu_at "$rport")
	"$tmp/loadgen" "${lg[@]}" -duration "$DURATION" -json >"$tmp/run.json"
	t1=$(ticks "$pid")
	r1=$(redis_cpu_at "$rport")
	calls=$(redis-cli -p "$rport" info commandstats | tr -d '\r' |
		awk -F'[:,=]' '/^cmdstat_(evalsha|eval|fcall):/ {n += $3} END {print n + 0}')
	usec=$(redis-cli -p "$rport" info commandstats | tr -d '\r' |
		awk -F'[:,=]' '/^cmdstat_(evalsha|eval|fcall):/ {n += $5} END {print n + 0}')
	kill -INT "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	redis-cli -p "$rport" shutdown nosave >/dev/null 2>&1 || true
	jq -r --arg rev "$rev" --argjson run "$run" --argjson hz "$hz" --argjson dt "$((t1 - t0))" \
		--argjson r0 "$r0" --argjson r1 "$r1" --argjson calls "$calls" --argjson usec "$usec" '
		"\($rev) run=\($run): \(.decisions_per_s | floor)/s p99 \(.latency_us.p99 | floor)µs" +
		" service \($dt / $hz * 1e6 / .requests * 10 | round / 10)µs" +
		" redis \(($r1 - $r0) * 1e6 / .requests * 10 | round / 10)µs" +
		" (in scripts \($usec / .requests * 10 | round / 10)µs)" +
		" script calls \($calls / .requests * 1000 | round / 1000) per decision"' "$tmp/run.json"
}

echo "before $(git rev-parse --short "$before") ${BEFORE_FLAGS:-}, after $(git rev-parse --short "$after") ${AFTER_FLAGS:-}, c=$CONC, $DESCS descriptor(s), $(nproc) CPUs"
# hot REV RUN: two fresh instances on one fresh Redis, one hot counter.
hot() {
	local rev=$1 run=$2 rport flags=() pids=() addrs=()
	[ "$rev" = before ] && flags=("${before_flags[@]}")
	[ "$rev" = after ] && flags=("${after_flags[@]}")
	rport=$(freeport)
	redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
		--pidfile "$tmp/redis.pid" --logfile "$tmp/redis.log" >/dev/null
	for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
	for _ in 1 2; do
		local grpc http debug
		grpc=$(freeport) http=$(freeport) debug=$(freeport)
		"$tmp/sluice-$rev" --config bench/hotkey.yaml --grpc-addr "127.0.0.1:$grpc" --http-addr "127.0.0.1:$http" \
			--debug-addr "127.0.0.1:$debug" --log-level error --ui=false --redis-url "redis://127.0.0.1:$rport/0" \
			"${flags[@]}" >"$tmp/$rev.log" 2>&1 &
		pids+=("$!") addrs+=("127.0.0.1:$grpc")
		for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/healthcheck" >/dev/null 2>&1 && break; sleep 0.1; done
	done
	"$tmp/loadgen" -target "${addrs[0]},${addrs[1]}" -concurrency "$CONC" -descriptors 1 -keys 1 -duration "$DURATION" -json >"$tmp/run.json"
	local calls
	calls=$(redis-cli -p "$rport" info commandstats | tr -d '\r' |
		awk -F'[:,=]' '/^cmdstat_(evalsha|eval|fcall):/ {n += $3} END {print n + 0}')
	kill -INT "${pids[@]}" 2>/dev/null || true
	wait "${pids[@]}" 2>/dev/null || true
	redis-cli -p "$rport" shutdown nosave >/dev/null 2>&1 || true
	jq -r --arg rev "$rev" --argjson run "$run" --argjson calls "$calls" '
		"\($rev) run=\($run): \(.decisions_per_s | floor)/s admitted \(.ok + .connections) errors \(.error_total)" +
		" p99 \(.latency_us.p99 | floor)µs script calls \($calls / .requests * 10000 | round / 10000) per decision"' "$tmp/run.json"
}

for run in $(seq "$RUNS"); do
	for rev in before after; do
		if [ "${HOT:-0}" = 1 ]; then
			hot "$rev" "$run"
		else
			measure "$rev" "$run"
		fi
	done
done
