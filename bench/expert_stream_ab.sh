#!/usr/bin/env bash
# Expert streaming, two builds or two settings alternated (not a test): `dsv4 bench
# --ram-budget BUDGET` of binary A (with $A_ARGS), then B (with $B_ARGS), ROUNDS times, the page
# cache dropped before every run (needs root), on a model larger than RAM. Prints each run's
# decode line and expert-streaming line; compare the medians. Examples (docs/benchmarks.md):
#   bench/expert_stream_ab.sh /tmp/a/dsv4 build/release/dsv4 /tmp/synth40g 16G 3 192
#   B_ARGS=--expert-read-ahead bench/expert_stream_ab.sh build/release/dsv4 \
#       build/release/dsv4 /tmp/synth40g 16G 3 192
set -euo pipefail
A=$1 B=$2 MODEL=$3 BUDGET=$4 ROUNDS=${5:-3} GEN=${6:-192}
run() {
  sync
  echo 3 > /proc/sys/vm/drop_caches
  echo "== $1"
  # shellcheck disable=SC2086  # the extra arguments split on spaces
  "$2" bench --model "$MODEL" --ram-budget "$BUDGET" --prompt-len 16 --gen "$GEN" --repeat 1 \
    --probe-mib 0 --threads 2 $3 2>&1 | grep -E "^decode:|expert streaming"
}
for ((i = 0; i < ROUNDS; i++)); do
  run A "$A" "${A_ARGS:-}"
  run B "$B" "${B_ARGS:-}"
done
