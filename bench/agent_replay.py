#!/usr/bin/env python3
"""Agent-loop replay for `dsv4 serve` (not a test): time to first token per turn with the
prefix cache off, in RAM (a slot's state) and on disk after a restart (--kv-cache-dir).

A conversation of --turns turns is replayed as an agent re-sends it: turn 1's prompt is a
--system-tokens system prompt plus --user-tokens (the user's message or a tool's result);
every later prompt is the previous prompt, the previous answer (greedy, --answer-tokens) and
--user-tokens more. Token ids go through /v1/completions (a streaming request; TTFT is the
time to its first content event), so the model needs no tokenizer. Modes, each its own
`dsv4 serve` started and stopped by this script and warmed up by one unrelated request:
  off   --no-prefix-reuse: every turn prefills its whole prompt;
  ram   one server for the conversation: a turn reuses the slot the previous one left;
  disk  --kv-cache-dir (empty at the start of each repeat) and a new server for every
        turn: the only state a turn can reuse is the previous prompt's, saved on disk.
Each --repeat runs the modes in turn (the order rotates between repeats); the table shows
per turn the median TTFT of each mode, the prompt tokens reused, and the ratios. The
answers of all modes must be the same tokens (the reuse is exact); a difference fails the
run. Example:

    .venv/bin/python bench/agent_replay.py --bin build/release/dsv4 --model /tmp/synth-serve \
        --system-tokens 1024 --user-tokens 64 --answer-tokens 16 --turns 8 --repeat 3
"""
import argparse
import json
import random
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import httpx


MODES = ("off", "ram", "disk")


def start(args, mode, kv_dir=None):
    cmd = [args.bin, "serve", "--model", args.model, "--port", "0", "--threads",
           str(args.threads), "--max-sequences", "1", "--ctx-size", str(args.ctx_size)]
    if mode == "off":
        cmd.append("--no-prefix-reuse")
    if mode == "disk":
        cmd += ["--kv-cache-dir", kv_dir]
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


def replay(args, mode, vocab):
    kv_dir = tempfile.mkdtemp(prefix="dsv4-agent-kv-", dir=args.kv_parent) if mode == "disk" else None
    server = None
    out = []

    def restart():
        nonlocal server
        if server:
            server[0].terminate()
            server[0].wait()
        server = start(args, mode, kv_dir)
        # Warm-up (weights paged in), unrelated to the conversation (no shared prefix).
        warm = random.Random(args.seed + 1)
        turn(client, server[1], server[2], [1] + [warm.randrange(2, vocab) for _ in range(64)], 4)

    try:
        with httpx.Client() as client:
            rng = random.Random(args.seed)
            prompt = [0] + [rng.randrange(2, vocab) for _ in range(args.system_tokens - 1)]
            for i in range(args.turns):
                if server is None or mode == "disk":
                    restart()
                prompt = prompt + [rng.randrange(2, vocab) for _ in range(args.user_tokens)]
                ttft, answer, cached = turn(client, server[1], server[2], prompt,
                                            args.answer_tokens)
                out.append((len(prompt), ttft, cached, answer))
                prompt = prompt + answer
    finally:
        if server:
            server[0].terminate()
            server[0].wait()
        if kv_dir:
            shutil.rmtree(kv_dir, ignore_errors=True)
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
    ap.add_argument("--kv-parent", default=None, help="where the disk mode's directories go")
    args = ap.parse_args()
    runs = {m: [] for m in MODES}
    for k in range(args.repeat):
        for j in range(len(MODES)):  # rotate the order
            mode = MODES[(j + k) % len(MODES)]
            runs[mode].append(replay(args, mode, args.vocab))
    answers = [t[3] for t in runs["off"][0]]
    for mode in MODES:
        for r in runs[mode]:
            if [t[3] for t in r] != answers:
                sys.exit(f"the answers differ in mode {mode}: not exact")
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}, load average {open('/proc/loadavg').read().split()[0]}")
    print("| turn | prompt tokens | reused (ram / disk) | TTFT off ms | ram ms | disk ms "
          "| off / ram | off / disk |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i in range(args.turns):
        med = {m: statistics.median(r[i][1] for r in runs[m]) * 1e3 for m in MODES}
        print(f"| {i + 1} | {runs['ram'][0][i][0]:,} | {runs['ram'][0][i][2]:,} / "
              f"{runs['disk'][0][i][2]:,} | {med['off']:,.0f} | {med['ram']:,.0f} | "
              f"{med['disk']:,.0f} | {med['off'] / med['ram']:.1f} | "
              f"{med['off'] / med['disk']:.1f} |")


if __name__ == "__main__":
    main()
