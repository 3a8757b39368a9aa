#!/usr/bin/env python3
"""Where the caller's time between a decoded token's parallel regions goes.

Record a trace build's decode run under perf with the trace's clock, then
list the samples:

  DSV4_POOL_TRACE_FILE=/tmp/rg.csv perf record -k CLOCK_MONOTONIC -F 4999 -g \\
      -o /tmp/p.data -- build/trace/dsv4 bench --model M --threads 2 \\
      --prompt-len 128 --gen 300 --repeat 1 --probe-mib 0
  perf script -i /tmp/p.data -F tid,time,ip,sym --ns > /tmp/p.txt
  bench/experiments/gap_samples.py /tmp/rg.csv /tmp/p.txt --token-n 32768

The gaps are the intervals between consecutive regions of each token after
the first --skip tokens (a token ends at a region of n = --token-n). The
caller is the sampled thread with the lowest id. Printed: the caller's
samples in gaps, the samples per token (divide by the sampling rate for
seconds), the leaf functions that take them, and the gaps (n of the region
before → after) that hold them, largest first.
"""
import argparse
import bisect
import csv
import re
import sys
from collections import Counter

HEADER = re.compile(r"\s*(\d+)\s+(\d+\.\d+):")


def fail(msg, hint):
    sys.exit(f"gap_samples: {msg}; hint: {hint}")


def read_samples(path):
    """(tid, ns, leaf function) of each sample of `perf script -F tid,time,ip,sym`."""
    samples, cur = [], None
    with open(path, errors="replace") as f:
        for line in f:
            m = HEADER.match(line)
            if m:
                if cur:
                    samples.append(cur)
                cur = [int(m.group(1)), round(float(m.group(2)) * 1e9), None]
            elif cur is not None and cur[2] is None and line.strip():
                parts = line.strip().split(" ", 1)  # "ip symbol+off"
                cur[2] = re.sub(r"\+0x[0-9a-f]+$", "", parts[1]) if len(parts) > 1 else "?"
    if cur:
        samples.append(cur)
    return samples


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="CSV written by a DSV4_POOL_TRACE build")
    ap.add_argument("perf_script", help="`perf script -F tid,time,ip,sym --ns` output")
    ap.add_argument("--token-n", type=int, default=32768, help="n of the region ending a token")
    ap.add_argument("--skip", type=int, default=10, help="first tokens to leave out")
    ap.add_argument("--top", type=int, default=15, help="lines per table")
    args = ap.parse_args()
    try:
        with open(args.trace, newline="") as f:
            rows = [{k: int(r[k]) for k in ("n", "start_ns", "end_ns")}
                    for r in csv.DictReader(f)]
    except (OSError, KeyError, TypeError, ValueError) as e:
        fail(f"{args.trace}: not a pool trace ({e!r})",
             "write it with a -DDSV4_POOL_TRACE=ON build and DSV4_POOL_TRACE_FILE")
    ends = [i for i, r in enumerate(rows) if r["n"] == args.token_n][args.skip:]
    if len(ends) < 2:
        fail(f"fewer than {args.skip + 2} regions of n = {args.token_n} in {args.trace}",
             "check --token-n (the head's rows) and --skip")
    gaps = []  # (start, end, n before, n after)
    for a, b in zip(ends, ends[1:]):
        for j in range(a + 1, b + 1):
            gaps.append((rows[j - 1]["end_ns"], rows[j]["start_ns"], rows[j - 1]["n"], rows[j]["n"]))
    gaps.sort()
    starts = [g[0] for g in gaps]
    try:
        samples = read_samples(args.perf_script)
    except OSError as e:
        fail(f"{args.perf_script}: {e.strerror}", "give the output of `perf script -F tid,time,ip,sym --ns`")
    t0, t1 = gaps[0][0], gaps[-1][1]
    inside = [s for s in samples if t0 <= s[1] <= t1]
    if not inside:
        fail("no sample falls within the trace's tokens",
             "record with `perf record -k CLOCK_MONOTONIC` (the trace's clock)")
    caller = min(s[0] for s in inside)
    leaf, by_gap = Counter(), Counter()
    for tid, ns, fn in inside:
        if tid != caller:
            continue
        i = bisect.bisect_right(starts, ns) - 1
        if i >= 0 and gaps[i][0] <= ns < gaps[i][1]:
            leaf[fn or "?"] += 1
            by_gap[(gaps[i][2], gaps[i][3])] += 1
    total, tokens = sum(leaf.values()), len(ends) - 1
    print(f"caller (tid {caller}): {total} samples in gaps over {tokens} tokens, "
          f"{total / tokens:.2f} a token")
    for fn, k in leaf.most_common(args.top):
        print(f"  {k:7d} {100 * k / max(total, 1):5.1f}%  {fn}")
    print("by gap (n before -> after):")
    for (a, b), k in by_gap.most_common(args.top):
        print(f"  {k:7d} {100 * k / max(total, 1):5.1f}%  {a} -> {b}")


if __name__ == "__main__":
    main()
