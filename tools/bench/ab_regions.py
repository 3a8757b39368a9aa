#!/usr/bin/env python3
"""A decoded token's parallel regions with a RuntimeSwitch on and off.

Trace a decode run that alternates a switch token by token (a
-DDSV4_POOL_TRACE=ON build, see pool_regions.py), e.g.:

  DSV4_POOL_TRACE_FILE=/tmp/ab.csv build/trace/dsv4 bench --model M \\
      --threads 2 --prompt-len 128 --gen 300 --repeat 1 --probe-mib 0 \\
      --ab-switch DSV4_KEY_PREFETCH
  tools/bench/ab_regions.py /tmp/ab.csv --gen 300 --token-n 32768

A token is the regions after one region of n = --token-n (the head) up to
and including the next; the last --gen such tokens are the decode run's.
`dsv4 bench --ab-switch` runs token pair j (tokens 2j, 2j + 1) on then off,
or off then on when j is odd. For the pairs whose two tokens have the same
region count (the most common one), prints the median token time on and
off, then per kind of region (its n) the sum over a token of the medians of
its regions, on and off, and the same for the serial gaps before them,
largest first. Both tokens of a pair see the same host state.
"""
import argparse
import csv
import statistics
import sys
from collections import Counter, defaultdict


def fail(msg, hint):
    sys.exit(f"ab_regions: {msg}; hint: {hint}")


def switch_on(i):
    """Whether decode token i ran with the switch on (cmd_bench.cc's order)."""
    return (i % 2 == 0) == ((i // 2) % 2 == 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="CSV written by a DSV4_POOL_TRACE build")
    ap.add_argument("--gen", type=int, required=True, help="the decode run's --gen")
    ap.add_argument("--token-n", type=int, default=32768,
                    help="n of the region that ends a token (the head's rows)")
    ap.add_argument("--top", type=int, default=10, help="region kinds to print")
    args = ap.parse_args()
    if args.gen < 4:
        fail(f"--gen {args.gen}", "give the decode run's --gen (at least 4)")
    fields = ["n", "start_ns", "end_ns"]
    try:
        with open(args.trace, newline="") as f:
            rows = [{k: int(r[k]) for k in fields} for r in csv.DictReader(f)]
    except (OSError, KeyError, TypeError, ValueError) as e:
        fail(f"{args.trace}: not a pool trace ({e!r})",
             "write it with a -DDSV4_POOL_TRACE=ON build and DSV4_POOL_TRACE_FILE")
    heads = [i for i, r in enumerate(rows) if r["n"] == args.token_n]
    if len(heads) < args.gen + 1:
        fail(f"{len(heads)} regions of n = {args.token_n} in {args.trace}, fewer than --gen + 1",
             "check --token-n (the head's rows) and --gen, and that the run had --repeat 1")
    heads = heads[-(args.gen + 1):]
    toks = {i: rows[heads[i] + 1:heads[i + 1] + 1] for i in range(args.gen)}
    period = Counter(len(t) for t in toks.values()).most_common(1)[0][0]
    times, regions, gaps = [], defaultdict(list), defaultdict(list)
    for j in range(args.gen // 2):
        a, b = toks[2 * j], toks[2 * j + 1]
        if len(a) != period or len(b) != period:
            continue
        on, off = (a, b) if switch_on(2 * j) else (b, a)
        times.append(tuple((t[-1]["end_ns"] - t[0]["start_ns"]) / 1e3 for t in (on, off)))
        for k in range(period):
            key = (k, on[k]["n"])
            regions[key].append(tuple((t[k]["end_ns"] - t[k]["start_ns"]) / 1e3
                                      for t in (on, off)))
            if k > 0:
                gaps[key].append(tuple((t[k]["start_ns"] - t[k - 1]["end_ns"]) / 1e3
                                       for t in (on, off)))
    if not times:
        fail("no token pair with matching regions", "trace a run with --ab-switch and --repeat 1")
    med = statistics.median
    print(f"{len(times)} token pairs: token on {med(t[0] for t in times):.0f} us, "
          f"off {med(t[1] for t in times):.0f} us (medians)")
    for title, table in (("regions", regions), ("gaps before", gaps)):
        by_n = defaultdict(lambda: [0.0, 0.0])
        for (_, n), v in table.items():
            by_n[n][0] += med(x for x, _ in v)
            by_n[n][1] += med(y for _, y in v)
        print(f"{title} (n: on, off us a token)")
        for n, (on, off) in sorted(by_n.items(), key=lambda kv: -kv[1][1])[:args.top]:
            print(f"  {n:12d} {on:9.1f} {off:9.1f}")


if __name__ == "__main__":
    main()
