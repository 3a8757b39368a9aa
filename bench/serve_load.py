#!/usr/bin/env python3
"""Load benchmark for `dsv4 serve` (not a test).

For each N in --clients, N concurrent clients stream completions from one
server for --duration seconds (each client loops: one streaming request of
--max-tokens tokens, then the next; requests still running at the deadline
are finished and counted). Reports aggregate generated tokens/s, and p50/p99
time to first token (TTFT) and inter-token latency (ITL). With --repeat K
every level runs K times (levels interleaved: 1, 4, ..., then again) and the
table shows the median of each figure over the K runs, the ratio of the median
tokens/s to N = 1's, and every run's tokens/s; the date and the load average
(before and after) are printed with it.

By default it starts its own server (`dsv4 serve --port 0`, the embedded
stories260K unless --model) with --max-sequences = the largest N; pass --url to
measure a running server instead. Clients use one asyncio loop (httpx), so
client overhead stays small next to the server's. Example:

    .venv/bin/python bench/serve_load.py --bin build/release/dsv4 \
        --clients 1,4,16,64 --duration 10 --max-tokens 128
"""
import argparse
import asyncio
import json
import os
import pathlib
import select
import signal
import statistics
import subprocess
import sys
import time

import httpx

ROOT = pathlib.Path(__file__).resolve().parents[1]


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))
    return values[k]


def start_server(args, slots):
    cmd = [args.bin, "serve", "--host", "127.0.0.1", "--port", "0", "--max-sequences",
           str(slots), "--max-queue", str(4 * slots)]
    if args.model:
        cmd += ["--model", args.model]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if "listening on http://127.0.0.1:" in line:
                port = int(line.split("127.0.0.1:")[1].split()[0])
                model = line.split('model "')[1].split('"')[0]
                return proc, f"http://127.0.0.1:{port}", model
        if proc.poll() is not None:
            break
    proc.kill()
    sys.exit("serve_load: the server did not start")


async def client_loop(http, url, model, args, deadline, stats):
    body = {"model": model, "prompt": args.prompt, "max_tokens": args.max_tokens,
            "temperature": args.temperature, "stream": True,
            "stream_options": {"include_usage": True}}
    while time.monotonic() < deadline:
        try:
            await one_request(http, url, body, stats)
        except httpx.HTTPError as e:
            stats["errors"] += 1
            kind = type(e).__name__
            stats["error_kinds"][kind] = stats["error_kinds"].get(kind, 0) + 1


async def one_request(http, url, body, stats):
    """One streaming request; records its TTFT, inter-token gaps and tokens."""
    t0 = time.monotonic()
    last = None
    async with http.stream("POST", url + "/v1/completions", json=body) as r:
        if r.status_code != 200:
            stats["errors"] += 1
            kind = f"HTTP {r.status_code}"
            stats["error_kinds"][kind] = stats["error_kinds"].get(kind, 0) + 1
            await r.aread()
            await asyncio.sleep(0.05)
            return
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                stats["tokens"] += chunk["usage"]["completion_tokens"]
                continue
            if not chunk["choices"] or not chunk["choices"][0]["text"]:
                continue
            now = time.monotonic()
            if last is None:
                stats["ttft"].append(now - t0)
            else:
                stats["itl"].append(now - last)
            last = now
    stats["requests"] += 1


async def run_level(url, model, n, args):
    stats = {"tokens": 0, "requests": 0, "errors": 0, "error_kinds": {}, "ttft": [], "itl": []}
    load0 = os.getloadavg()[0]
    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        start = time.monotonic()
        deadline = start + args.duration
        await asyncio.gather(*(client_loop(http, url, model, args, deadline, stats)
                               for _ in range(n)))
        elapsed = time.monotonic() - start
    return {
        "clients": n,
        "load_before": round(load0, 2),
        "seconds": round(elapsed, 2),
        "requests": stats["requests"],
        "errors": stats["errors"],
        "error_kinds": stats["error_kinds"],
        "tokens": stats["tokens"],
        "tokens_per_s": round(stats["tokens"] / elapsed, 1),
        "ttft_p50_ms": round(1000 * percentile(stats["ttft"], 50), 2),
        "ttft_p99_ms": round(1000 * percentile(stats["ttft"], 99), 2),
        "itl_p50_ms": round(1000 * percentile(stats["itl"], 50), 3),
        "itl_p99_ms": round(1000 * percentile(stats["itl"], 99), 3),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=os.environ.get("DSV4_BIN", str(ROOT / "build/release/dsv4")))
    p.add_argument("--model", default="", help="model path (default: the embedded stories260K)")
    p.add_argument("--url", default="", help="use a running server instead of starting one")
    p.add_argument("--clients", default="1,4,16,64")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per level")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--prompt", default="Once upon a time")
    p.add_argument("--threads", type=int, default=0, help="server --threads")
    p.add_argument("--repeat", type=int, default=1, help="runs per level (medians reported)")
    args = p.parse_args()
    levels = [int(x) for x in args.clients.split(",")]

    proc = None
    if args.url:
        url = args.url.rstrip("/")
        model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
    else:
        proc, url, model = start_server(args, max(levels))
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load_start = os.getloadavg()
    runs = {n: [] for n in levels}
    try:
        for _ in range(args.repeat):
            for n in levels:
                runs[n].append(asyncio.run(run_level(url, model, n, args)))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    load_end = os.getloadavg()
    keys = ["requests", "errors", "tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms",
            "itl_p99_ms"]
    med = {n: {k: statistics.median(r[k] for r in runs[n]) for k in keys} for n in levels}
    base = med[levels[0]]["tokens_per_s"] or 1.0
    print(f"{started}; model {model}, max_tokens {args.max_tokens}, temperature "
          f"{args.temperature}, {args.duration:g} s per level, {args.repeat} run(s) per level"
          f" (medians); load average {load_start[0]:.2f} {load_start[1]:.2f} "
          f"{load_start[2]:.2f} before, {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}"
          f" after")
    print("| clients | requests | errors | tokens/s | x single | TTFT p50 ms | TTFT p99 ms "
          "| ITL p50 ms | ITL p99 ms | runs (tokens/s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for n in levels:
        m = med[n]
        each = " / ".join(f"{r['tokens_per_s']:g}" for r in runs[n])
        print(f"| {n} | {m['requests']:g} | {m['errors']:g} | {m['tokens_per_s']:g} "
              f"| {m['tokens_per_s'] / base:.2f} | {m['ttft_p50_ms']:g} | {m['ttft_p99_ms']:g} "
              f"| {m['itl_p50_ms']:g} | {m['itl_p99_ms']:g} | {each} |")
    print(json.dumps({"started": started, "load_start": load_start, "load_end": load_end,
                      "runs": runs}))


if __name__ == "__main__":
    main()
