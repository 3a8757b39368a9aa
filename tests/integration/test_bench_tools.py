"""tools/bench/v4_decode_bound.py against dsv4 itself: the weight bytes per
decoded token it reads from a checkpoint's headers are the ones `dsv4 bench`
plans (top-k of the routed experts, one embedding row, no MTP), and bad
input ends with a one-line error and a hint, not a traceback."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools/bench/v4_decode_bound.py"
V4 = ROOT / "tests/data/deepseek_v4"


def _dsv4_bytes_per_token(model):
    binary = os.environ.get("DSV4_BIN") or str(ROOT / "build/release/dsv4")
    out = subprocess.run([binary, "bench", "--model", str(model), "--threads", "1",
                          "--prompt-len", "4", "--gen", "2", "--repeat", "1", "--probe-mib", "0"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return int(re.search(r"weight_bytes_per_token=(\d+)", out).group(1))


def _bound(*args):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("model", ["swa_fp8", "mixed_mtp_bf16"])
def test_bytes_per_token_match_dsv4_bench(model):
    r = _bound(V4 / model, "--bandwidth", 10, "--ceiling", "fp8=5", "--ceiling", "fp4=5")
    assert r.returncode == 0, r.stderr
    got = int(re.search(r"weight bytes per token (\d+)", r.stdout).group(1))
    assert got == _dsv4_bytes_per_token(V4 / model)


def test_the_bound_is_the_slower_of_memory_and_arithmetic_per_class():
    # swa_fp8 at 10 GB/s with FP8 arithmetic at 5 GB/s: the FP8 class takes
    # twice its memory time, every other class its memory time.
    r = _bound(V4 / "swa_fp8", "--bandwidth", 10, "--ceiling", "fp8=5", "--other-us", 0)
    assert r.returncode == 0, r.stderr
    rows = {m.group(1): [float(x) for x in m.group(2, 3, 4, 5)] for m in re.finditer(
        r"^(\w+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", r.stdout, re.M)}
    mb, mem, arith, bound = rows["fp8"]
    assert arith == pytest.approx(2 * mem, abs=1)
    assert bound == arith
    for cls, (mb, mem, arith, bound) in rows.items():
        if cls != "fp8":
            assert bound == mem
    total = float(re.search(r"token at least (\d+) us", r.stdout).group(1))
    assert total == pytest.approx(sum(row[3] for row in rows.values()), abs=len(rows))


@pytest.mark.parametrize("args", [
    ["/nonexistent/model", "--bandwidth", "10"],
    [V4 / "swa_fp8", "--bandwidth", "10", "--ceiling", "fp8"],
    [V4 / "swa_fp8", "--bandwidth", "10", "--ceiling", "fp8=fast"],
    [ROOT / "tests/data", "--bandwidth", "10"],
    [V4 / "swa_fp8", "--bandwidth", "0"],
    [V4 / "swa_fp8", "--bandwidth", "10", "--ceiling", "fp4=0"],
])
def test_bad_input_is_a_clear_error(args):
    r = _bound(*args)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert "v4_decode_bound:" in r.stderr and "hint:" in r.stderr


# ---- bench/experiments/gap_samples.py on made-up traces ----

GAPS = ROOT / "bench/experiments/gap_samples.py"
HEAD = 32768


def _run(tool, *args):
    return subprocess.run([sys.executable, str(tool), *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def _write_trace(path, tokens):
    """tokens: one list per token of (n, start_us, end_us), its head last."""
    with open(path, "w") as f:
        f.write("n,start_ns,caller_end_ns,end_ns,workers_start_ns,workers_end_ns\n")
        for regions in tokens:
            for n, s, e in regions:
                f.write(f"{n},{s * 1000},{e * 1000},{e * 1000},{s * 1000},{e * 1000}\n")


def test_gap_samples_counts_the_callers_samples_between_regions(tmp_path):
    # Tokens of [region 5 at 0-10 us, head at 20-30 us]: the gaps are 10-20 us
    # inside a token and 30-100 us between tokens (head -> 5).
    tokens = [[(5, 100 * i, 100 * i + 10), (HEAD, 100 * i + 20, 100 * i + 30)] for i in range(5)]
    trace = tmp_path / "gaps.csv"
    _write_trace(trace, tokens)
    perf = tmp_path / "perf.txt"
    lines = []
    for tid, us, fn in [(41, 215, "Expand"), (41, 216, "Expand"), (41, 250, "Copy"),
                        (41, 205, "Product"), (42, 215, "Worker")]:
        lines.append(f"{tid} {us / 1e6:.9f}: \n\tffffffff81000000 {fn}+0x10\n\t400000 main\n")
    perf.write_text("\n".join(lines))
    r = _run(GAPS, trace, perf, "--skip", 1)
    assert r.returncode == 0, r.stderr
    assert "caller (tid 41): 3 samples in gaps" in r.stdout
    assert re.search(r"^\s+2\s+66\.7%\s+Expand$", r.stdout, re.M), r.stdout
    assert re.search(r"^\s+2\s+66\.7%\s+5 -> 32768$", r.stdout, re.M), r.stdout
    assert re.search(r"^\s+1\s+33\.3%\s+32768 -> 5$", r.stdout, re.M), r.stdout


POOL = ROOT / "tools/bench/pool_regions.py"


def test_pool_regions_by_next_parts_regions_of_equal_n(tmp_path):
    # Tokens of [7 (10 us), 9, 7 (30 us), 4, head]: by n, the two regions of
    # n = 7 are one kind (median of 10 and 30); by (n, next n), two.
    tokens = []
    for i in range(30):
        t = 200 * i
        tokens.append([(7, t, t + 10), (9, t + 12, t + 14), (7, t + 20, t + 50),
                       (4, t + 52, t + 54), (HEAD, t + 60, t + 70)])
    trace = tmp_path / "pool.csv"
    _write_trace(trace, tokens)
    r = _run(POOL, trace, "--token-n", HEAD, "--skip", 2, "--bytes", "7:40e3")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^\s+7 x  2\s+20\.0 us\s+2\.0 GB/s$", r.stdout, re.M), r.stdout
    r = _run(POOL, trace, "--token-n", HEAD, "--skip", 2, "--bytes", "7:40e3", "--by-next")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^\s+7>9 x  1\s+10\.0 us\s+4\.0 GB/s$", r.stdout, re.M), r.stdout
    assert re.search(r"^\s+7>4 x  1\s+30\.0 us\s+1\.3 GB/s$", r.stdout, re.M), r.stdout
    assert re.search(rf"^\s+{HEAD}>7 x  1\s+10\.0 us$", r.stdout, re.M), r.stdout


@pytest.mark.parametrize("tool,args", [
    (POOL, ["/nonexistent.csv", "--token-n", "5"]),
    (GAPS, ["/nonexistent.csv", "{trace}"]),
    (GAPS, ["{trace}", "/nonexistent.txt"]),
    (GAPS, ["{trace}", "{trace}"]),
    (GAPS, ["{trace}", "{trace}", "--token-n", "5"]),
])
def test_bench_trace_tools_bad_input_is_a_clear_error(tmp_path, tool, args):
    trace = tmp_path / "t.csv"
    _write_trace(trace, [[(5, 100 * i, 100 * i + 10), (HEAD, 100 * i + 20, 100 * i + 30)]
                         for i in range(14)])
    r = _run(tool, *[str(a).replace("{trace}", str(trace)) for a in args])
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert f"{tool.stem}:" in r.stderr and "hint:" in r.stderr
