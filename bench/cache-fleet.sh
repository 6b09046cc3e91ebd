#!/usr/bin/env bash
# cache-fleet.sh: the limiter cache's over-admission. Three sluice
# instances on one redis-server of their own, one key (d0=k0) limited to
# 1000 a minute (sliding window, 50 sub-windows), offered RATE (900) calls a
# second in all, open loop, round robin over the instances, for DURATION
# (60s): once with --cache=false, once with --cache=true. Prints what each
# run admitted; the sliding window admits at most the limit in any minute,
# so an exact run admits about 1000 plus what the window frees while it
# runs.
# Needs go, redis-server, redis-cli.
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${RATE:-900} DURATION=${DURATION:-60s}
. bench/lib.sh
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/server" ./cmd/server
go build -o "$tmp/loadgen" ./cmd/loadgen
rport=$(freeport)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
for cache in false true; do
	redis-cli -p "$rport" flushall >/dev/null
	targets="" pids=""
	for i in 1 2 3; do
		gport=$(freeport) hport=$(freeport)
		"$tmp/server" --config bench/cache/zipf.yaml --redis-url "redis://127.0.0.1:$rport/0" --grpc-addr "127.0.0.1:$gport" \
			--http-addr "127.0.0.1:$hport" --debug-addr "" --log-level warn --cache="$cache" >"$tmp/server$i.log" 2>&1 &
		pids="$pids $!"
		targets="$targets${targets:+,}127.0.0.1:$gport"
		for _ in $(seq 100); do curl -sf "http://127.0.0.1:$hport/readyz" >/dev/null && break; sleep 0.1; done
	done
	"$tmp/loadgen" -target "$targets" -connections 3 -json -rate "$RATE" -concurrency 64 -keys 1 -duration "$DURATION" >"$tmp/run.json"
	python3 - "$cache" "$tmp/run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[2]))
print(f"cache={sys.argv[1]}: {r['requests']} calls over {r['elapsed_s']:.0f} s, {r['ok']} admitted "
      f"(besides the one unreported call per connection), {r['error_total']} errors")
PY
	kill $pids; wait $pids 2>/dev/null || true
done
