"""`dsv4 serve --speculative` on the tiny DeepSeek-V4 checkpoint with a DSpark
module (tests/data/deepseek_v4/dspark_mixed_bf16: random weights, a
vocabulary of 256 ids and no tokenizer). The tests give it a byte-level
tokenizer.json of its size (ids 0 and 1 are BOS and EOS, as in its config;
ids 2..255 the bytes 2..255), so chat requests work in the plain chat format.
Greedy streaming chat completions through the official openai client give the
same text with speculation as without, and /metrics counts the drafts; a
model without a draft head and a bad --speculative value are refused at
start, naming the cause."""
import concurrent.futures
import json
import subprocess

import httpx
import openai
import pytest

from conftest import ROOT, Server, _binary

DATA = ROOT / "tests/data/deepseek_v4/dspark_mixed_bf16"
MODEL = "dspark_mixed_bf16"


def byte_level_alphabet():
    """GPT-2's bytes_to_unicode: byte -> the character byte-level BPE writes for it."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD))
                 + list(range(0xAE, 0x100)))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    alphabet = byte_level_alphabet()
    doc = {
        "added_tokens": [
            {"id": 0, "content": "<｜begin▁of▁sentence｜>", "special": True},
            {"id": 1, "content": "<｜end▁of▁sentence｜>", "special": True},
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": {alphabet[b]: b for b in range(2, 256)}, "merges": []},
    }
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def servers(tokenizer):
    common = ["--model", str(DATA), "--tokenizer", str(tokenizer), "--max-sequences", "2",
              "--threads", "1"]
    plain = Server(*common)
    spec = Server(*common, "--speculative", "2")
    yield plain, spec
    plain.stop()
    spec.stop()


PROMPTS = ["Once upon a time", "hello, world", "The quick brown fox jumps over the lazy dog",
           "abc", "Speculative decoding drafts tokens and verifies them"]


def stream_chat(server, content):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": content}], temperature=0,
        max_tokens=40, stream=True)
    text, finish = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    return text, finish


def run_all(server):
    # Concurrent requests: more than the two slots, so they batch and queue.
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        return list(pool.map(lambda p: stream_chat(server, p), PROMPTS))


def test_streamed_greedy_chat_equals_the_plain_server(servers):
    plain, spec = servers
    want = run_all(plain)
    got = run_all(spec)
    assert got == want
    assert sum(len(text) for text, _ in want) > 20  # the comparison covers real output
    assert {finish for _, finish in want} <= {"stop", "length"}


def test_metrics_count_the_drafts(servers):
    plain, spec = servers
    stream_chat(spec, "metrics")
    m = spec.metrics()
    assert m["dsv4_speculative_drafted_tokens_total"] > 0
    assert 0 <= m["dsv4_speculative_accepted_tokens_total"] <= m[
        "dsv4_speculative_drafted_tokens_total"]
    assert plain.metrics()["dsv4_speculative_drafted_tokens_total"] == 0
    text = httpx.get(spec.url + "/metrics", timeout=5).text
    for name in ("dsv4_speculative_drafted_tokens_total",
                 "dsv4_speculative_accepted_tokens_total"):
        assert f"# TYPE {name} counter" in text
        assert f"# HELP {name} " in text


def run_serve(*args):
    return subprocess.run([_binary(), "serve", "--host", "127.0.0.1", "--port", "0", *args],
                          capture_output=True, text=True, timeout=60)


def test_a_model_without_a_draft_head_is_refused():
    model = ROOT / "tests/data/deepseek_v4/swa_bf16"
    p = run_serve("--model", str(model), "--speculative", "2", "--threads", "1")
    assert p.returncode == 2
    assert f"{model}: speculative decoding needs a model with a draft head" in p.stderr
    assert "dsv4: hint: run without --speculative" in p.stderr


def test_a_bad_speculative_value_is_refused():
    for value in ("x", "-1", "2.5"):
        p = run_serve("--speculative", value)
        assert p.returncode == 2, value
        assert f"--speculative '{value}' is not a draft count or auto" in p.stderr
