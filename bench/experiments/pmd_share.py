#!/usr/bin/env python3
"""How much of a cached file the kernel maps in 2 MiB pages, from N windows.

  bench/experiments/pmd_share.py [--windows N] FILE...

For each FILE: maps N windows of 16 MiB spread over it (2 MiB-aligned, at the
offsets base/page_cache.cc samples for N = 4), asks for 2 MiB pages
(MADV_HUGEPAGE), reads them in (MADV_POPULATE_READ, else a byte per 4 KiB) and
sums Rss and FilePmdMapped of those mappings from /proc/self/smaps. Prints the
share in 2 MiB pages. Reading in an uncached window reads it from disk (into
2 MiB pages where the kernel makes them): run it on a cached file. No root
needed (bench/experiments/folio_map.py, which needs root, samples a running dsv4
instead). Few windows can miss a split that many windows see: with 15% of a
file's 2 MiB blocks split (fragment_page_cache.py --share 0.15), 4 windows
can read nearly all of it in 2 MiB pages where 16 read the split.
"""
import argparse
import mmap
import os
import sys

WINDOW = 16 << 20
HUGE = 2 << 20
MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)  # Linux's values
MADV_POPULATE_READ = 22


def window_share(fd, offset):
    """(rss_kb, pmd_kb) of a fresh mapping of WINDOW bytes at offset."""
    m = mmap.mmap(fd, WINDOW, prot=mmap.PROT_READ, offset=offset)
    try:
        m.madvise(MADV_HUGEPAGE)
        try:
            m.madvise(MADV_POPULATE_READ)
        except OSError:  # kernels before 5.14
            for o in range(0, WINDOW, 4096):
                m[o]
        want = f"{offset:08x}"
        rss = pmd = None
        with open("/proc/self/smaps") as f:
            lines = f.read().split("\n")
        for i, line in enumerate(lines):
            fields = line.split()
            # The mapping's header: range, perms, file offset, dev, inode, path.
            if len(fields) >= 6 and fields[2] == want and os.path.samefile(fields[5], f"/proc/self/fd/{fd}"):
                for entry in lines[i + 1:]:
                    if entry.startswith("Rss:"):
                        rss = int(entry.split()[1])
                    elif entry.startswith("FilePmdMapped:"):
                        pmd = int(entry.split()[1])
                        break
                break
        if rss is None or pmd is None:
            sys.exit("pmd_share: the window's mapping is not in /proc/self/smaps "
                     "(FilePmdMapped needs Linux 5.4+)")
        return rss, pmd
    finally:
        m.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--windows", type=int, default=4, help="windows per file (default 4)")
    ap.add_argument("files", nargs="+", metavar="FILE")
    args = ap.parse_args()
    if args.windows < 1:
        sys.exit(f"pmd_share: --windows {args.windows}: at least 1")
    if not sys.platform.startswith("linux"):
        sys.exit("pmd_share: Linux only (/proc/self/smaps)")
    for path in args.files:
        size = os.path.getsize(path)
        if size < WINDOW:
            print(f"{path}: under 16 MiB, not sampled")
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            rss = pmd = 0
            n = args.windows
            for i in range(n):
                offset = (size - WINDOW) * (2 * i + 1) // (2 * n) // HUGE * HUGE
                r, p = window_share(fd, offset)
                rss, pmd = rss + r, pmd + p
        finally:
            os.close(fd)
        print(f"{path}: {pmd >> 10} of {rss >> 10} MiB sampled in 2 MiB pages "
              f"({pmd / max(rss, 1):.1%}, {n} windows)")


if __name__ == "__main__":
    main()
