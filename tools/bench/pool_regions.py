#!/usr/bin/env python3
"""A decoded token's parallel regions, from a ThreadPool trace.

Build with the trace and run a decode-heavy bench, e.g.:

  cmake -S . -B build/trace -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DDSV4_POOL_TRACE=ON -DDSV4_BUILD_TESTS=OFF
  ninja -C build/trace dsv4
  DSV4_POOL_TRACE_FILE=/tmp/regions.csv build/trace/dsv4 bench --model M \
        --threads 2 --prompt-len 16 --gen 150 --repeat 1 --probe-mib 0
  tools/bench/pool_regions.py /tmp/regions.csv --token-n 32768 \
        --bytes 8192:8.4e6 --bytes 306184192:17.6e6

Every ParallelFor that used more than one thread is one CSV line (n, and the
steady-clock ns of its start, the caller's chunk end, its end, the workers'
first start and last end). A token is the regions from one region of n =
--token-n (the head: its row count, the vocabulary) to the next; the tokens
whose region count is the most common one are kept, the first --skip dropped.
Printed, as medians over those tokens: the token time, the time in regions
and between them (the caller's serial steps), half the summed |caller -
worker| end difference, then per region kind (its n) the median duration and,
given --bytes N:BYTES, the GB/s that makes; given --gaps K, the K longest
serial steps by their place in the token. With --by-next a kind is the pair
(n, n of the region after it), printed "n>next": regions of equal n that
feed different steps (wq_b and wo_a have the same row count) then part.
"""
import argparse
import csv
import statistics
import sys
from collections import Counter, defaultdict


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="CSV written by a DSV4_POOL_TRACE build")
    ap.add_argument("--token-n", type=int, required=True,
                    help="n of the region that ends a token (the head's rows)")
    ap.add_argument("--skip", type=int, default=20, help="first tokens to drop")
    ap.add_argument("--bytes", action="append", default=[], metavar="N:BYTES",
                    help="bytes a region of this n reads (repeatable)")
    ap.add_argument("--gaps", type=int, default=0, metavar="K",
                    help="also print the K longest serial steps (median gap before a region "
                         "index, with the n of the regions around it)")
    ap.add_argument("--by-next", action="store_true",
                    help="key the region kinds by their n and the next region's n")
    args = ap.parse_args()
    try:
        size = {int(k): float(v) for k, v in (s.split(":") for s in args.bytes)}
    except ValueError:
        sys.exit(f"pool_regions: --bytes takes N:BYTES, got {args.bytes}")

    fields = ["n", "start_ns", "caller_end_ns", "end_ns", "workers_start_ns", "workers_end_ns"]
    try:
        with open(args.trace, newline="") as f:
            rows = [{k: int(r[k]) for k in fields} for r in csv.DictReader(f)]
    except (OSError, KeyError, TypeError, ValueError) as e:
        sys.exit(f"pool_regions: {args.trace}: not a pool trace ({e!r}); "
                 "hint: write it with a -DDSV4_POOL_TRACE=ON build and DSV4_POOL_TRACE_FILE")
    ends = [i for i, r in enumerate(rows) if r["n"] == args.token_n]
    spans = [(a + 1, b + 1) for a, b in zip(ends, ends[1:])]
    if not spans:
        sys.exit(f"pool_regions: fewer than two regions of n = {args.token_n} in {args.trace}")
    period = Counter(b - a for a, b in spans).most_common(1)[0][0]
    tokens = [s for s in spans if s[1] - s[0] == period][args.skip:]
    if not tokens:
        sys.exit(f"pool_regions: no token left after skipping {args.skip}")

    us = lambda ns: ns / 1e3
    tok, in_regions, gaps, half_imb = [], [], [], []
    per_index = defaultdict(list)  # region index within the token -> durations
    gap_index = defaultdict(list)  # region index within the token -> the gap before it
    for a, b in tokens:
        tok.append(us(rows[b - 1]["end_ns"] - rows[a - 1]["end_ns"]))
        d_sum = g_sum = imb = 0.0
        for i in range(a, b):
            r = rows[i]
            d = us(r["end_ns"] - r["start_ns"])
            d_sum += d
            g = us(r["start_ns"] - rows[i - 1]["end_ns"])
            g_sum += g
            gap_index[i - a].append(g)
            imb += abs(us(r["caller_end_ns"] - r["workers_end_ns"])) / 2
            per_index[i - a].append(d)
        in_regions.append(d_sum)
        gaps.append(g_sum)
        half_imb.append(imb)
    med = statistics.median
    print(f"{len(tokens)} tokens of {period} regions: token {med(tok):.0f} us, in regions "
          f"{med(in_regions):.0f}, between regions {med(gaps):.0f}, half |caller - worker| "
          f"{med(half_imb):.0f}")

    kinds = defaultdict(list)  # kind -> median durations of its regions in the token
    first = tokens[0][0]
    for i in range(period):
        n = rows[first + i]["n"]
        # The region after a token's last is the next token's first.
        kind = (n, rows[first + (i + 1) % period]["n"]) if args.by_next else (n,)
        kinds[kind].append(med(per_index[i]))
    print(("n>next" if args.by_next else "n") + ", regions per token, median us each" +
          (", GB/s" if size else ""))
    for kind, ds in sorted(kinds.items(), key=lambda kv: -sum(kv[1])):
        name = ">".join(str(k) for k in kind)
        line = f"  {name:>21} x{len(ds):3d} {med(ds):9.1f} us"
        if kind[0] in size:
            line += f"  {size[kind[0]] / med(ds) / 1e3:6.1f} GB/s"
        print(line)
    if args.gaps > 0:
        print(f"the {args.gaps} longest serial steps: region index, n before -> n after, median us")
        gaps_by = sorted(((med(v), i) for i, v in gap_index.items()), reverse=True)
        for g, i in gaps_by[:args.gaps]:
            print(f"  {i:4d}  {rows[first + i - 1]['n']:>10} -> {rows[first + i]['n']:<10} {g:8.1f}")


if __name__ == "__main__":
    main()
