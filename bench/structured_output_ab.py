#!/usr/bin/env python3
"""A/B benchmark of structured output (not a test): tokens/s of one
`dsv4 serve` with and without a JSON schema, requests alternating B, A, B, A
on the same server, reporting the median of --repeat runs of each and the
ratio B / A.

  B: a chat completion of up to --max-tokens tokens with response_format
     json_schema (one long string field)
  A: the same without it

Tokens/s is completion tokens / the request's wall time. Each A asks for as
many tokens as the B before it made (the random model closes B's string after
a hundred tokens or so), so both carry the same per-request overhead.

Scenarios (--model): the embedded stories260K (default; a random-weight
model: its tokens are often refused, so masks are computed), or
`--echo TOKENIZER`: the scripted echo model over the DeepSeek-V4 vocabulary
(129k tokens, no model compute: the constraint's own cost), answering either
with JSON that fits the schema (--echo-follows: the sampled token is checked
and accepted, no mask) or with text that does not (a mask for every token).

    .venv/bin/python bench/structured_output_ab.py --bin build/release/dsv4 --repeat 7
"""
import argparse
import json
import pathlib
import select
import statistics
import subprocess
import time

import httpx

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCHEMA = {"type": "object", "properties": {"story": {"type": "string", "maxLength": 100000}},
          "required": ["story"], "additionalProperties": False}


def start(args):
    cmd = [args.bin, "serve", "--host", "127.0.0.1", "--port", "0", "--max-sequences", "1"]
    if args.echo:
        cmd += ["--test-echo-model", "--tokenizer", args.echo, "--ctx-size", "4096"]
    elif args.model:
        cmd += ["--model", args.model]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if "listening on http://127.0.0.1:" in line:
                port = int(line.split("127.0.0.1:")[1].split()[0])
                return proc, f"http://127.0.0.1:{port}"
    proc.kill()
    raise SystemExit("dsv4 serve did not start")


def run(url, model, args, constrained, max_tokens):
    if args.echo and args.echo_follows:
        content = "REPLY " + json.dumps({"story": "once upon a time " * 400})
    else:
        content = "Once upon a time"
    body = {"model": model, "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "temperature": 0.8, "seed": 1}
    if constrained:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "story", "schema": SCHEMA}}
    t0 = time.perf_counter()
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=600)
    dt = time.perf_counter() - t0
    r.raise_for_status()
    tokens = r.json()["usage"]["completion_tokens"]
    return tokens / dt, tokens


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=str(ROOT / "build/release/dsv4"))
    p.add_argument("--model", default=None)
    p.add_argument("--echo", default=None, help="tokenizer for --test-echo-model")
    p.add_argument("--echo-follows", action="store_true")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args()
    proc, url = start(args)
    try:
        model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        run(url, model, args, True, args.max_tokens)  # warm-up: the trie, the schema, masks
        a, b = [], []
        for _ in range(args.repeat):
            b.append(run(url, model, args, True, args.max_tokens))
            # A makes as many tokens as B did (a random model may close B's
            # JSON early), so both carry the same per-request overhead.
            a.append(run(url, model, args, False, b[-1][1]))
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    ma = statistics.median(x for x, _ in a)
    mb = statistics.median(x for x, _ in b)
    print(f"model {model}; {args.repeat} x A/B alternating; max_tokens {args.max_tokens}")
    print(f"A plain       : median {ma:10.1f} tok/s  (tokens {[n for _, n in a]})")
    print(f"B json_schema : median {mb:10.1f} tok/s  (tokens {[n for _, n in b]})")
    print(f"B / A = {mb / ma:.3f}")


if __name__ == "__main__":
    main()
