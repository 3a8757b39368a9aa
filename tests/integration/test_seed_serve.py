"""`dsv4 serve` with the seed family's runtime policies (docs/seed-mechanisms.md).

`serve` takes the flags `run` takes (--kv-budget, --kv-pruner, the router and CED
options): a completion served with --kv-budget 4 on the tiny P-V4-7B checkpoint
(SemanticKVPruner, config budget 8) is the text `dsv4 run` generates with the same
flag, and differs from the one with the config's budget, so the flag reaches the
model. Requests one after another on one slot give the same text (a reused cache
carries nothing over).
"""
import subprocess

import httpx
import pytest

from conftest import ROOT, Server, _binary

P_V4_7B = ROOT / "tests/data/seed/P-V4-7B"
PROMPT = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298]
N = 20


def run_text(*flags):
    """What `dsv4 run` prints for PROMPT after the echoed prompt."""
    ids = " ".join(map(str, PROMPT))
    out = subprocess.run([_binary(), "run", "--model", str(P_V4_7B), "--threads", "1",
                          "--temperature", "0", "-n", str(N), "--prompt-ids", ids, *flags],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    echo = subprocess.run([_binary(), "run", "--model", str(P_V4_7B), "--threads", "1",
                           "--temperature", "0", "-n", "0", "--prompt-ids", ids],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    return out[len(echo.rstrip("\n")):].rstrip("\n")


def serve_text(server):
    r = httpx.post(server.url + "/v1/completions", timeout=60,
                   json={"model": "P-V4-7B", "prompt": PROMPT, "max_tokens": N,
                         "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


@pytest.fixture(scope="module")
def budget_server():
    server = Server("--model", str(P_V4_7B), "--kv-budget", "4", "--max-sequences", "1",
                    "--threads", "1")
    yield server
    server.stop()
    assert server.proc.returncode == 0


def test_serve_takes_the_kv_budget_as_run_does(budget_server):
    want = run_text("--kv-budget", "4")
    assert want != run_text()  # the budget changes this output
    first = serve_text(budget_server)
    assert first == want
    assert serve_text(budget_server) == first  # the slot's reused cache starts over


def test_serve_refuses_a_budget_below_the_protected_tokens():
    out = subprocess.run([_binary(), "serve", "--model", str(P_V4_7B), "--port", "0",
                          "--kv-budget", "3"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "--kv-budget 3 is below this model's minimum of 4" in out.stderr
