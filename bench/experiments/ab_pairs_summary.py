#!/usr/bin/env python3
"""Summary of bench/experiments/ab_pairs.sh's runs.

Input lines: ROUND BUILD key=value ... (the bench's machine-readable last
line). Pairs are a round's two runs. "Fast pairs": both probes above 70 GB/s
and within 6% of each other. Efficiency = decode tok/s x weight bytes per
token / that run's probe.
"""
import statistics
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: ab_pairs_summary.py RUNS_FILE BUILD_A BUILD_B")
    path, a, b = sys.argv[1:]
    runs = {}
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        sys.exit(f"ab_pairs_summary: cannot read {path}: {e.strerror}")
    for n, line in enumerate(lines, 1):
        f = line.split()
        kv = dict(x.split("=", 1) for x in f[2:] if "=" in x)
        try:
            tps, bw = float(kv["decode_tps"]), float(kv["bandwidth_gbs"])
            wb = float(kv["weight_bytes_per_token"])
        except (KeyError, ValueError):
            sys.exit(f"ab_pairs_summary: {path}:{n}: not a bench result line "
                     "(hint: the bench failed; run it by hand to see why)")
        runs.setdefault(f[0], {})[f[1]] = (tps, bw, tps * wb / 1e9 / bw if bw > 0 else 0.0)
    pairs = [r for r in runs.values() if a in r and b in r]
    if not pairs:
        sys.exit("ab_pairs_summary: no complete pairs")
    fast = [r for r in pairs if min(r[a][1], r[b][1]) > 70
            and abs(r[a][1] - r[b][1]) / max(r[a][1], r[b][1]) < 0.06]
    med = statistics.median
    print(f"pairs {len(pairs)}: median tok/s ratio B/A {med(r[b][0] / r[a][0] for r in pairs):.4f}")
    if fast:
        print(f"fast pairs {len(fast)}: median ratio {med(r[b][0] / r[a][0] for r in fast):.4f}")
    for name, tag in ((a, "A"), (b, "B")):
        for label, lo, hi in (("slow (probe < 60)", 0, 60), ("fast (probe > 60)", 60, 1e9)):
            e = [r[name][2] for r in runs.values() if name in r and lo <= r[name][1] < hi]
            if e:
                print(f"{tag} {label}: {len(e)} runs, median efficiency {med(e):.4f}")


if __name__ == "__main__":
    main()
