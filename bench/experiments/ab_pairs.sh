#!/bin/bash
# Alternating `dsv4 bench` pairs of two builds on one model, then a summary.
#
#   bench/experiments/ab_pairs.sh N BUILD_A BUILD_B MODEL [PROMPT_LEN]
#
# N rounds of: BUILD_A, then BUILD_B, each `bench --threads 2 --gen 32
# --repeat 1` with its own bandwidth probe (the host's memory bandwidth
# changes from second to second). Prints one line per run, then
# bench/experiments/ab_pairs_summary.py's medians: the B/A tok/s ratio over all
# pairs and over the "fast pairs" (both probes above 70 GB/s and within 6%),
# and each build's decode efficiency in either state.
set -u
if [ $# -lt 4 ]; then
  echo "usage: $0 N BUILD_A BUILD_B MODEL [PROMPT_LEN]" >&2
  exit 2
fi
N=$1 A=$2 B=$3 M=$4 PL=${5:-128}
for exe in "$A" "$B"; do
  [ -x "$exe" ] || { echo "ab_pairs: '$exe' is not an executable (a dsv4 binary)" >&2; exit 2; }
done
out=$(mktemp)
for i in $(seq "$N"); do
  for exe in "$A" "$B"; do
    line=$("$exe" bench --model "$M" --threads 2 --prompt-len "$PL" --gen 32 --repeat 1 2>&1 | tail -1)
    echo "$i $exe $line" | tee -a "$out"
  done
done
python3 "$(dirname "$0")/ab_pairs_summary.py" "$out" "$A" "$B"
rm -f "$out"
