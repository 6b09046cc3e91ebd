#!/usr/bin/env bash
# cache-fleet.sh: the limiter cache's over-admission and failure mode
# local's outage, three sluice instances on one redis-server of their own,
# one key (d0=k0) limited to LIMIT (1000) a minute (sliding window, 50
# sub-windows), each instance offered RATE (300) calls a second by a load
# generator of its own (open loop), so 3 x RATE in all.
#
# MODE=overadmit (the default): for DURATION (120s), once with
# --cache=false and once with --cache=true (CACHES): the admitted calls in
# every sliding minute (60 consecutive seconds of the load generators'
# per-second counts, so at 1 s resolution), the worst against the limit,
# and the errors by code. The sliding window admits at most the limit in
# any minute (its sub-windows are 1.2 s, so a minute read at 1 s
# resolution may hold a sub-window more); the cache's bound is
# docs/configuration.md's.
#
# MODE=outage: for each failure mode of MODES ("local error"), a run of
# HEALTHY (10s) on Redis, then Redis stopped (SIGSTOP) for OUTAGE (10s),
# then AFTER (5s) once it continues (SIGCONT): what each instance admitted
# in the seconds of the outage against its share of the limit
# (ceil(LIMIT/3): the fleet admits at most LIMIT + 2 in the outage's
# window), the errors by code in the outage, and, with local, how long
# after SIGCONT each instance was back on Redis (its
# sluice_local_since_seconds read back 0, polled every 50 ms from a second
# before SIGCONT: printed as an interval, as a poll takes time). CACHE
# (false) is --cache in the outage runs, which run with
# --over-limit-cache=false: the limit is spent in the first second, and
# the over-limit cache would answer the whole outage from memory.
#
# Every call carries a gRPC deadline of CALL_TIMEOUT (1s): a decision
# waits for Redis that long (less a margin for failure modes that answer),
# so an outage shorter than it ends in no error even with error.
#
# Each instance's first call on its connection is not in the load
# generator's report: 3 admitted calls at most are not counted.
# Durations: overadmit about 2 x (DURATION + 5 s); outage about
# 2 x (HEALTHY + OUTAGE + AFTER + 5 s).
# Needs go, redis-server, redis-cli, curl, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${MODE:-overadmit} RATE=${RATE:-300} LIMIT=${LIMIT:-1000} DURATION=${DURATION:-120s} CACHES=${CACHES:-false true}
MODES=${MODES:-local error} CALL_TIMEOUT=${CALL_TIMEOUT:-1s} HEALTHY=${HEALTHY:-10} OUTAGE=${OUTAGE:-10} AFTER=${AFTER:-5} CACHE=${CACHE:-false}
. bench/lib.sh
tmp=$(mktemp -d)
trap 'kill -CONT $(cat "$tmp/redis.pid" 2>/dev/null) 2>/dev/null || true; kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/server" ./cmd/server
go build -o "$tmp/loadgen" ./cmd/loadgen
rport=$(freeport)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
echo $! >"$tmp/redis.pid"
for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done

# config FAILURE_MODE: the domain's config (no failure_mode when empty).
config() {
	mkdir -p "$tmp/config"
	{
		echo "domain: bench"
		[ -n "$1" ] && echo "failure_mode: $1"
		echo "descriptors:"
		echo "  - key: d0"
		echo "    rate_limit: {name: d0, unit: minute, requests_per_unit: $LIMIT}"
	} >"$tmp/config/bench.yaml"
}
metric() { # HTTPADDR NAME: the sum of NAME's series
	curl -s "http://$1/metrics" | awk -v n="$2" 'index($1, n) == 1 && (length($1) == length(n) || substr($1, length(n) + 1, 1) == "{") {s += $2} END {printf "%.0f", s}'
}
# fleet CACHE [flags...]: three instances; sets grpcs, https, pids.
fleet() {
	local cache=$1
	shift
	grpcs=() https=() pids=()
	redis-cli -p "$rport" flushall >/dev/null
	for i in 1 2 3; do
		local gport hport
		gport=$(freeport) hport=$(freeport)
		"$tmp/server" --config "$tmp/config" --redis-url "redis://127.0.0.1:$rport/0" --grpc-addr "127.0.0.1:$gport" \
			--http-addr "127.0.0.1:$hport" --debug-addr "" --log-level warn --cache="$cache" "$@" >"$tmp/server$i.log" 2>&1 &
		pids+=($!) grpcs+=("127.0.0.1:$gport") https+=("127.0.0.1:$hport")
	done
	for h in "${https[@]}"; do
		for _ in $(seq 100); do curl -sf "http://$h/readyz" >/dev/null && break; sleep 0.1; done
	done
}
# load SECONDS: one open-loop load generator per instance, in the
# background, each writing $tmp/run<i>.json; sets lpids.
load() {
	lpids=()
	for i in 0 1 2; do
		"$tmp/loadgen" -target "${grpcs[$i]}" -json -per-second -rate "$RATE" -concurrency 64 -keys 1 -call-timeout "$CALL_TIMEOUT" \
			-duration "$1" >"$tmp/run$i.json" &
		lpids+=($!)
	done
}
stopfleet() { kill "${pids[@]}" 2>/dev/null || true; wait "${pids[@]}" 2>/dev/null || true; }

if [ "$MODE" = overadmit ]; then
	config ""
	for cache in $CACHES; do
		fleet "$cache"
		load "$DURATION"
		wait "${lpids[@]}"
		stopfleet
		python3 - "$cache" "$LIMIT" "$RATE" "$tmp"/run{0,1,2}.json <<'PY'
import json, sys
cache, limit, rate, paths = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
rs = [json.load(open(p)) for p in paths]
t0 = min(r["measured_from_unix"] for r in rs)
secs = {}
for r in rs:
    off = round(r["measured_from_unix"] - t0)
    for i, s in enumerate(r.get("per_second", [])):
        secs[off + i] = secs.get(off + i, 0) + s["ok"]
n = max(secs) + 1 if secs else 0
ok = [secs.get(i, 0) for i in range(n)]
wins = [sum(ok[i:i + 60]) for i in range(max(1, n - 59))]
worst = max(wins)
errs = {}
for r in rs:
    for k, v in (r.get("errors") or {}).items():
        errs[k] = errs.get(k, 0) + v
T, N = 0.1, 3
bound = 2 * T * (N - 1) * rate * N if cache == "true" else 0
print(f"cache={cache}: {sum(r['requests'] for r in rs)} calls over {max(r['elapsed_s'] for r in rs):.0f} s, "
      f"{sum(r['ok'] for r in rs)} admitted (+3 unreported first calls at most); "
      f"worst sliding minute (1 s resolution, {len(wins)} windows) {worst} of {limit} "
      f"(documented bound {limit} + {bound:.0f}: 2T(N-1)r per instance deciding in process, T 100 ms, r {rate:.0f}/s; 0 under steady traffic); "
      f"errors {sum(errs.values())} {errs}")
PY
	done
	exit 0
fi

for fm in $MODES; do
	config "$fm"
	# Without the over-limit cache: the limit is spent in the first
	# second, and the over-limit cache would then answer every call of the
	# outage from memory, never asking Redis.
	fleet "$CACHE" --over-limit-cache=false
	for h in "${https[@]}"; do # every instance counts the other two
		for _ in $(seq 100); do [ "$(metric "$h" sluice_live_instances)" = 3 ] && break; sleep 0.1; done
	done
	load "$((HEALTHY + OUTAGE + AFTER))s"
	sleep "$HEALTHY"
	stop_at=$(date +%s.%N)
	kill -STOP "$(cat "$tmp/redis.pid")"
	# Each instance's sluice_local_since_seconds is polled, from a second
	# before SIGCONT, every 50 ms: each poll's start, end and value go to
	# $tmp/poll<i>, until a poll begun after SIGCONT reads 0 (10 s at most).
	sleep "$((OUTAGE > 1 ? OUTAGE - 1 : 0))"
	rm -f "$tmp/cont"
	polls=()
	for i in 0 1 2; do
		if [ "$fm" != local ]; then continue; fi
		(
			: >"$tmp/poll$i"
			for _ in $(seq 240); do
				t0=$(date +%s%N)
				v=$(metric "${https[$i]}" sluice_local_since_seconds)
				echo "$t0 $(date +%s%N) $v" >>"$tmp/poll$i"
				if [ "$v" = 0 ] && [ -f "$tmp/cont" ] && [ "$t0" -ge "$(cat "$tmp/cont")" ]; then break; fi
				sleep 0.05
			done
		) &
		polls+=($!)
	done
	sleep "$((OUTAGE > 1 ? 1 : OUTAGE))"
	kill -CONT "$(cat "$tmp/redis.pid")"
	cont_at=$(date +%s.%N)
	echo "${cont_at/./}" | cut -c1-19 >"$tmp/cont"
	wait "${lpids[@]}" "${polls[@]}"
	back=()
	for i in 0 1 2; do
		# Back on Redis between the start of the last poll that still saw
		# the local mode and the end of the first begun after SIGCONT that
		# saw it over, in ms after SIGCONT.
		back+=("$(awk -v c="$(cat "$tmp/cont")" '$3 != 0 {lo = ($1 - c) / 1e6} $3 == 0 && $1 >= c && !hi {hi = ($2 - c) / 1e6}
			END {if (hi == "") print -1; else printf "%s..%.0f", (lo == "" ? "-" : sprintf("%.0f", lo)), hi}' "$tmp/poll$i" 2>/dev/null || echo -1)")
	done
	stopfleet
	python3 - "$fm" "$LIMIT" "$stop_at" "$cont_at" "${back[*]}" "$tmp"/run{0,1,2}.json <<'PY'
import json, math, sys
fm, limit, stop, cont, back, paths = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5].split(), sys.argv[6:]
share = math.ceil(limit / 3)
total_ok = total_err = 0
for i, p in enumerate(paths):
    r = json.load(open(p))
    t0 = r["measured_from_unix"]
    # The seconds from the one in which SIGSTOP came to the one in which SIGCONT came.
    first, last = int(stop - t0), int(cont - t0)
    sec = r.get("per_second", [])[first:last + 1]
    ok, over, err = sum(s["ok"] for s in sec), sum(s["over_limit"] for s in sec), sum(s["errors"] for s in sec)
    total_ok, total_err = total_ok + ok, total_err + err
    b = back[i] if i < len(back) else "-"
    print(f"failure_mode={fm} instance {i}: outage {cont - stop:.1f} s (seconds {first}..{last}): {ok} admitted (share {share}), "
          f"{over} over the limit, {err} errors {r.get('errors') or {}}; back on Redis "
          f"{'-' if b == '-1' else 'in (' + b.replace('..', ', ') + '] ms'} after SIGCONT; whole run {r['requests']} calls, {r['ok']} admitted")
print(f"failure_mode={fm}: fleet admitted {total_ok} in the outage (bound L + N - 1 = {limit + 2}), {total_err} errors")
PY
done
