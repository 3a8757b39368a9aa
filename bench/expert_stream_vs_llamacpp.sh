#!/usr/bin/env bash
# A model larger than memory, dsv4 against llama.cpp (not a test): every run in a memory cgroup
# of LIMIT (cgroup v1 memory controller; needs root), the page cache dropped before each, on the
# same GGUF; ROUNDS alternations of dsv4 --ram-budget BUDGET (experts streamed, read-ahead on
# and off), dsv4 --ram-budget off (mmap) and llama-bench (mmap, no repacking), decoding GEN
# tokens after 16.
# Prints each run's decode rate, dsv4's expert-streaming line and the peak RSS. Example
# (docs/benchmarks.md):
#   bench/expert_stream_vs_llamacpp.sh build/release/dsv4 $L/build/bin/llama-bench q8.gguf 10G 8G 3 64
set -euo pipefail
DSV4=$1 LLAMA_BENCH=$2 GGUF=$3 LIMIT=$4 BUDGET=$5 ROUNDS=${6:-3} GEN=${7:-64}
CG=/sys/fs/cgroup/memory/dsv4bench
mkdir -p "$CG"
numfmt --from=iec "$LIMIT" > "$CG/memory.limit_in_bytes"
run() {
  local name=$1
  shift
  sync
  echo 3 > /proc/sys/vm/drop_caches
  echo "== $name"
  # shellcheck disable=SC2016  # $$ is the inner shell's
  sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CG" /usr/bin/time -f "peak RSS %M KiB" "$@" 2>&1 |
    grep -E "^decode:|expert streaming|peak RSS|tg$GEN" || true
}
D=(--prompt-len 16 --gen "$GEN" --repeat 1 --probe-mib 0 --threads 2)
for ((i = 0; i < ROUNDS; i++)); do
  run "dsv4 stream $BUDGET" "$DSV4" bench --model "$GGUF" --ram-budget "$BUDGET" "${D[@]}"
  run "dsv4 stream $BUDGET, read-ahead" "$DSV4" bench --model "$GGUF" --ram-budget "$BUDGET" \
    --expert-read-ahead "${D[@]}"
  run "dsv4 mmap" "$DSV4" bench --model "$GGUF" --ram-budget off "${D[@]}"
  # --repack 0: its default repacks MXFP4 experts into anonymous memory, which does not fit
  run "llama.cpp mmap" "$LLAMA_BENCH" -m "$GGUF" -p 0 -n "$GEN" -d 16 -r 1 -t 2 --repack 0 -lm mmap
done
