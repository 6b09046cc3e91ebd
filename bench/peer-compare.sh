#!/usr/bin/env bash
# peer-compare.sh: Sluice against envoyproxy/ratelimit ("the peer") on ONE
# redis-server, alternating, same load generator (cmd/loadgen), same
# descriptor config (bench/loadtest.yaml, which both read), one service at a
# time. For every round, concurrency (CONC) and descriptor count (DESCS), it
# runs the peer, then Sluice (the order flips every round), each freshly
# started, warmed up by an unmeasured loadgen run, then measured by a second
# one, and records:
#   decisions/s and p50/p99/p99.9 (loadgen: one decision is one
#     ShouldRateLimit call, of DESCS descriptors),
#   service CPU per decision (utime+stime of /proc/<pid>/stat),
#   Redis CPU per decision (INFO cpu used_cpu_sys+used_cpu_user),
#   Redis calls per decision: requests Redis received from the service
#     (script calls for Sluice, commands for the peer) and commands it ran
#     (INFO commandstats, those run inside scripts included),
# as one JSON line per measurement in $OUT, then a table of medians and
# Sluice/peer ratios (also: bench/peer-compare.sh --summarize FILE).
#
# Then the hot key: one counter (bench/hotkey.yaml, 100,000 a minute), 64
# callers on 2 instances of each service sharing the Redis, for a run
# shorter than the minute: admitted requests (at most the limit) and Redis
# calls per decision.
#
# With FIXED=1 each round also runs "sluice-fixed": Sluice on
# bench/loadtest-fixed.yaml, the same rules as fixed windows, the peer's
# algorithm (Sluice's default is a sliding window of 50 sub-windows, which
# the peer cannot read from its config), so that one run compares both.
#
# The peer is built with `go install github.com/envoyproxy/ratelimit/src/service_cmd@$PEER_VERSION`
# into $CACHE (outside the repository; never committed) unless already there.
#
# With MATRIX=1 it runs the whole side-by-side matrix instead of CONC x
# DESCS: rows "uniform" (10,000 values per key, limits never reached) at
# 1, 16 and 64 callers x 1 and 3 descriptors, and "zipf" (Zipf s=1.1 over
# 100,000 values) at 64 callers x 1 and 3 descriptors, each row alternating
# the services, RUNS rounds (ROWS overrides the rows: words LOAD,C,D).
# It prints one markdown table, Sluice / peer per row, medians of RUNS:
# decisions/s, Redis CPU per decision (INFO), service CPU per decision
# (/proc), p99 and p99.9, errors by gRPC code. The hot key part is off
# unless HOT=1. At the defaults (RUNS=3, 8 s + 2 s) it takes about 12 min.
#
# With CACHED=1 the zipf rows (CACHED_LOADS) also run "sluice-cached":
# Sluice with every rule in its limiter cache (--cache=true, --cache-sync
# CACHE_SYNC, 100ms), and a second table compares it with Sluice uncached
# and the peer: script entries per decision (decisions that reached Redis
# plus sync calls, from Sluice's metrics; at 1 descriptor only, as the
# cache's metrics count hits, not requests), Redis CPU per decision, p99.
#
# With CALL_TIMEOUT=20ms every call carries that gRPC deadline, as Envoy's
# filter timeout sets it: the table's errors then count the calls that
# ended in an error or past the deadline (DeadlineExceeded), as a share of
# the calls ("error share"), with the codes in the JSON lines.
#
# Environment: RUNS (3), DURATION (8s), WARMUP (2s), CONC ("1 16 64"),
# DESCS ("1 3"), KEYS (10000 values per descriptor key), PEER_VERSION
# (latest), CALL_TIMEOUT (5s: none to speak of), CACHE (~/.cache/sluice-bench), SLUICE_FLAGS (extra flags for
# Sluice), HOT (1: run the hot key part; 0: skip), HOT_FLAGS (extra flags
# for Sluice in the hot key run), FIXED (0; 1: also sluice-fixed),
# LOADGEN_FLAGS (extra flags for the load generator, both services: e.g.
# "-skew zipf -zipf-s 1.1" with KEYS=100000 for a Zipf load), OUT
# (bench/out/peer-compare.jsonl), MATRIX (0), ROWS, CACHED (0),
# CACHED_LOADS ("zipf"), CACHE_SYNC (100ms).
# Each line of OUT carries the invocation's "batch" id; the tables are of
# this invocation's lines only.
# Needs go, redis-server, redis-cli, jq, curl, python3.
set -euo pipefail
cd "$(dirname "$0")/.."

summarize() { # file: medians per service, concurrency and descriptors, and ratios
	jq -rs '
	def median: sort | if length == 0 then null elif length % 2 == 1 then .[length/2|floor] else (.[length/2-1] + .[length/2]) / 2 end;
	def r(x; n): if x == null then "-" else ((x * pow(10; n) | round) / pow(10; n) | tostring) end;
	def ratio(a; b): if a == null or b == null or b == 0 then "-" else r(a / b; 2) + "x" end;
	[.[] | select(.hot != true)] as $all |
	($all | group_by([.c, .d, .svc]) | map({c: .[0].c, d: .[0].d, svc: .[0].svc, n: length,
		dps: (map(.decisions_per_s) | median), p50: (map(.p50_us) | median), p99: (map(.p99_us) | median),
		p999: (map(.p999_us) | median), svc_cpu: (map(.svc_cpu_us) | median), redis_cpu: (map(.redis_cpu_us) | median),
		calls: (map(.redis_calls) | median), cmds: (map(.redis_cmds) | median), errors: (map(.errors) | add),
		share: ((map(.errors) | add) / (map(.decisions) | add) * 100)})) as $m |
	"| c | descriptors | service | decisions/s | p50 ms | p99 ms | p99.9 ms | service CPU µs/decision | Redis CPU µs/decision | Redis calls/decision | Redis commands/decision | errors | error share % |",
	"| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
	($m[] | "| \(.c) | \(.d) | \(.svc) (n=\(.n)) | \(r(.dps; 0)) | \(r(.p50/1000; 2)) | \(r(.p99/1000; 2)) | \(r(.p999/1000; 2)) | \(r(.svc_cpu; 1)) | \(r(.redis_cpu; 2)) | \(r(.calls; 3)) | \(r(.cmds; 3)) | \(.errors) | \(r(.share; 3)) |"),
	"",
	(["sluice", "sluice-fixed"][] as $name | select(any($m[]; .svc == $name)) |
	"\($name) / peer, medians of the same run:",
	"",
	"| c | descriptors | decisions/s | p99 | service CPU/decision | Redis CPU/decision | Redis calls/decision |",
	"| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
	($m | group_by([.c, .d])[] | (map(select(.svc == $name))[0]) as $s | (map(select(.svc == "peer"))[0]) as $p |
		select($s != null and $p != null) |
		"| \($s.c) | \($s.d) | \(ratio($s.dps; $p.dps)) | \(ratio($s.p99; $p.p99)) | \(ratio($s.svc_cpu; $p.svc_cpu)) | \(ratio($s.redis_cpu; $p.redis_cpu)) | \(ratio($s.calls; $p.calls)) |"),
	""),
	([.[] | select(.hot == true)] | if length == 0 then empty else
		"Hot key (one counter, limit \(.[0].limit) a minute, \(.[0].c) callers on 2 instances, \(.[0].elapsed_s | floor) s):",
		"",
		"| service | flags | decisions/s | admitted | admitted / limit | p99 ms | Redis calls/decision | Redis commands/decision | Redis CPU µs/decision |",
		"| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
		(.[] | "| \(.svc) | \(.flags) | \(r(.decisions_per_s; 0)) | \(.admitted) | \(r(.admitted / .limit; 4)) | \(r(.p99_us/1000; 2)) | \(r(.redis_calls; 4)) | \(r(.redis_cmds; 4)) | \(r(.redis_cpu_us; 2)) |")
	end)
	' "$1"
}
# matrix FILE: the side-by-side table, one row per load, callers and
# descriptors: Sluice / peer, medians of the rounds; errors summed, by code.
# With sluice-cached lines, a second table: cached against uncached and
# the peer.
matrix() {
	jq -rs '
	def median: map(select(. != null)) | sort | if length == 0 then null elif length % 2 == 1 then .[length/2|floor] else (.[length/2-1] + .[length/2]) / 2 end;
	def r(x; n): if x == null then "-" else ((x * pow(10; n) | round) / pow(10; n) | tostring) end;
	def ratio(a; b): if a == null or b == null or b == 0 then "-" else r(a / b; 2) + "x" end;
	def codes: if . == {} then "0" else (to_entries | map("\(.value) \(.key)") | join(", ")) end;
	def pair(a; b; n): "\(r(a; n)) / \(r(b; n)) = \(ratio(a; b))";
	[.[] | select(.hot != true)] as $all |
	($all | group_by([.load // "custom", .c, .d, .svc]) | map({load: (.[0].load // "custom"), c: .[0].c, d: .[0].d, svc: .[0].svc, n: length,
		dps: (map(.decisions_per_s) | median), p99: (map(.p99_us) | median), p999: (map(.p999_us) | median),
		svc_cpu: (map(.svc_cpu_us) | median), redis_cpu: (map(.redis_cpu_us) | median),
		entries: (map(.script_entries) | median),
		errors: (map(.errors_by_code // {} | to_entries[]) | group_by(.key) | map({key: .[0].key, value: (map(.value) | add)}) | from_entries),
		load1: (map(.load1) | median)})) as $m |
	def cell($l; $c; $d; $svc): $m | map(select(.load == $l and .c == $c and .d == $d and .svc == $svc))[0];
	($m | map([.load, .c, .d]) | unique | sort_by(.[0] != "uniform", .[1], .[2])) as $rows |
	"| load | callers | descriptors | decisions/s Sluice / peer | Redis CPU µs per decision Sluice / peer | service CPU µs per decision Sluice / peer | p99 / p99.9 ms Sluice | p99 / p99.9 ms peer | errors Sluice / peer | rounds | load avg |",
	"| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
	($rows[] as [$l, $c, $d] | cell($l; $c; $d; "sluice") as $s | cell($l; $c; $d; "peer") as $p | select($s != null and $p != null) |
		"| \($l) | \($c) | \($d) | \(pair($s.dps; $p.dps; 0)) | \(pair($s.redis_cpu; $p.redis_cpu; 1)) | \(pair($s.svc_cpu; $p.svc_cpu; 1)) | \(r($s.p99/1000; 1)) / \(r($s.p999/1000; 1)) | \(r($p.p99/1000; 1)) / \(r($p.p999/1000; 1)) | \($s.errors | codes) / \($p.errors | codes) | \($s.n) | \(r($s.load1; 1)) |"),
	"",
	(if any($m[]; .svc == "sluice-cached") then
		"Limiter cache (sluice-cached: --cache=true), same rounds:",
		"",
		"| load | callers | descriptors | decisions/s cached / uncached / peer | script entries per decision cached / uncached | Redis CPU µs per decision cached / peer | p99 ms cached / uncached / peer | p99.9 ms cached / uncached | errors cached |",
		"| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
		($rows[] as [$l, $c, $d] | cell($l; $c; $d; "sluice-cached") as $k | cell($l; $c; $d; "sluice") as $s | cell($l; $c; $d; "peer") as $p |
			select($k != null and $s != null and $p != null) |
			"| \($l) | \($c) | \($d) | \(r($k.dps; 0)) / \(r($s.dps; 0)) / \(r($p.dps; 0)) | \(r($k.entries; 3)) / \(r($s.entries; 3)) | \(pair($k.redis_cpu; $p.redis_cpu; 1)) | \(r($k.p99/1000; 1)) / \(r($s.p99/1000; 1)) / \(r($p.p99/1000; 1)) | \(r($k.p999/1000; 1)) / \(r($s.p999/1000; 1)) | \($k.errors | codes) |"),
		""
	else empty end)
	' "$1"
}
if [ "${1:-}" = --summarize ]; then
	summarize "$2"
	exit 0
fi
if [ "${1:-}" = --matrix ]; then
	matrix "$2"
	exit 0
fi

OUT=${OUT:-bench/out/peer-compare.jsonl}
RUNS=${RUNS:-3} DURATION=${DURATION:-8s} WARMUP=${WARMUP:-2s} CONC=${CONC:-"1 16 64"} DESCS=${DESCS:-"1 3"}
KEYS=${KEYS:-10000} PEER_VERSION=${PEER_VERSION:-latest} CALL_TIMEOUT=${CALL_TIMEOUT:-5s} FIXED=${FIXED:-0}
MATRIX=${MATRIX:-0} CACHED=${CACHED:-0} CACHED_LOADS=${CACHED_LOADS:-zipf} CACHE_SYNC=${CACHE_SYNC:-100ms}
if [ "$MATRIX" = 1 ]; then
	HOT=${HOT:-0}
	ROWS=${ROWS:-"uniform,1,1 uniform,1,3 uniform,16,1 uniform,16,3 uniform,64,1 uniform,64,3 zipf,64,1 zipf,64,3"}
else
	HOT=${HOT:-1}
	ROWS=${ROWS:-$(for c in $CONC; do for d in $DESCS; do printf 'custom,%s,%s ' "$c" "$d"; done; done)}
fi
batch=$(date -u +%Y%m%dT%H%M%SZ)-$$
CACHE=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-bench}
read -r -a sluice_flags <<<"${SLUICE_FLAGS:-}"
read -r -a hot_flags <<<"${HOT_FLAGS:-}"
mkdir -p "$(dirname "$OUT")"

peer="$CACHE/peer-$PEER_VERSION/service_cmd"
if [ ! -x "$peer" ]; then
	echo "building envoyproxy/ratelimit@$PEER_VERSION into $CACHE" >&2
	GOBIN="$(dirname "$peer")" GOFLAGS=-mod=mod go install "github.com/envoyproxy/ratelimit/src/service_cmd@$PEER_VERSION"
fi
peer_mod=$(go version -m "$peer" | awk '$1=="mod" {print $2"@"$3}')
tmp=$(mktemp -d)
go build -o "$tmp/sluice" ./cmd/server
go build -o "$tmp/loadgen" ./cmd/loadgen
sluice_rev=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo -dirty)
# shellcheck source=bench/lib.sh
. bench/lib.sh
rport=$(freeport)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --pidfile "$tmp/redis.pid" \
	--logfile "$tmp/redis.log" >/dev/null
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	[ -f "$tmp/redis.pid" ] && kill "$(cat "$tmp/redis.pid")" 2>/dev/null || true
	# Redis may still be writing its log as it exits.
	rm -rf "$tmp" 2>/dev/null || { sleep 0.5; rm -rf "$tmp" || true; }
}
trap cleanup EXIT
for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
rcli() { redis-cli -p "$rport" "$@"; }

# The peer reads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml.
mkdir -p "$tmp/runtime/current/ratelimit/config" "$tmp/hotruntime/current/ratelimit/config"
cp bench/loadtest.yaml "$tmp/runtime/current/ratelimit/config/bench.yaml"
cp bench/hotkey.yaml "$tmp/hotruntime/current/ratelimit/config/bench.yaml"

# start SVC CONFIG PREFIX [flags...]: starts one service in the background;
# sets $svc_pid and $svc_addr (gRPC) when it answers its health check.
start() {
	local svc=$1 config=$2 prefix=$3
	shift 3
	local grpc http debug
	grpc=$(freeport) http=$(freeport) debug=$(freeport)
	if [ "$svc" = peer ]; then
		local root=$tmp/runtime/current
		[ "$config" = bench/hotkey.yaml ] && root=$tmp/hotruntime/current
		env USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$rport" \
			RUNTIME_ROOT="$root" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false RUNTIME_IGNOREDOTFILES=true \
			HOST=127.0.0.1 PORT="$http" GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug" \
			CACHE_KEY_PREFIX="$prefix" "$peer" >"$tmp/$svc.log" 2>&1 &
	else
		"$tmp/sluice" --config "$config" --grpc-addr "127.0.0.1:$grpc" --http-addr "127.0.0.1:$http" \
			--debug-addr "127.0.0.1:$debug" --log-format json --log-level warn --ui=false \
			--redis-url "redis://127.0.0.1:$rport/0" --redis-prefix "$prefix" "$@" >"$tmp/$svc.log" 2>&1 &
	fi
	svc_pid=$!
	pids+=("$svc_pid")
	svc_addr=127.0.0.1:$grpc svc_http=127.0.0.1:$http
	for _ in $(seq 100); do
		curl -sf "http://127.0.0.1:$http/healthcheck" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "$svc did not start:" >&2
	cat "$tmp/$svc.log" >&2
	exit 1
}
stop() { kill -INT "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
hz=$(getconf CLK_TCK)
redis_cpu() { redis_cpu_at "$rport"; }
# redis_counts: "script calls" "all commands" from INFO commandstats (INFO
# itself aside); for the peer, every command it sends is a call.
redis_counts() {
	rcli info commandstats | tr -d '\r' | awk -F'[:,=]' '/^cmdstat_/ {
		name = substr($1, 9); n = $3
		if (name == "info") next
		all += n
		if (name ~ /^(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro)$/) scripts += n
	} END {print scripts + 0, all + 0}'
}

# sluice_entries: the script entries Sluice's metrics account for so far:
# decisions that reached Redis (store calls less those the limiter cache
# and the over-limit cache answered) plus the limiter cache's sync calls
# (one entry each on a standalone Redis).
sluice_entries() {
	curl -s "http://$svc_http/metrics" | awk '
		/^sluice_store_calls_total/ {d += $2} /^sluice_cache_decisions_total/ {k += $2}
		/^sluice_over_limit_cache_hits_total/ {o += $2} /^sluice_cache_syncs_total/ {y += $2}
		END {printf "%.0f", d - k - o + y}'
}

# measure SVC RUN LOAD C D: one fresh service, a warmup, one measured run.
# LOAD is uniform (10,000 values a key), zipf (s=1.1 over 100,000) or
# custom (KEYS and LOADGEN_FLAGS).
measure() {
	local svc=$1 run=$2 loadname=$3 c=$4 d=$5
	local flags=() config=bench/loadtest.yaml keys=$KEYS lflags=${LOADGEN_FLAGS:-}
	[ "$svc" != peer ] && flags=("${sluice_flags[@]}")
	[ "$svc" = sluice-fixed ] && config=bench/loadtest-fixed.yaml
	[ "$svc" = sluice-cached ] && flags+=(--cache=true --cache-sync "$CACHE_SYNC")
	case $loadname in
	uniform) keys=10000 lflags="" ;;
	zipf) keys=100000 lflags="-skew zipf -zipf-s 1.1" ;;
	esac
	start "$svc" "$config" "$svc$run$loadname$c$d:" "${flags[@]}"
	local lg=(-target "$svc_addr" -concurrency "$c" -descriptors "$d" -keys "$keys" -seed "$run" -call-timeout "$CALL_TIMEOUT")
	# shellcheck disable=SC2206 # lflags is a list of words
	lg+=($lflags)
	"$tmp/loadgen" "${lg[@]}" -duration "$WARMUP" >/dev/null
	local load t0 r0 s0 a0 e0=0 t1 r1 s1 a1 e1=0
	load=$(cut -d' ' -f1 /proc/loadavg)
	[ "$svc" != peer ] && e0=$(sluice_entries)
	t0=$(ticks "$svc_pid") r0=$(redis_cpu)
	read -r s0 a0 < <(redis_counts)
	"$tmp/loadgen" "${lg[@]}" -duration "$DURATION" -json >"$tmp/run.json"
	t1=$(ticks "$svc_pid") r1=$(redis_cpu)
	read -r s1 a1 < <(redis_counts)
	[ "$svc" != peer ] && e1=$(sluice_entries)
	stop "$svc_pid"
	jq -c --arg svc "$svc" --argjson run "$run" --argjson hz "$hz" --argjson dt "$((t1 - t0))" \
		--argjson r0 "$r0" --argjson r1 "$r1" --argjson ds "$((s1 - s0))" --argjson da "$((a1 - a0))" \
		--argjson de "$((e1 - e0))" --arg loadname "$loadname" --arg batch "$batch" \
		--arg load "$load" --arg peer "$peer_mod" --arg rev "$sluice_rev" --arg flags "${flags[*]}" '
		{batch: $batch, load: $loadname, svc: $svc, run: $run, c: .concurrency, d: .descriptors, keys: .keys, elapsed_s: .elapsed_s,
		 decisions: .requests, decisions_per_s: .decisions_per_s, errors: .error_total, over_limit: .over_limit,
		 call_timeout_ms: .call_timeout_ms, errors_by_code: .errors, error_kinds: .error_kinds,
		 script_entries: (if $svc == "peer" or .descriptors != 1 then null else $de / .requests end),
		 p50_us: .latency_us.p50, p99_us: .latency_us.p99, p999_us: .latency_us.p99_9,
		 svc_cpu_us: ($dt / $hz * 1e6 / .requests), redis_cpu_us: (($r1 - $r0) * 1e6 / .requests),
		 redis_calls: ((if $svc == "peer" then $da else $ds end) / .requests), redis_cmds: ($da / .requests),
		 load1: ($load | tonumber), peer: $peer, sluice: $rev, flags: $flags}' "$tmp/run.json" >>"$OUT"
	jq -r '"\(.svc) run=\(.run) \(.load) c=\(.c) d=\(.d): \(.decisions_per_s|floor)/s p50 \(.p50_us|floor)µs p99 \(.p99_us|floor)µs p99.9 \(.p999_us|floor)µs svc \(.svc_cpu_us*10|round/10)µs redis \(.redis_cpu_us*100|round/100)µs calls \(.redis_calls*1000|round/1000) cmds \(.redis_cmds*1000|round/1000) err \(.errors) \(.error_kinds // {} | tostring) load \(.load1)"' <<<"$(tail -1 "$OUT")"
}

# hot SVC [flags...]: two instances, one counter, 64 callers.
hot() {
	local svc=$1
	shift
	local a b pa pb prefix="hot$svc$RANDOM:"
	start "$svc" bench/hotkey.yaml "$prefix" "$@"
	a=$svc_addr pa=$svc_pid
	start "$svc" bench/hotkey.yaml "$prefix" "$@"
	b=$svc_addr pb=$svc_pid
	local t0 r0 s0 a0 t1 r1 s1 a1 load
	load=$(cut -d' ' -f1 /proc/loadavg)
	t0=$(($(ticks "$pa") + $(ticks "$pb"))) r0=$(redis_cpu)
	read -r s0 a0 < <(redis_counts)
	"$tmp/loadgen" -target "$a,$b" -concurrency 64 -descriptors 1 -keys 1 -duration 15s -json >"$tmp/hot.json"
	t1=$(($(ticks "$pa") + $(ticks "$pb"))) r1=$(redis_cpu)
	read -r s1 a1 < <(redis_counts)
	stop "$pa"
	stop "$pb"
	# loadgen's first call on each connection (not in its report) may be
	# admitted too: counted in "admitted", an upper bound.
	jq -c --arg svc "$svc" --argjson hz "$hz" --argjson dt "$((t1 - t0))" --argjson r0 "$r0" --argjson r1 "$r1" \
		--argjson ds "$((s1 - s0))" --argjson da "$((a1 - a0))" --arg load "$load" --arg flags "$*" \
		--arg peer "$peer_mod" --arg rev "$sluice_rev" --arg batch "$batch" '
		{batch: $batch, hot: true, svc: $svc, flags: $flags, c: .concurrency, limit: 100000, elapsed_s: .elapsed_s,
		 decisions: .requests, decisions_per_s: .decisions_per_s, admitted: (.ok + .connections), over_limit: .over_limit,
		 errors: .error_total, p99_us: .latency_us.p99,
		 svc_cpu_us: ($dt / $hz * 1e6 / .requests), redis_cpu_us: (($r1 - $r0) * 1e6 / .requests),
		 redis_calls: ((if $svc == "peer" then $da else $ds end) / .requests), redis_cmds: ($da / .requests),
		 load1: ($load | tonumber), peer: $peer, sluice: $rev}' "$tmp/hot.json" >>"$OUT"
	jq -r '"hot \(.svc) \(.flags): \(.decisions_per_s|floor)/s admitted \(.admitted) of \(.limit), calls \(.redis_calls) cmds \(.redis_cmds) p99 \(.p99_us|floor)µs err \(.errors)"' <<<"$(tail -1 "$OUT")"
}

echo "peer $peer_mod, sluice $sluice_rev, redis $(redis-server --version | awk '{print $3}'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for run in $(seq "$RUNS"); do
	order="peer sluice"
	[ "$FIXED" = 1 ] && order="$order sluice-fixed"
	for row in $ROWS; do
		IFS=, read -r loadname c d <<<"$row"
		svcs=$order
		if [ "$CACHED" = 1 ] && grep -qw "$loadname" <<<"$CACHED_LOADS"; then svcs="$svcs sluice-cached"; fi
		# The order flips every round.
		[ $((run % 2)) -eq 0 ] && svcs=$(tr ' ' '\n' <<<"$svcs" | tac | tr '\n' ' ')
		for svc in $svcs; do
			measure "$svc" "$run" "$loadname" "$c" "$d"
		done
	done
done
if [ "$HOT" = 1 ]; then
	hot peer
	hot sluice "${hot_flags[@]}"
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
jq -c --arg batch "$batch" 'select(.batch == $batch)' "$OUT" >"$tmp/batch.jsonl"
if [ "$MATRIX" = 1 ]; then
	matrix "$tmp/batch.jsonl"
else
	summarize "$tmp/batch.jsonl"
fi
