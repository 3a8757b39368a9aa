#!/usr/bin/env python3
"""Leaves a file cached in small pages, as reclaim does, to measure the refresh.

  tools/bench/fragment_page_cache.py FILE...

For each FILE: maps it, reads it in, pages out (MADV_PAGEOUT) 64 KiB of every
2 MiB, and reads it in again. A 2 MiB page-cache folio that loses part of
itself is split, so the file is then cached, and mapped by every later
process, in 4 KiB pages until its cache is dropped (base/page_cache.h;
docs/benchmarks.md, session 13). Linux 5.4+ (MADV_PAGEOUT). A dsv4 loading
the file next says that it refreshed it (unless DSV4_THP_REFRESH=0), and
FilePmdMapped in its /proc/PID/smaps_rollup shows the share in 2 MiB pages.
"""
import mmap
import os
import sys

HUGE = 2 << 20
MADV_PAGEOUT = getattr(mmap, "MADV_PAGEOUT", 21)  # Linux's value; older Pythons lack the name


def touch(m, size):
    total = 0
    for o in range(0, size, mmap.PAGESIZE):
        total += m[o]
    return total


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if not sys.platform.startswith("linux"):
        sys.exit("fragment_page_cache: Linux only (MADV_PAGEOUT)")
    for path in sys.argv[1:]:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            m = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
            touch(m, size)
            for o in range(HUGE // 2, size - (64 << 10), HUGE):
                m.madvise(MADV_PAGEOUT, o, 64 << 10)
            touch(m, size)
            m.close()
        print(f"{path}: 64 KiB of every 2 MiB paged out and read in again")


if __name__ == "__main__":
    main()
