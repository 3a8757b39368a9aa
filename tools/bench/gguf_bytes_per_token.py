#!/usr/bin/env python3
"""Weight bytes a llama.cpp GGUF (deepseek4, or a dense llama) reads per decoded token, counted with the
rule `dsv4 bench` uses for the safetensors checkpoint (src/engine/bench.cc): every
tensor once, except the token embedding and the hash-routing table (one row each) and
the routed experts (`blk.N.ffn_{gate,up,down}_exps`: top-k of the E experts). MTP
(`nextn`) tensors are not counted. Also prints the bytes by GGUF tensor type.

Needs llama.cpp's gguf-py on PYTHONPATH (llama.cpp/gguf-py) and numpy.
Usage: python tools/bench/gguf_bytes_per_token.py MODEL.gguf
"""
import collections
import re
import sys

from gguf import GGUFReader


def field_int(reader, key, default=None):
    if key not in reader.fields and default is not None:
        return default
    f = reader.fields[key]
    return int(f.parts[f.data[0]][0])


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    r = GGUFReader(sys.argv[1])
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    n_expert = field_int(r, f"{arch}.expert_count", 0)  # 0: a dense model
    top_k = field_int(r, f"{arch}.expert_used_count", 0)
    total = per_token = 0
    by_type = collections.Counter()
    for t in r.tensors:
        n = int(t.n_bytes)
        total += n
        by_type[t.tensor_type.name] += n
        if ".nextn." in t.name:
            continue
        if t.name == "token_embd.weight" or t.name.endswith(".ffn_gate_tid2eid.weight"):
            per_token += n // int(t.shape[-1])  # one row: ggml's ne[1] is the row count
        elif re.search(r"\.ffn_(gate|up|down|gate_up)_exps\.weight$", t.name):
            per_token += n // n_expert * top_k
        else:
            per_token += n
    print(f"file tensors: {total} bytes; experts {top_k} of {n_expert}")
    for name, n in by_type.most_common():
        print(f"  {name:6s} {n / 1e9:8.3f} GB")
    print(f"weight_bytes_per_token={per_token}")


if __name__ == "__main__":
    main()
