#!/usr/bin/env python3
"""Agent-loop replay for `dsv4 serve` (not a test): time to first token per turn with the
engine's prefix reuse off and on.

A conversation of --turns turns is replayed as an agent re-sends it: turn 1's prompt is a
--system-tokens system prompt plus --user-tokens; every later prompt is the previous prompt,
the previous answer (greedy, --answer-tokens) and --user-tokens more. Token ids go through
/v1/completions (a streaming request; TTFT is the time to its first content event), so the
model needs no tokenizer. Each --repeat runs both servers in turn (reuse off, then on: one
`dsv4 serve` each, started and stopped by this script, warmed up by one unrelated request;
the order alternates between repeats), and the table shows per turn the
median TTFT of each and their ratio, plus the prompt tokens the server reported as cached.
The answers of the two servers must be the same tokens (the reuse is exact); a difference
fails the run. Example:

    .venv/bin/python bench/agent_replay.py --bin build/release/dsv4 --model /tmp/synth-serve \
        --system-tokens 1024 --user-tokens 64 --answer-tokens 16 --turns 8 --repeat 3
"""
import argparse
import json
import random
import select
import statistics
import subprocess
import sys
import time

import httpx


def start(args, reuse):
    cmd = [args.bin, "serve", "--model", args.model, "--port", "0", "--threads",
           str(args.threads), "--max-sequences", "1", "--ctx-size", str(args.ctx_size)]
    if not reuse:
        cmd.append("--no-prefix-reuse")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if not ready:
            continue
        line = proc.stdout.readline()
        if "listening on http://" in line:
            url = line.split("listening on ")[1].split()[0]
            model = line.split('model "')[1].split('"')[0]
            return proc, url, model
    proc.kill()
    sys.exit("dsv4 serve did not start")


def turn(client, url, model, prompt, n):
    t0 = time.perf_counter()
    ttft, tokens, cached = None, [], None
    body = {"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}, "logprobs": 0}
    with client.stream("POST", url + "/v1/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            for c in event.get("choices", []):
                lp = (c.get("logprobs") or {}).get("tokens") or []
                if lp and ttft is None:
                    ttft = time.perf_counter() - t0
                tokens += [int(t.split(":")[1]) for t in lp]
            if event.get("usage"):
                cached = event["usage"].get("prompt_tokens_details", {}).get("cached_tokens")
    return ttft, tokens, cached


def replay(args, reuse, vocab):
    proc, url, model = start(args, reuse)
    rng = random.Random(args.seed)
    prompt = [0] + [rng.randrange(2, vocab) for _ in range(args.system_tokens - 1)]
    out = []
    try:
        with httpx.Client() as client:
            # Warm-up (weights paged in), unrelated to the conversation (no shared prefix).
            turn(client, url, model, [1] + [rng.randrange(2, vocab) for _ in range(64)], 4)
            rng = random.Random(args.seed)
            prompt = [0] + [rng.randrange(2, vocab) for _ in range(args.system_tokens - 1)]
            for _ in range(args.turns):
                prompt = prompt + [rng.randrange(2, vocab) for _ in range(args.user_tokens)]
                ttft, answer, cached = turn(client, url, model, prompt, args.answer_tokens)
                out.append((len(prompt), ttft, cached, answer))
                prompt = prompt + answer
    finally:
        proc.terminate()
        proc.wait()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--vocab", type=int, default=32768, help="ids are drawn below this")
    ap.add_argument("--system-tokens", type=int, default=1024)
    ap.add_argument("--user-tokens", type=int, default=64)
    ap.add_argument("--answer-tokens", type=int, default=16)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx-size", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    runs = {False: [], True: []}
    for k in range(args.repeat):
        for reuse in ((False, True) if k % 2 == 0 else (True, False)):  # alternate the order
            runs[reuse].append(replay(args, reuse, args.vocab))
    for a, b in zip(runs[False], runs[True]):
        if [t[3] for t in a] != [t[3] for t in b]:
            sys.exit("the answers differ with prefix reuse on: not exact")
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}, load average {open('/proc/loadavg').read().split()[0]}")
    print("| turn | prompt tokens | cached (on) | TTFT off ms | TTFT on ms | off / on |")
    print("|---:|---:|---:|---:|---:|---:|")
    for i in range(args.turns):
        off = statistics.median(r[i][1] for r in runs[False]) * 1e3
        on = statistics.median(r[i][1] for r in runs[True]) * 1e3
        print(f"| {i + 1} | {runs[True][0][i][0]} | {runs[True][0][i][2]} | {off:,.0f} | "
              f"{on:,.0f} | {off / on:.1f} |")


if __name__ == "__main__":
    main()
