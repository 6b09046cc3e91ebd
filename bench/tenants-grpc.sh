#!/usr/bin/env bash
# tenants-grpc.sh: a tenant plan's decisions against a YAML limit's, over
# gRPC with Redis. One redis-server of its own, one sluice on it with
# bench/tenants: domain "yaml" (a limit on d0) and domain "tenant" (d0 with
# tenants_from bench_tenants, the same limit as plan "big"; values without
# a row get the same limit as the default plan).
#
# Warm (the default): the table holds a row naming "big" for each of KEYS
# (1000) values; a WARMUP (5s) run of yaml, then runs of tenant until every
# row is cached and a run reads none (none due after a failed read). Then RUNS
# (5) rounds, each one run of each domain (the order alternates: yaml
# first in odd rounds, tenant first in even ones), cmd/loadgen closed loop
# with CONC (64) callers over the KEYS values for DURATION (10s) after 1s
# unmeasured. Prints each run (decisions/s, p50/p99, OK,
# OVER_LIMIT, errors by gRPC code, the tenant rows read from Redis during it:
# 0 when the cache is warm), then the median decisions/s of each domain,
# their ratio (tenant / yaml) and the median of the rounds' ratios.
#
# COLD=1: the extra Redis cost of a tenant new to the cache. RUNS rounds,
# each one run of each domain of COLD_REQUESTS (100000) calls whose values
# are drawn from 10^9 (so nearly every call's value is new: a fresh seed
# per run), and prints per decision: Redis commands (INFO commandstats,
# HGET apart), Redis CPU (INFO cpu), sluice CPU, and the tenant reads and
# failed reads; then the medians and the tenant run's extra over yaml's.
#
# Each call's deadline is CALL_TIMEOUT (5s): long enough that no store call
# times out on a loaded machine (the store's budget is the caller's deadline
# less a tenth); set 20ms to see what Envoy's default filter timeout makes
# of the same load. SERVER_BIN and LOADGEN_BIN name binaries built already
# (else the script builds them). Needs go, redis-server, redis-cli, curl,
# python3.
set -euo pipefail
cd "$(dirname "$0")/.."
CONC=${CONC:-64} KEYS=${KEYS:-1000} DURATION=${DURATION:-10s} WARMUP=${WARMUP:-5s} RUNS=${RUNS:-5}
CALL_TIMEOUT=${CALL_TIMEOUT:-5s} COLD=${COLD:-0} COLD_REQUESTS=${COLD_REQUESTS:-100000}
. bench/lib.sh
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
if [ -n "${SERVER_BIN:-}" ]; then cp "$SERVER_BIN" "$tmp/server"; else go build -o "$tmp/server" ./cmd/server; fi
if [ -n "${LOADGEN_BIN:-}" ]; then cp "$LOADGEN_BIN" "$tmp/loadgen"; else go build -o "$tmp/loadgen" ./cmd/loadgen; fi
rport=$(freeport) gport=$(freeport) hport=$(freeport)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
url="redis://127.0.0.1:$rport/0"
python3 -c "import sys; [print(f'k{i},big') for i in range(int(sys.argv[1]))]" "$KEYS" >"$tmp/rows.csv"
"$tmp/server" tenants --config bench/tenants --redis-url "$url" import bench_tenants "$tmp/rows.csv"
"$tmp/server" --config bench/tenants --redis-url "$url" --grpc-addr "127.0.0.1:$gport" \
	--http-addr "127.0.0.1:$hport" --debug-addr "" --log-level warn >"$tmp/server.log" 2>&1 &
srv=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$hport/readyz" >/dev/null && break; sleep 0.1; done
metric() { curl -s "http://127.0.0.1:$hport/metrics" | awk -v n="$1" '$1 == n {printf "%.0f", $2}'; }
loadgen() { "$tmp/loadgen" -target "127.0.0.1:$gport" -json -concurrency "$CONC" -entry-keys d0 -call-timeout "$CALL_TIMEOUT" "$@"; }
cmdstat() { redis-cli -p "$rport" info commandstats | awk -F'[=,:]' -v c="$1" \
	'/^cmdstat_/ && (c == "" || $1 == "cmdstat_" c) {s += $3} END {print s + 0}'; }

# run DOMAIN ROUND LOADGEN_ARGS...: one measured run; appends its report,
# with the server's and Redis's figures, as one JSON line to $tmp/runs.jsonl.
run() {
	local domain=$1 round=$2
	shift 2
	local reads0 errs0 cpu0 ticks0
	reads0=$(metric sluice_tenant_reads_total) errs0=$(metric sluice_tenant_read_errors_total)
	redis-cli -p "$rport" config resetstat >/dev/null
	cpu0=$(redis_cpu_at "$rport") ticks0=$(ticks "$srv")
	loadgen -domain "$domain" "$@" >"$tmp/run.json"
	python3 - "$tmp/run.json" "$domain" "$round" "$(($(metric sluice_tenant_reads_total) - reads0))" \
		"$(($(metric sluice_tenant_read_errors_total) - errs0))" "$cpu0" "$(redis_cpu_at "$rport")" \
		"$(cmdstat '')" "$(cmdstat hget)" "$(($(ticks "$srv") - ticks0))" "$(getconf CLK_TCK)" "$tmp/runs.jsonl" <<'PY'
import json, sys
path, domain, rnd, reads, errs, cpu0, cpu1, cmds, hgets, ticks, hz, out = sys.argv[1:]
r = json.load(open(path))
r.update(domain=domain, round=int(rnd), tenant_reads=int(reads), tenant_read_errors=int(errs),
         redis_cpu_s=float(cpu1) - float(cpu0), redis_cmds=int(cmds), redis_hgets=int(hgets),
         sluice_cpu_s=int(ticks) / int(hz))
open(out, "a").write(json.dumps(r) + "\n")
d, lat = max(r["decisions"], 1), r["latency_us"]
print(f"round {rnd} {domain:6}: {r['decisions_per_s']:8.0f} decisions/s, p50 {lat['p50']:.0f} us, p99 {lat['p99']:.0f} us, "
      f"{r['ok']} OK, {r['over_limit']} OVER_LIMIT, errors {r['errors'] or 0}, "
      f"tenant reads {reads} ({errs} failed), Redis {int(cmds) / d:.3f} cmds ({int(hgets) / d:.3f} HGET) and "
      f"{r['redis_cpu_s'] / d * 1e6:.2f} us CPU, sluice {r['sluice_cpu_s'] / d * 1e6:.1f} us CPU per decision")
PY
}

if [ "$COLD" = 1 ]; then
	echo "cold: $RUNS rounds of $COLD_REQUESTS calls per domain, values from 10^9, $CONC callers, call deadline $CALL_TIMEOUT"
	for r in $(seq "$RUNS"); do
		for d in yaml tenant; do
			run "$d" "$r" -keys 1000000000 -requests "$COLD_REQUESTS" -seed "$((1000 + 10 * r + ${#d}))"
		done
	done
else
	echo "warm: $RUNS rounds of $DURATION per domain, $KEYS values, $CONC callers, call deadline $CALL_TIMEOUT"
	loadgen -domain yaml -keys "$KEYS" -duration "$WARMUP" >/dev/null
	# Warm until every value is cached and a whole pass of the tenant
	# domain reads no row (none left to read again after a failed read).
	for pass in $(seq 10); do
		reads0=$(metric sluice_tenant_reads_total)
		loadgen -domain tenant -keys "$KEYS" -duration "$WARMUP" >/dev/null
		[ "$(metric sluice_tenant_reads_total)" = "$reads0" ] && [ "$(metric sluice_tenant_cache_rows)" -ge "$KEYS" ] && break
	done
	echo "after $pass warm-up passes: $(metric sluice_tenant_cache_rows) tenant rows cached," \
		"$(metric sluice_tenant_reads_total) read ($(metric sluice_tenant_read_errors_total) failed), none in the last pass"
	for r in $(seq "$RUNS"); do
		order="yaml tenant"
		[ $((r % 2)) = 0 ] && order="tenant yaml"
		for d in $order; do run "$d" "$r" -keys "$KEYS" -warmup 1s -duration "$DURATION"; done
	done
fi
python3 - "$tmp/runs.jsonl" "$COLD" <<'PY'
import json, statistics as st, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
by = {d: [r for r in runs if r["domain"] == d] for d in ("yaml", "tenant")}
med = lambda d, f: st.median(f(r) for r in by[d])
per = lambda f: lambda r: f(r) / max(r["decisions"], 1)
if sys.argv[2] == "1":
    rows = [("Redis commands", per(lambda r: r["redis_cmds"]), 3, ""), ("Redis HGETs", per(lambda r: r["redis_hgets"]), 3, ""),
            ("Redis CPU", per(lambda r: r["redis_cpu_s"] * 1e6), 2, " us"), ("sluice CPU", per(lambda r: r["sluice_cpu_s"] * 1e6), 1, " us"),
            ("tenant reads", per(lambda r: r["tenant_reads"]), 3, ""), ("failed tenant reads", per(lambda r: r["tenant_read_errors"]), 4, "")]
    for name, f, p, unit in rows:
        y, t = med("yaml", f), med("tenant", f)
        print(f"median {name} per decision: yaml {y:.{p}f}{unit}, tenant {t:.{p}f}{unit}, extra {t - y:+.{p}f}{unit}")
else:
    y, t = med("yaml", lambda r: r["decisions_per_s"]), med("tenant", lambda r: r["decisions_per_s"])
    rounds = sorted({r["round"] for r in runs})
    ratios = [next(r for r in by["tenant"] if r["round"] == n)["decisions_per_s"] /
              next(r for r in by["yaml"] if r["round"] == n)["decisions_per_s"] for n in rounds]
    print(f"median decisions/s: yaml {y:.0f}, tenant {t:.0f}; ratio tenant/yaml {t / y:.3f}; "
          f"rounds' ratios {' '.join(f'{x:.3f}' for x in ratios)} (median {st.median(ratios):.3f})")
errs = sum(r["error_total"] for r in runs)
reads = sum(r["tenant_reads"] for r in by["tenant"])
print(f"errors in all runs: {errs}; tenant rows read during the tenant runs: {reads}")
PY
kill "$srv"
wait "$srv" 2>/dev/null || true
