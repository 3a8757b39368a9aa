"""DeepSeek-V4.1 end to end: `dsv4 serve` on the tiny reference checkpoint
(tests/data/deepseek_v41/csa2_fp8, token-id prompts; its Engram token map
beside it) gives the next-token distribution of DeepSeek's V4.1 inference
code; `dsv4 synth-model --arch v4.1` writes a model that `dsv4 run`, `bench`
(with its Engram reads) and `serve` (chat) take."""
import math
import struct
import subprocess

import httpx
import pytest

from conftest import ROOT, Server, _binary

DATA = ROOT / "tests/data/deepseek_v41/csa2_fp8"


def golden_last_row():
    ids = [int(x) for x in (DATA / "input_ids.txt").read_text().split()]
    data = (DATA / "logits.f32").read_bytes()
    vocab = len(data) // 4 // len(ids)
    row = struct.unpack_from(f"<{vocab}f", data, (len(ids) - 1) * vocab * 4)
    top = max(row)
    log_z = top + math.log(sum(math.exp(x - top) for x in row))
    return ids, [x - log_z for x in row]


def test_next_token_distribution_matches_the_v41_reference():
    server = Server("--model", str(DATA), "--max-sequences", "2", "--threads", "1")
    try:
        ids, golden = golden_last_row()
        body = {"model": "csa2_fp8", "prompt": ids, "max_tokens": 1, "temperature": 0,
                "logprobs": 5}
        r = httpx.post(server.url + "/v1/completions", timeout=60, json=body)
        assert r.status_code == 200, r.text
        lp = r.json()["choices"][0]["logprobs"]
        want = sorted(range(len(golden)), key=lambda i: -golden[i])[:5]
        got = lp["top_logprobs"][0]
        assert list(got) == [f"token_id:{i}" for i in want]
        for i in want:
            assert got[f"token_id:{i}"] == pytest.approx(golden[i], abs=2e-3)
        again = httpx.post(server.url + "/v1/completions", timeout=60, json=body)
        assert again.status_code == 200, again.text
        assert again.json()["choices"][0]["logprobs"] == lp
    finally:
        server.stop()


@pytest.fixture(scope="module")
def synth_v41(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth_v41")
    r = subprocess.run(
        [_binary(), "synth-model", "--arch", "v4.1", "--out", str(out), "--layers", "6",
         "--d-model", "128", "--experts", "4", "--top-k", "2", "--moe-inter", "128",
         "--heads", "2", "--head-dim", "128", "--q-lora-rank", "128", "--o-lora-rank", "64",
         "--o-groups", "2", "--vocab", "129280", "--index-heads", "4", "--index-topk", "16",
         "--engram-vocab", "500", "--window", "16"],
        capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "compress_ratios [0,0,2,2,1,1]" in r.stdout, r.stdout
    return out


def test_synthetic_v41_runs_and_benches(synth_v41):
    run = subprocess.run([_binary(), "run", "--model", str(synth_v41), "-p", "Once upon a time",
                          "-n", "8", "-t", "1", "--temp", "0"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("Once upon a time")
    bench = subprocess.run([_binary(), "bench", "--model", str(synth_v41), "--prompt-len", "32",
                            "--gen", "8", "--repeat", "1", "--probe-mib", "0", "-t", "1"],
                           capture_output=True, text=True, timeout=300)
    assert bench.returncode == 0, bench.stderr
    # 2 Engram layers x 24 rows of 256 fp8 values + 8 scales
    assert "Engram: 48.0 table rows, 12672 bytes read per decoded token" in bench.stdout
    assert "deepseek_v41" in bench.stdout


def test_synthetic_v41_serves_chat(synth_v41):
    server = Server("--model", str(synth_v41), "--threads", "1")
    try:
        r = httpx.post(server.url + "/v1/chat/completions", timeout=120, json={
            "model": synth_v41.name, "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": "Hello"}]})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] >= 1
    finally:
        server.stop()


def test_the_index_key_reading_is_a_flag():
    bad = subprocess.run([_binary(), "run", "--model", str(DATA), "--prompt-ids", "0 5 7",
                          "-n", "1", "--v41-index-keys", "sideways"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0
    assert "--v41-index-keys" in bad.stderr
    for reading in ("reference", "owner"):
        ok = subprocess.run([_binary(), "run", "--model", str(DATA), "--prompt-ids", "0 5 7 9",
                             "-n", "2", "-t", "1", "--v41-index-keys", reading],
                            capture_output=True, text=True, timeout=60)
        assert ok.returncode == 0, ok.stderr


DSPARK = ROOT / "tests/data/deepseek_v41/dspark_bf16"


def test_speculative_run_and_bench_with_the_dspark_stages():
    """`run --speculative` drafts with the V4.1 DSpark stages: under the owner's index keys the
    output equals plain decoding's; under the reference's slot it warns. `bench --speculative`
    reports the acceptance and each draft length's cost."""
    def run(*extra):
        r = subprocess.run([_binary(), "run", "--model", str(DSPARK), "--prompt-ids", "0 5 7 9",
                            "-n", "12", "-t", "1", "--temp", "0", *extra],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r
    plain = run("--v41-index-keys", "owner")
    spec = run("--v41-index-keys", "owner", "--speculative", "3")
    assert spec.stdout.split("speculative:")[0].split() == plain.stdout.split()
    assert "12 tokens in" in spec.stdout + spec.stderr
    warned = run("--speculative", "2")
    assert "--v41-index-keys owner makes speculation lossless" in warned.stderr
    bench = subprocess.run([_binary(), "bench", "--model", str(DSPARK), "--prompt-len", "8",
                            "--gen", "8", "--repeat", "1", "--probe-mib", "0", "-t", "1",
                            "--v41-index-keys", "owner", "--speculative", "auto"],
                           capture_output=True, text=True, timeout=300)
    assert bench.returncode == 0, bench.stderr
    assert "speculative (dspark, auto, up to 4 drafts per round)" in bench.stdout, bench.stdout
