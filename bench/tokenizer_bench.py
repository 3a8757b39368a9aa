#!/usr/bin/env python3
"""Encode speed of dsv4's BpeTokenizer vs HF `tokenizers`, one thread each.

Not a test. Builds bench/tokenizer_bench.cc against an existing build tree,
runs both on the same text and prints MB/s (median of N) and whether the token
counts agree. `--text mixed` builds a CJK + code text from the repository: every
golden string of tests/data/tokenizer/v4_goldens.jsonl.gz with a non-ASCII
character, interleaved with the C++ sources of src/tokenizer/.

  python bench/tokenizer_bench.py --build-dir build/bpe \
      --tokenizer-json tests/data/tokenizer/deepseek_v4_tokenizer.json.gz \
      --text tests/data/text/tinyshakespeare.txt
Needs `tokenizers` (a venv outside the repo) for the HF side.
"""
import argparse
import gzip
import os
import subprocess
import tempfile
import time


def make_mixed_text(root):
    import glob
    import json
    cjk = []
    with gzip.open(os.path.join(root, "tests/data/tokenizer/v4_goldens.jsonl.gz"), "rt", encoding="utf-8") as f:
        for line in f:
            t = json.loads(line)["text"]
            if any(ord(ch) > 127 for ch in t):
                cjk.append(t)
    code = [open(p, encoding="utf-8").read() for p in sorted(glob.glob(os.path.join(root, "src/tokenizer/*.cc")))]
    parts = []
    for i, c in enumerate(code):
        parts.append("\n".join(cjk[i::len(code)]))
        parts.append(c)
    path = os.path.join(tempfile.mkdtemp(), "mixed.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--tokenizer-json", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if args.text == "mixed":
        args.text = make_mixed_text(root)
    exe = os.path.join(tempfile.mkdtemp(), "tokenizer_bench")
    b = args.build_dir
    subprocess.check_call(
        ["c++", "-O2", "-std=c++20", "-I", os.path.join(root, "src"), os.path.join(root, "bench/tokenizer_bench.cc"),
         os.path.join(b, "src/tokenizer/libdsv4_tokenizer.a"), os.path.join(b, "src/base/libdsv4_base.a"),
         "-lpcre2-8", "-lz", "-lfmt", "-lpthread", "-o", exe])
    out = subprocess.check_output([exe, args.tokenizer_json, args.text, str(args.repeats)], text=True).split()
    n_bytes, n_ours, t_ours = int(out[0]), int(out[1]), float(out[2])

    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    import tokenizers
    raw = open(args.tokenizer_json, "rb").read()
    if args.tokenizer_json.endswith(".gz"):
        raw = gzip.decompress(raw)
    tok = tokenizers.Tokenizer.from_str(raw.decode("utf-8"))
    text = open(args.text, encoding="utf-8", newline="").read()  # keep \r\n as is
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        ids = tok.encode(text, add_special_tokens=False).ids
        times.append(time.perf_counter() - t0)
    best = sorted(times)[len(times) // 2]
    mb = n_bytes / 1e6
    print(f"text: {args.text} ({n_bytes} bytes)")
    print(f"dsv4 BpeTokenizer : {mb / t_ours:7.2f} MB/s  ({n_ours} tokens)")
    print(f"HF tokenizers {tokenizers.__version__}: {mb / best:7.2f} MB/s  ({len(ids)} tokens)")
    print(f"ratio dsv4 / HF: {best / t_ours:.1f}x")
    print("token counts agree" if n_ours == len(ids) else "TOKEN COUNTS DIFFER")


if __name__ == "__main__":
    main()
