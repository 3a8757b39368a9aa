#!/usr/bin/env bash
# Alternates `dsv4 bench` on two models, ROUNDS times each (A, B, A, B, ...),
# and prints each run's machine-readable line prefixed by the model's name:
# the two are measured in the same stretch of time on a shared machine.
#   bench/model_ab.sh DSV4 MODEL_A MODEL_B [ROUNDS] [extra dsv4 bench args...]
set -euo pipefail
dsv4=$1 a=$2 b=$3 rounds=${4:-3}
shift $(( $# < 4 ? $# : 4 ))
for ((i = 0; i < rounds; ++i)); do
  for m in "$a" "$b"; do
    line=$("$dsv4" bench --model "$m" --threads 2 --prompt-len 128 --gen 32 --repeat 1 "$@" |
      grep '^prefill_tps')
    echo "$(basename "$m") $line"
  done
done
