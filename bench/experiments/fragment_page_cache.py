#!/usr/bin/env python3
"""Leaves a file cached in small pages, as reclaim does, to measure the refresh.

  bench/experiments/fragment_page_cache.py [--share F] FILE...

For each FILE: maps it, reads it in, pages out (MADV_PAGEOUT) 64 KiB of every
2 MiB (with --share F, of a random share F of them: reclaim leaves a file
partly split), and reads it in again. A 2 MiB page-cache folio that loses part of
itself is split, so the file is then cached, and mapped by every later
process, in 4 KiB pages until its cache is dropped (base/page_cache.h;
docs/performance.md). Linux 5.4+ (MADV_PAGEOUT). A dsv4 loading
the file next says that it refreshed it (unless DSV4_THP_REFRESH=0), and
FilePmdMapped in its /proc/PID/smaps_rollup shows the share in 2 MiB pages.
"""
import argparse
import mmap
import os
import random
import sys

HUGE = 2 << 20
MADV_PAGEOUT = getattr(mmap, "MADV_PAGEOUT", 21)  # Linux's value; older Pythons lack the name


def touch(m, size):
    total = 0
    for o in range(0, size, mmap.PAGESIZE):
        total += m[o]
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--share", type=float, default=1.0,
                    help="share of the 2 MiB blocks to split (default 1: all)")
    ap.add_argument("files", nargs="+", metavar="FILE")
    args = ap.parse_args()
    if not 0.0 <= args.share <= 1.0:
        sys.exit(f"fragment_page_cache: --share {args.share} is not within [0, 1]")
    if not sys.platform.startswith("linux"):
        sys.exit("fragment_page_cache: Linux only (MADV_PAGEOUT)")
    rng = random.Random(1)
    for path in args.files:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            m = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
            touch(m, size)
            for o in range(HUGE // 2, size - (64 << 10), HUGE):
                if rng.random() < args.share:
                    m.madvise(MADV_PAGEOUT, o, 64 << 10)
            touch(m, size)
            m.close()
        print(f"{path}: 64 KiB of {args.share:.0%} of the 2 MiB blocks paged out and read in again")


if __name__ == "__main__":
    main()
