#!/usr/bin/env bash
# cache-zipf.sh: the limiter cache on Zipf traffic. One redis-server of its
# own, one sluice on it, cmd/loadgen closed loop with CONC (64) callers,
# values of d0 Zipf s=1.1 over KEYS (100000), DURATION (20s) per run; one
# run with --cache=false, one with --cache=true (--cache-sync SYNC, 100ms;
# RUNS="true" for the cached run alone). Prints per
# run, after WARMUP (5s) of the same load unmeasured: decisions/s, p99,
# Redis CPU per decision, FCALLs per decision, and
# script entries per decision: the decisions that reached Redis (all less
# those the limiter cache and the over-limit cache answered) plus the
# cache's sync calls (on a standalone Redis each sync is one entry).
# With PERF=1, perf records Redis (perf record -F 999 -g -p <redis>) for the
# measured run and each run prints where Redis's CPU went: by DSO (the Lua
# VM's static functions show as addresses in a stripped redis-server), the
# top symbols, and INFO commandstats (FCALL against the commands its
# scripts run, the heartbeat's commands) and expired_keys.
# Needs go, redis-server, redis-cli (and perf with PERF=1).
set -euo pipefail
cd "$(dirname "$0")/.."
KEYS=${KEYS:-100000} CONC=${CONC:-64} DURATION=${DURATION:-20s} WARMUP=${WARMUP:-5s}
RUNS=${RUNS:-false true} SYNC=${SYNC:-100ms} PERF=${PERF:-0}
. bench/lib.sh
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/server" ./cmd/server
go build -o "$tmp/loadgen" ./cmd/loadgen
rport=$(freeport)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
rpid=$!
for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
metric() { curl -s "http://127.0.0.1:$hport/metrics" | awk -v n="$1" 'index($1, n) == 1 && (length($1) == length(n) || substr($1, length(n) + 1, 1) == "{") {s += $2} END {printf "%.0f", s}'; }
for cache in $RUNS; do
	gport=$(freeport) hport=$(freeport)
	redis-cli -p "$rport" flushall >/dev/null
	"$tmp/server" --config bench/cache/zipf.yaml --redis-url "redis://127.0.0.1:$rport/0" --grpc-addr "127.0.0.1:$gport" \
		--http-addr "127.0.0.1:$hport" --debug-addr "" --log-level warn --cache="$cache" --cache-sync "$SYNC" >"$tmp/server.log" 2>&1 &
	srv=$!
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:$hport/readyz" >/dev/null && break; sleep 0.1; done
	"$tmp/loadgen" -target "127.0.0.1:$gport" -json -concurrency "$CONC" -keys "$KEYS" -skew zipf -zipf-s 1.1 \
		-duration "$WARMUP" -seed 7 >/dev/null
	dec0=$(metric sluice_store_calls_total) cached0=$(metric sluice_cache_decisions_total)
	syncs0=$(metric sluice_cache_syncs_total) olc0=$(metric sluice_over_limit_cache_hits_total)
	redis-cli -p "$rport" config resetstat >/dev/null
	cpu0=$(redis_cpu_at "$rport")
	if [ "$PERF" = 1 ]; then
		perf record -q -F 999 -g -p "$rpid" -o "$tmp/perf.data" >/dev/null 2>&1 &
		perfpid=$!
	fi
	"$tmp/loadgen" -target "127.0.0.1:$gport" -json -concurrency "$CONC" -keys "$KEYS" -skew zipf -zipf-s 1.1 \
		-duration "$DURATION" >"$tmp/run.json"
	cpu1=$(redis_cpu_at "$rport")
	if [ "$PERF" = 1 ]; then
		kill -INT "$perfpid"
		wait "$perfpid" 2>/dev/null || true
		echo "cache=$cache: Redis's CPU by DSO, then the top symbols (perf, $DURATION):"
		perf report -i "$tmp/perf.data" --no-children --sort dso --stdio -g none 2>/dev/null | grep '%' | grep -v '^#' | head -8
		perf report -i "$tmp/perf.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null | grep '%' | grep -v '^#' | head -25
		echo "cache=$cache: INFO commandstats (reset at the measured run's start) and expired keys:"
		redis-cli -p "$rport" info commandstats | tr -d '\r' | grep '^cmdstat_'
		redis-cli -p "$rport" info stats | tr -d '\r' | grep '^expired_keys'
	fi
	fcalls=$(redis-cli -p "$rport" info commandstats | awk -F'[=,:]' '/^cmdstat_(fcall|evalsha):/ {s += $3} END {print s + 0}')
	dec=$(($(metric sluice_store_calls_total) - dec0))
	cached=$(($(metric sluice_cache_decisions_total) - cached0)) syncs=$(($(metric sluice_cache_syncs_total) - syncs0))
	olc=$(($(metric sluice_over_limit_cache_hits_total) - olc0))
	python3 - "$cache" "$tmp/run.json" "$cpu0" "$cpu1" "$fcalls" "$dec" "$cached" "$syncs" "$olc" <<'PY'
import json, sys
cache, path, cpu0, cpu1, fcalls, dec, cached, syncs, olc = sys.argv[1:]
r = json.load(open(path))
dec, cached, syncs, olc = int(dec), int(cached), int(syncs), int(olc)
entries = dec - cached - olc + syncs
print(f"cache={cache}: {r['decisions_per_s']:.0f} decisions/s, p99 {r['latency_us']['p99']:.0f} us, {r['error_total']} errors, "
      f"{dec} decisions: {cached} in process, {olc} over-limit cache, {syncs} syncs; "
      f"script entries/decision {entries/dec:.3f}, FCALLs/decision {int(fcalls)/dec:.3f}, "
      f"Redis CPU/decision {(float(cpu1)-float(cpu0))/dec*1e6:.2f} us")
PY
	kill "$srv"; wait "$srv" 2>/dev/null || true
done
