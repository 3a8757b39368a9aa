#!/usr/bin/env bash
# ds4_vs_llamacpp.sh: dsv4 against llama.cpp on the same DeepSeek-V4 model, same
# threads, CPU only, alternating the two programs ROUNDS times in one run.
#
#   tools/bench/ds4_vs_llamacpp.sh DSV4_BIN MODEL_DIR MODEL_GGUF LLAMA_BENCH \
#       [ROUNDS=3] [THREADS=2] [PROMPT=512] [GEN=64] [REPEAT=3]
#
# MODEL_DIR is the safetensors checkpoint (e.g. from `dsv4 synth-model`), MODEL_GGUF
# the same model converted by llama.cpp's convert_hf_to_gguf.py (deepseek4
# architecture), LLAMA_BENCH a built llama-bench. MODEL_DIR may instead be a
# .gguf file dsv4 loads (a llama GGUF: pass the same file twice, both engines
# then run one file, e.g. from tools/bench/synth_llama_gguf.py). Each round runs
#   llama-bench -m GGUF -p PROMPT -n GEN -t THREADS -r REPEAT -o csv
#   llama-bench -m GGUF -p 0 -n GEN -d PROMPT -t THREADS -r REPEAT -o csv
#   dsv4 bench --model DIR --prompt-len PROMPT --gen GEN --threads THREADS --repeat REPEAT
# (llama-bench reports the mean of its repeats, dsv4 the median), then prints
# every round and the medians over rounds. dsv4 bench decodes after its PROMPT
# tokens, so the decode ratio uses llama-bench's tgGEN at depth PROMPT (the
# second call); its tgGEN from an empty context is printed too. dsv4's built-in
# probe (1 GiB read, same threads) gives the bandwidth each round; llama.cpp's
# weight bytes per token come from tools/bench/gguf_bytes_per_token.py when
# GGUF_PY (llama.cpp's gguf-py directory) and PYTHON (with numpy) are set.
# DSV4_ARGS and LLAMA_ARGS (word-split) are added to every dsv4 bench and
# llama-bench call, e.g. DSV4_ARGS="--cache-type-k f16 --cache-type-v f16"
# for llama.cpp's default f16 KV cache (dsv4's default is f32), or
# LLAMA_ARGS for other llama-bench settings (its -ctk takes f16, q8_0, ...,
# not f32, in llama-cpp-python 0.3.36).
set -euo pipefail
read -r -a DSV4_EXTRA <<<"${DSV4_ARGS:-}"
read -r -a LLAMA_EXTRA <<<"${LLAMA_ARGS:-}"

if [[ $# -lt 4 ]]; then
  sed -n '2,28p' "$0"
  exit 2
fi
DSV4=$1 DIR=$2 GGUF=$3 LLAMA_BENCH=$4
ROUNDS=${5:-3} THREADS=${6:-2} PROMPT=${7:-512} GEN=${8:-64} REPEAT=${9:-3}
HERE=$(cd "$(dirname "$0")" && pwd)

for f in "$DSV4" "$LLAMA_BENCH"; do
  [[ -x $f ]] || { echo "ds4_vs_llamacpp: $f is not an executable" >&2; exit 1; }
done
if [[ $DIR == *.gguf ]]; then
  [[ -f $DIR ]] || { echo "ds4_vs_llamacpp: $DIR missing" >&2; exit 1; }
else
  [[ -f $DIR/config.json ]] || { echo "ds4_vs_llamacpp: $DIR/config.json missing (not a checkpoint dir?)" >&2; exit 1; }
fi
[[ -f $GGUF ]] || { echo "ds4_vs_llamacpp: $GGUF missing" >&2; exit 1; }

LLAMA_BPT=""
if [[ -n ${GGUF_PY:-} && -n ${PYTHON:-} ]]; then
  LLAMA_BPT=$(PYTHONPATH=$GGUF_PY "$PYTHON" "$HERE/gguf_bytes_per_token.py" "$GGUF" |
              sed -n 's/^weight_bytes_per_token=//p')
fi

echo "date: $(date -Is)  load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "threads $THREADS, prompt $PROMPT, gen $GEN, repeats $REPEAT, rounds $ROUNDS"
echo "dsv4 extra args: ${DSV4_ARGS:-none}; llama-bench extra args: ${LLAMA_ARGS:-none}"
declare -a L_PP L_TG L_TGD D_PP D_TG BW
D_BPT=""
for ((r = 1; r <= ROUNDS; ++r)); do
  csv=$("$LLAMA_BENCH" -m "$GGUF" -p "$PROMPT" -n "$GEN" -t "$THREADS" -r "$REPEAT" -o csv \
        "${LLAMA_EXTRA[@]}" 2>/dev/null)
  csv_d=$("$LLAMA_BENCH" -m "$GGUF" -p 0 -n "$GEN" -d "$PROMPT" -t "$THREADS" -r "$REPEAT" -o csv \
          "${LLAMA_EXTRA[@]}" 2>/dev/null | tail -n +2)
  # Columns by name from the header: n_prompt, n_gen, n_depth, avg_ts.
  read -r lpp ltg ltgd < <(awk -F'","|^"|"$' -v P="$PROMPT" -v G="$GEN" '
      NR == 1 { gsub(/"/, ""); n = split($0, h, ","); for (i = 1; i <= n; ++i) col[h[i]] = i + 1; next }
      $col["n_prompt"] == P && $col["n_gen"] == 0 && $col["n_depth"] == 0 { pp = $col["avg_ts"] }
      $col["n_prompt"] == 0 && $col["n_gen"] == G && $col["n_depth"] == 0 { tg = $col["avg_ts"] }
      $col["n_prompt"] == 0 && $col["n_gen"] == G && $col["n_depth"] == P { tgd = $col["avg_ts"] }
      END { print pp, tg, tgd }' <<<"$csv"$'\n'"$csv_d")
  last=$("$DSV4" bench --model "$DIR" --prompt-len "$PROMPT" --gen "$GEN" --threads "$THREADS" \
         --repeat "$REPEAT" "${DSV4_EXTRA[@]}" 2>/dev/null | tail -n 1)
  kv() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$last"; }
  dpp=$(kv prefill_tps) dtg=$(kv decode_tps) bw=$(kv bandwidth_gbs) D_BPT=$(kv weight_bytes_per_token)
  L_PP+=("$lpp") L_TG+=("$ltg") L_TGD+=("$ltgd") D_PP+=("$dpp") D_TG+=("$dtg") BW+=("$bw")
  printf 'round %d: llama.cpp pp%d %s tg%d %s tg%d@d%d %s | dsv4 prefill %s decode %s | bandwidth %s GB/s | load %s\n' \
    "$r" "$PROMPT" "$lpp" "$GEN" "$ltg" "$GEN" "$PROMPT" "$ltgd" "$dpp" "$dtg" "$bw" \
    "$(cut -d' ' -f1 /proc/loadavg)"
done

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
lpp=$(median "${L_PP[@]}") ltg=$(median "${L_TG[@]}") ltgd=$(median "${L_TGD[@]}") dpp=$(median "${D_PP[@]}") dtg=$(median "${D_TG[@]}")
bw=$(median "${BW[@]}")
echo "medians: llama.cpp prefill $lpp decode $ltg (at depth $PROMPT: $ltgd) | dsv4 prefill $dpp decode $dtg | bandwidth $bw GB/s"
awk -v lpp="$lpp" -v ltg="$ltgd" -v dpp="$dpp" -v dtg="$dtg" -v bw="$bw" -v dbpt="$D_BPT" -v lbpt="$LLAMA_BPT" 'BEGIN {
  printf "dsv4 / llama.cpp: prefill %.2f, decode %.2f (llama.cpp decode at the same depth)\n", dpp / lpp, dtg / ltg
  printf "dsv4: %.1f MB/token, %.2f GB/s of weights, %.1f%% of bandwidth\n", dbpt / 1e6, dtg * dbpt / 1e9, 100 * dtg * dbpt / 1e9 / bw
  if (lbpt != "") printf "llama.cpp: %.1f MB/token, %.2f GB/s of weights, %.1f%% of bandwidth\n", lbpt / 1e6, ltg * lbpt / 1e9, 100 * ltg * lbpt / 1e9 / bw
}'
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
