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
