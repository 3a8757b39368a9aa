#!/bin/bash
# Waits for the host's fast memory state (docs/benchmarks.md: the shared VM
# switches between a fast and a slow state within seconds).
#
#   tools/bench/wait_fast.sh MATMUL_BENCH [MAX_SECONDS=600] [GBS=70]
#
# Every 8 s runs `MATMUL_BENCH 2 16 1 fp8_e4m3 2048 decode` (a build's
# tests/ops/matmul_bench) and reads the 2-thread bandwidth probe on its first
# line; exits 0 printing "fast HH:MM:SS bw=…" once it reads above GBS GB/s,
# 1 after MAX_SECONDS. The docs' "after waitfast" runs started on its exit.
set -u
if [ $# -lt 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 MATMUL_BENCH [MAX_SECONDS] [GBS]  (MATMUL_BENCH: an executable matmul_bench)" >&2
  exit 2
fi
B=$1 end=$((SECONDS + ${2:-600})) want=${3:-70}
while [ $SECONDS -lt "$end" ]; do
  bw=$("$B" 2 16 1 fp8_e4m3 2048 decode | head -1 | sed -n 's/.*read bandwidth \([0-9.]*\).*/\1/p')
  if [ -n "$bw" ] && awk "BEGIN{exit !($bw > $want)}"; then
    echo "fast $(date +%T) bw=$bw"
    exit 0
  fi
  sleep 8
done
echo "wait_fast: no probe above $want GB/s in ${2:-600} s" >&2
exit 1
