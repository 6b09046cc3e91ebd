#!/usr/bin/env bash
# Prints a Markdown table of the medians of bench/run-memory.sh's JSON lines
# ($1, default bench/out/memory.jsonl): one row per configuration, the median
# of its runs for each column (each column's median on its own).
set -euo pipefail
in=${1:-bench/out/memory.jsonl}
jq -rs '
  def median: sort | if length % 2 == 1 then .[length/2|floor] else (.[length/2-1] + .[length/2]) / 2 end;
  group_by([.concurrency, .descriptors, .keys, .over_share])
  | (["callers", "descriptors", "keys", "over-limit share", "runs", "decisions/s", "descriptors/s", "OVER_LIMIT %", "errors %", "p50 µs", "p90 µs", "p99 µs", "p99.9 µs", "max µs", "load avg"] | "| " + join(" | ") + " |"),
    ("|" + ([range(15) | "---"] | join("|")) + "|"),
    (.[] | [
      .[0].concurrency, .[0].descriptors, .[0].keys, .[0].over_share, length,
      (map(.decisions_per_s) | median | floor),
      (map(.descriptors_per_s) | median | floor),
      (map(100 * .over_limit / .requests) | median | . * 10 | round / 10),
      (map(100 * .error_total / .requests) | median | . * 100 | round / 100),
      (map(.latency_us.p50) | median | round),
      (map(.latency_us.p90) | median | round),
      (map(.latency_us.p99) | median | round),
      (map(.latency_us.p99_9) | median | round),
      (map(.latency_us.max) | median | round),
      (map(.loadavg_before) | median)
    ] | map(tostring) | "| " + join(" | ") + " |")
' "$in"
