#!/usr/bin/env python3
"""A decoded token's time outside its weight products, from ThreadPool traces.

  bench/experiments/trace_rest.py TRACE.csv [TRACE.csv ...]

For DeepSeek-V4 traces written as tools/bench/pool_regions.py describes. A
token runs from one head region (n = 32768, the synthetic model's vocabulary)
to the next; its first 20 are dropped, and those over 1.3x the median token
(host preemption) left out. "Rest" is a token's time minus its product
regions: those of n >= 1e6 (LinearMany's cost units) and the single products
of n 8192, 2048, 32768, 127 and 24 (wq_b, wo_b, the head, the MoE gate, the
mHC mixers). What remains is attention, norms, RoPE and the serial steps
between regions: CPU time, which compares across the host's memory states.
Printed per file: kept tokens, mean token time, mean and median rest (us).
"""
import csv
import statistics
import sys

PRODUCT_N = {8192, 2048, 32768, 127, 24}


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: trace_rest.py TRACE.csv [TRACE.csv ...]")
    for path in sys.argv[1:]:
        try:
            with open(path, newline="") as f:
                rows = [{k: int(v) for k, v in r.items()} for r in csv.DictReader(f)]
            idx = [i for i, r in enumerate(rows) if r["n"] == 32768]
        except (OSError, KeyError, TypeError, ValueError, AttributeError) as e:
            sys.exit(f"trace_rest: {path}: not a pool trace ({e!r}); hint: write it with a "
                     "-DDSV4_POOL_TRACE=ON build and DSV4_POOL_TRACE_FILE")
        tok, rest = [], []
        for a, b in zip(idx, idx[1:]):
            t = (rows[b]["end_ns"] - rows[a]["end_ns"]) / 1e3
            p = sum((r["end_ns"] - r["start_ns"]) / 1e3 for r in rows[a + 1:b + 1]
                    if r["n"] >= 1000000 or r["n"] in PRODUCT_N)
            tok.append(t)
            rest.append(t - p)
        tok, rest = tok[20:], rest[20:]
        if not tok:
            sys.exit(f"trace_rest: {path}: fewer than 22 tokens (hint: --gen 96 or more)")
        m = statistics.median(tok)
        keep = [i for i, t in enumerate(tok) if t < 1.3 * m]
        print(f"{path}: tokens {len(keep)}/{len(tok)} mean token "
              f"{statistics.mean(tok[i] for i in keep):8.1f} mean rest "
              f"{statistics.mean(rest[i] for i in keep):7.1f} median rest "
              f"{statistics.median(rest):7.1f}")


if __name__ == "__main__":
    main()
