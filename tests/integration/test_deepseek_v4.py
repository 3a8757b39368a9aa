"""`dsv4 serve` on the tiny DeepSeek-V4 reference checkpoint
(tests/data/deepseek_v4/swa_bf16, no tokenizer): token-id prompts through
/v1/completions give the next-token distribution of DeepSeek's official
inference code (logits.f32, see tests/data/deepseek_v4/README.md)."""
import math
import pathlib
import struct

import httpx
import pytest

from conftest import ROOT, Server

DATA = ROOT / "tests/data/deepseek_v4/swa_bf16"


@pytest.fixture(scope="module")
def v4_server():
    server = Server("--model", str(DATA), "--max-sequences", "2", "--threads", "1")
    yield server
    server.stop()


def golden_last_row():
    ids = [int(x) for x in (DATA / "input_ids.txt").read_text().split()]
    data = (DATA / "logits.f32").read_bytes()
    vocab = len(data) // 4 // len(ids)
    row = struct.unpack_from(f"<{vocab}f", data, (len(ids) - 1) * vocab * 4)
    top = max(row)
    log_z = top + math.log(sum(math.exp(x - top) for x in row))
    return ids, [x - log_z for x in row]


def test_next_token_distribution_matches_reference(v4_server):
    ids, golden = golden_last_row()
    r = httpx.post(v4_server.url + "/v1/completions", timeout=60, json={
        "model": "swa_bf16", "prompt": ids, "max_tokens": 1, "temperature": 0, "logprobs": 5})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    lp = choice["logprobs"]
    best = max(range(len(golden)), key=lambda i: golden[i])
    assert lp["tokens"] == [f"token_id:{best}"]  # no tokenizer: tokens are ids
    assert lp["token_logprobs"][0] == pytest.approx(golden[best], abs=1e-3)
    want = sorted(range(len(golden)), key=lambda i: -golden[i])[:5]
    got = lp["top_logprobs"][0]
    assert list(got) == [f"token_id:{i}" for i in want]
    for i in want:
        assert got[f"token_id:{i}"] == pytest.approx(golden[i], abs=1e-3)
    usage = r.json()["usage"]
    assert usage["prompt_tokens"] == len(ids)
    assert usage["completion_tokens"] == 1 and usage["total_tokens"] == len(ids) + 1
    # Again: the slot's prefix is reused (all but the prompt's last token), and
    # the logprobs are those of the cold run, bit for bit.
    again = httpx.post(v4_server.url + "/v1/completions", timeout=60, json={
        "model": "swa_bf16", "prompt": ids, "max_tokens": 1, "temperature": 0, "logprobs": 5})
    assert again.status_code == 200, again.text
    assert again.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": len(ids) - 1}
    assert again.json()["choices"][0]["logprobs"] == lp


def test_text_prompt_needs_a_tokenizer(v4_server):
    r = httpx.post(v4_server.url + "/v1/completions", timeout=60,
                   json={"model": "swa_bf16", "prompt": "hello", "max_tokens": 1})
    assert r.status_code == 400
    assert "token ids" in r.json()["error"]["message"]
    r = httpx.post(v4_server.url + "/v1/chat/completions", timeout=60, json={
        "model": "swa_bf16", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400
    assert "tokenizer" in r.json()["error"]["message"]


def test_out_of_vocabulary_token_id(v4_server):
    r = httpx.post(v4_server.url + "/v1/completions", timeout=60,
                   json={"model": "swa_bf16", "prompt": [0, 999999], "max_tokens": 1})
    assert r.status_code == 400
    assert "vocabulary" in r.json()["error"]["message"]


def test_kv_cache_dir_survives_a_restart(tmp_path):
    """--kv-cache-dir: a prompt's state saved by one server is loaded by the
    next (prefix reuse after a restart, the cold logprobs bit for bit); a
    corrupted state file is refused and the output is still the cold one."""
    ids, golden = golden_last_row()
    body = {"model": "swa_bf16", "prompt": ids, "max_tokens": 1, "temperature": 0, "logprobs": 5}
    args = ["--model", str(DATA), "--max-sequences", "1", "--threads", "1",
            "--kv-cache-dir", str(tmp_path)]
    first = Server(*args)
    try:
        cold = httpx.post(first.url + "/v1/completions", timeout=60, json=body).json()
        assert cold["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) == 0
    finally:
        first.stop()
    assert first.proc.returncode == 0
    files = list(tmp_path.glob("*.dsv4kv"))
    assert len(files) == 1
    second = Server(*args)
    try:
        warm = httpx.post(second.url + "/v1/completions", timeout=60, json=body).json()
        assert warm["usage"]["prompt_tokens_details"] == {"cached_tokens": len(ids) - 1}
        assert warm["choices"][0]["logprobs"] == cold["choices"][0]["logprobs"]
        m = second.metrics()
        assert m["dsv4_kv_disk_hits_total"] == 1
        assert m["dsv4_kv_disk_tokens_total"] == len(ids)
        assert m["dsv4_kv_disk_read_bytes_total"] == files[0].stat().st_size
        assert m["dsv4_kv_disk_files"] == 1
    finally:
        second.stop()
    # A flipped byte in the middle of the state: refused with a warning, the
    # file removed, the answer the cold one.
    saved = files[0].read_bytes()
    data = bytearray(saved)
    data[len(data) // 2] ^= 0x40
    files[0].write_bytes(bytes(data))
    third = Server(*args)
    try:
        again = httpx.post(third.url + "/v1/completions", timeout=60, json=body).json()
        assert again["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) == 0
        assert again["choices"][0]["logprobs"] == cold["choices"][0]["logprobs"]
        assert third.metrics()["dsv4_kv_disk_hits_total"] == 0
        third.proc.terminate()
        third.proc.wait(timeout=20)
        assert "checksum mismatch" in third.proc.stderr.read()
    finally:
        third.stop()
    # The cold run saved the prompt's state again, byte for byte the first one.
    assert files[0].read_bytes() == saved
