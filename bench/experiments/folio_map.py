#!/usr/bin/env python3
"""Which of a running dsv4's mapped weights sit in huge page-cache folios.

  sudo bench/experiments/folio_map.py PID MODEL_DIR [STEP_PAGES]

For every tensor of the safetensors shards in MODEL_DIR that process PID has
mapped, samples one 4 KiB page in STEP_PAGES (default 16) and asks the kernel
(/proc/PID/pagemap, /proc/kpageflags: root only) whether it is resident and
part of a transparent huge page (KPF_THP). Prints, per tensor name with its
numbers replaced by N (all layers' wq_b together), the sampled pages in huge
folios, in small ones, and not mapped. Small folios stream more slowly (a
TLB miss per 4 KiB; docs/performance.md).
"""
import collections
import json
import os
import re
import struct
import sys

KPF_THP = 22


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: folio_map.py PID MODEL_DIR [STEP_PAGES]")
    pid, model_dir = int(sys.argv[1]), os.path.realpath(sys.argv[2])
    step = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    try:
        maps = []
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                p = line.split()
                if len(p) >= 6 and p[5].startswith(model_dir) and p[5].endswith(".safetensors"):
                    lo, hi = (int(x, 16) for x in p[0].split("-"))
                    maps.append((lo, hi, int(p[2], 16), p[5]))
        pagemap = open(f"/proc/{pid}/pagemap", "rb")
        kflags = open("/proc/kpageflags", "rb")
    except (OSError, ValueError) as e:
        sys.exit(f"folio_map: {e}; hint: run as root, with the PID of a running `dsv4` "
                 "that has MODEL_DIR loaded")
    if not maps:
        sys.exit(f"folio_map: process {pid} maps no .safetensors file under {model_dir}")

    def state(va):
        pagemap.seek((va >> 12) * 8)
        entry = struct.unpack("<Q", pagemap.read(8))[0]
        if not (entry >> 63) & 1:
            return 2  # not present
        pfn = entry & ((1 << 55) - 1)
        if pfn == 0:
            sys.exit("folio_map: page frame numbers read as 0; hint: run as root")
        kflags.seek(pfn * 8)
        return 0 if (struct.unpack("<Q", kflags.read(8))[0] >> KPF_THP) & 1 else 1

    counts = collections.defaultdict(lambda: [0, 0, 0])
    for lo, hi, file_off, path in maps:
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        base = 8 + n
        for name, t in header.items():
            if name == "__metadata__":
                continue
            begin, end = (base + o for o in t["data_offsets"])
            kind = re.sub(r"\d+", "N", name)
            first = (max(begin, file_off) + 4095) // 4096 * 4096
            for off in range(first, end, 4096 * step):
                va = lo + (off - file_off)
                if va >= hi:
                    break
                counts[kind][state(va)] += 1
    print(f"{'tensor':56s} {'huge':>8s} {'small':>8s} {'absent':>8s}")
    for kind, c in sorted(counts.items(), key=lambda kv: -sum(kv[1])):
        print(f"{kind:56s} {c[0]:8d} {c[1]:8d} {c[2]:8d}")
    tot = [sum(c[i] for c in counts.values()) for i in range(3)]
    print(f"{'all':56s} {tot[0]:8d} {tot[1]:8d} {tot[2]:8d}")


if __name__ == "__main__":
    main()
