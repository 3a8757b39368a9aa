#!/usr/bin/env bash
# ggml_types_vs_llamacpp.sh: dsv4's products with GGUF quant weights against
# llama.cpp's on the same shape, alternating the two programs ROUNDS times.
#
#   tools/bench/ggml_types_vs_llamacpp.sh MATMUL_BENCH TEST_BACKEND_OPS [ROUNDS=3] [TYPE...]
#
# The shape is llama.cpp's `test-backend-ops perf -o MUL_MAT` case for every
# type: W [4096, 14336] times 1 token (one-token product) and 512 tokens
# (prompt product), f32 activations in and out (each program quantises them as
# llama.cpp's CPU backend does). test-backend-ops runs the CPU backend on half
# the hardware threads, so dsv4's bench/matmul_bench runs with that many too.
# MATMUL_BENCH: `cmake --build build/release --target matmul_bench`, then
# build/release/tests/ops/matmul_bench; TEST_BACKEND_OPS: llama.cpp's, built
# with -DLLAMA_BUILD_TESTS=ON. Prints GFLOP/s per round and the medians' ratio.
set -euo pipefail
if [[ $# -lt 2 ]]; then
  sed -n '2,15p' "$0"
  exit 2
fi
BENCH=$1 TBO=$2
ROUNDS=${3:-3}
shift $(( $# >= 3 ? 3 : 2 ))
TYPES=("$@")
if [[ ${#TYPES[@]} -eq 0 ]]; then
  TYPES=(q8_0 q4_0 q4_1 q5_0 q5_1 q2_K q3_K q4_K q5_K q6_K iq2_xxs iq2_xs iq2_s iq3_xxs
         iq3_s iq1_s iq1_m iq4_nl iq4_xs mxfp4)
fi
THREADS=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
K=14336 N=4096

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# GFLOP/s of llama.cpp's MUL_MAT(type, n tokens).
llama() {
  "$TBO" perf -o MUL_MAT -b CPU -p "type_a=$1,type_b=f32,m=$N,n=$2,k=$K," 2>/dev/null |
    grep -o '[0-9.]* [MGT]FLOPS' | head -1 |
    awk '{print $2 == "TFLOPS" ? $1 * 1000 : $2 == "MFLOPS" ? $1 / 1000 : $1}'
}
# GFLOP/s of dsv4's one-token product (a matrix of about N rows) or prompt product.
dsv4_decode() {
  local mb
  mb=$(python3 -c "import math;print(math.ceil($N*$2/1e6))")
  DSV4_BENCH_PROBES=0 "$BENCH" "$THREADS" "$mb" 5 "$1" "$K" decode 2>/dev/null |
    awk '/^decode/ {gsub(/[\[\],]/, " "); n=$3; for (i=1;i<=NF;i++) if ($(i+1)=="ms") ms=$i;
         printf "%.2f\n", 2*n*'"$K"'/(ms*1e6)}'
}
dsv4_prefill() {
  DSV4_BENCH_PROBES=0 "$BENCH" "$THREADS" 0 3 "$1" "$K" "prefill:512:$N" 2>/dev/null |
    awk '/^prefill/ {for (i=1;i<=NF;i++) if ($(i+1)=="GFLOP/s") print $i}'
}
row_bytes() {  # bytes of one K-row of the type, from ggml's block table
  case $1 in
    q8_0) echo $((K / 32 * 34)) ;; q4_0|iq4_nl) echo $((K / 32 * 18)) ;; q4_1) echo $((K / 32 * 20)) ;;
    q5_0) echo $((K / 32 * 22)) ;; q5_1) echo $((K / 32 * 24)) ;; mxfp4) echo $((K / 32 * 17)) ;;
    q2_K) echo $((K / 256 * 84)) ;; q3_K|iq3_s) echo $((K / 256 * 110)) ;; q4_K) echo $((K / 256 * 144)) ;;
    q5_K) echo $((K / 256 * 176)) ;; q6_K) echo $((K / 256 * 210)) ;; iq2_xxs) echo $((K / 256 * 66)) ;;
    iq2_xs) echo $((K / 256 * 74)) ;; iq2_s) echo $((K / 256 * 82)) ;; iq3_xxs) echo $((K / 256 * 98)) ;;
    iq1_s) echo $((K / 256 * 50)) ;; iq1_m) echo $((K / 256 * 56)) ;; iq4_xs) echo $((K / 256 * 136)) ;;
    *) echo "unknown type $1" >&2; exit 1 ;;
  esac
}

echo "date: $(date -Is)  load average: $(cut -d' ' -f1-3 /proc/loadavg)  threads: $THREADS"
echo "| type | 1 token: dsv4 GFLOP/s | llama.cpp | ratio | 512 tokens: dsv4 GFLOP/s | llama.cpp | ratio |"
echo "|---|---|---|---|---|---|---|"
for t in "${TYPES[@]}"; do
  rb=$(row_bytes "$t")
  declare -a ld=() lp=() dd=() dp=()
  for ((r = 0; r < ROUNDS; ++r)); do
    ld+=("$(llama "$t" 1)"); dd+=("$(dsv4_decode "$t" "$rb")")
    lp+=("$(llama "$t" 512)"); dp+=("$(dsv4_prefill "$t")")
  done
  mdd=$(printf '%s\n' "${dd[@]}" | median); mld=$(printf '%s\n' "${ld[@]}" | median)
  mdp=$(printf '%s\n' "${dp[@]}" | median); mlp=$(printf '%s\n' "${lp[@]}" | median)
  echo "$t rounds: dsv4 1-token ${dd[*]}; llama.cpp ${ld[*]}; dsv4 512 ${dp[*]}; llama.cpp ${lp[*]}" >&2
  awk -v t="$t" -v a="$mdd" -v b="$mld" -v c="$mdp" -v d="$mlp" 'BEGIN {
    printf "| %s | %.1f | %.1f | **%.2f×** | %.1f | %.1f | **%.2f×** |\n", t, a, b, a/b, c, d, c/d }'
done
