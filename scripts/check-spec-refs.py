#!/usr/bin/env python3
"""Checks that every spec section and item cited in the sources exists in docs/specs/.

Source comments cite the DeepSeek-V4 spec (docs/specs/deepseek-v4.md) as `spec §4.7`,
`§4.8–4.9` or `§11 item 3`, and the seed family's spec (docs/specs/seed-mechanisms.md) as
`§1.5` and by item id (`S-037`). Files under src/model/seed/ and the seed family's tests and
tools cite the seed spec; every other file cites the V4 spec. A citation resolves when the
spec has a heading with that number (`## 4.`, `### 4.7`) or, for an item id, a heading that
starts with it (`#### S-037 ·`). Citations of other documents (`Unicode §3.9`) are skipped.

Usage: scripts/check-spec-refs.py [ROOT]   (exit status 1 and one line per miss if any)
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
V4 = ROOT / "docs/specs/deepseek-v4.md"
SEED = ROOT / "docs/specs/seed-mechanisms.md"
SCAN = ["src", "tests", "tools", "bench"]
EXTS = {".h", ".cc", ".py", ".sh", ".md", ".txt", ".cmake"}
SECTION = re.compile(r"(\w+\s+)?§\s?(\d+(?:\.\d+)*)(?:\s?[–-]\s?§?(\d+(?:\.\d+)*))?")
ITEM = re.compile(r"\bS-\d{3}\b")
EXTERNAL = {"Unicode", "RFC", "C++", "POSIX"}  # words that name another document


def headings(path):
    numbers, items = set(), set()
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"#+\s+(\d+(?:\.\d+)*)\.?\s", line)
        if m:
            numbers.add(m.group(1))
        m = re.match(r"#+\s+(S-\d{3})\b", line)
        if m:
            items.add(m.group(1))
    return numbers, items


def is_seed(rel):
    s = rel.as_posix()
    return (s.startswith("src/model/seed/") or s.startswith("tests/data/seed/")
            or "/seed_" in s or s.startswith("tools/reference/") and "seed" in s)


def main():
    specs = {False: headings(V4), True: headings(SEED)}
    misses = 0
    for top in SCAN:
        for path in sorted((ROOT / top).rglob("*")):
            if not path.is_file() or path.suffix not in EXTS:
                continue
            rel = path.relative_to(ROOT)
            seed = is_seed(rel)
            numbers, items = specs[seed]
            name = SEED.name if seed else V4.name
            text = path.read_text(encoding="utf-8", errors="replace")
            for lineno, line in enumerate(text.splitlines(), 1):
                for m in SECTION.finditer(line):
                    if m.group(1) and m.group(1).strip() in EXTERNAL:
                        continue
                    for num in filter(None, (m.group(2), m.group(3))):
                        if num not in numbers:
                            print(f"{rel}:{lineno}: §{num} has no heading in docs/specs/{name}")
                            misses += 1
                if seed:
                    for m in ITEM.finditer(line):
                        if m.group(0) not in items:
                            print(f"{rel}:{lineno}: {m.group(0)} has no item in docs/specs/{name}")
                            misses += 1
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
