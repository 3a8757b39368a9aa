"""`dsv4 serve` as a server: 32 concurrent streaming clients each get their
solo completion, a client that disconnects mid-stream frees its slot, a full
server answers 503, and every bad input gets its 4xx in the API's own error
shape (one test per case) without hurting the process."""
import concurrent.futures
import json
import socket
import subprocess
import time

import httpx
import openai
import pytest

MODEL = "stories260K"
CHAT = "/v1/chat/completions"


def post(server, path, body, headers=None, raw=None):
    return httpx.post(server.url + path, content=raw if raw is not None else json.dumps(body),
                      headers={"Content-Type": "application/json", **(headers or {})}, timeout=30)


def openai_error(r, status):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert "type" in err and "code" in err and "param" in err
    return err


def anthropic_error(r, status):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error"
    assert body["error"]["message"]
    return body["error"]


def test_concurrent_streams_match_solo(llama_server):
    prompts = [f"{p} " for p in ("Once upon a time", "Lily and Ben", "The little dog",
                                 "One day, a bird", "Tom had a ball", "She was happy",
                                 "The sun was", "Mom said")]
    prompts = [prompts[i % len(prompts)] + str(i) for i in range(32)]
    client = openai.OpenAI(base_url=llama_server.url + "/v1", api_key="x", max_retries=0,
                           timeout=120)

    def solo(prompt):
        r = client.chat.completions.create(model=MODEL, max_tokens=40, temperature=0,
                                           messages=[{"role": "user", "content": prompt}])
        return r.choices[0].message.content

    def streamed(prompt):
        stream = client.chat.completions.create(model=MODEL, max_tokens=40, temperature=0,
                                                stream=True,
                                                messages=[{"role": "user", "content": prompt}])
        return "".join(c.choices[0].delta.content or "" for c in stream)

    expected = [solo(p) for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(max_workers=32) as pool:
        got = list(pool.map(streamed, prompts))
    assert got == expected
    m = llama_server.metrics()
    assert m["dsv4_running_sequences"] == 0
    assert m["dsv4_queue_depth"] == 0


def wait_for(server, name, value, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        m = server.metrics()
        if m.get(name) == value:
            return m
        time.sleep(0.05)
    raise AssertionError(f"{name} never became {value}: {server.metrics()}")


LONG = {"model": MODEL, "messages": [{"role": "user", "content": "Once upon a time"}],
        "max_tokens": 500, "temperature": 1.0, "seed": 1, "stream": True,
        "repetition_penalty": 1.0}


def test_disconnect_frees_the_slot(slow_server):
    before = slow_server.metrics().get("dsv4_sequences_cancelled_total", 0)
    with httpx.stream("POST", slow_server.url + CHAT, json=LONG, timeout=30) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        events = [next(lines) for _ in range(6)]  # a few events, then hang up
        assert any(e.startswith("data: ") for e in events)
        assert slow_server.metrics()["dsv4_running_sequences"] == 1
    # 500 tokens at 20 ms per step would take 10 s; the cancel takes a step or two.
    m = wait_for(slow_server, "dsv4_running_sequences", 0, seconds=5)
    assert m["dsv4_sequences_cancelled_total"] == before + 1
    assert m["dsv4_kv_cache_tokens"] == 0


def test_non_streaming_disconnect_frees_the_slot(slow_server):
    wait_for(slow_server, "dsv4_running_sequences", 0, seconds=5)
    before = slow_server.metrics().get("dsv4_sequences_cancelled_total", 0)
    # A raw client: send the request, read the first bytes of the (slow) response,
    # then hang up. The server notices at its next keep-alive write.
    body = json.dumps({**LONG, "stream": False}).encode()
    host, port = slow_server.url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: " +
                     str(len(body)).encode() + b"\r\n\r\n" + body)
        assert sock.recv(12).startswith(b"HTTP/1.1 200")
        assert slow_server.metrics()["dsv4_running_sequences"] == 1
    m = wait_for(slow_server, "dsv4_running_sequences", 0, seconds=6)
    assert m["dsv4_sequences_cancelled_total"] == before + 1
    assert m["dsv4_kv_cache_tokens"] == 0


def test_slow_non_streaming_response_is_valid_json(slow_server):
    wait_for(slow_server, "dsv4_running_sequences", 0, seconds=5)
    r = httpx.post(slow_server.url + CHAT, json={**LONG, "stream": False, "max_tokens": 80, "temperature": 0.0},
                   timeout=30)
    assert r.status_code == 200
    body = r.json()  # leading keep-alive spaces are valid JSON whitespace
    assert body["usage"]["completion_tokens"] == 80
    assert body["choices"][0]["finish_reason"] == "length"


def test_busy_server_answers_503(slow_server):
    wait_for(slow_server, "dsv4_running_sequences", 0)
    with httpx.stream("POST", slow_server.url + CHAT, json=LONG, timeout=30) as r:
        lines = r.iter_lines()  # keep it: a dropped iterator closes the connection
        next(lines)
        wait_for(slow_server, "dsv4_running_sequences", 1)
        busy = post(slow_server, CHAT, {**LONG, "stream": False})
        err = openai_error(busy, 503)
        assert "busy" in err["message"]
        assert busy.headers["Retry-After"] == "1"
        busy = post(slow_server, "/v1/messages", {"model": MODEL, "max_tokens": 5,
                                                  "messages": [{"role": "user", "content": "x"}]})
        assert anthropic_error(busy, 503)["type"] == "overloaded_error"
    wait_for(slow_server, "dsv4_running_sequences", 0, seconds=5)
    ok = post(slow_server, CHAT, {**LONG, "stream": False, "max_tokens": 3})
    assert ok.status_code == 200


GOOD = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}

# One case per bad input: (name, body or raw bytes, expected status, text in the message).
BAD_CHAT = [
    ("malformed_json", b'{"model": "stories260K", "messages": [', 400, "not valid JSON"),
    ("not_an_object", b'[1, 2, 3]', 400, "JSON object"),
    ("number_overflow", b'{"model": "stories260K", "max_tokens": 1e99999}', 400, "not valid JSON"),
    ("invalid_utf8", b'{"model": "stories260K", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
     400, "not valid JSON"),
    ("lone_surrogate", b'{"model": "stories260K", "messages": [{"role": "user", "content": "\\ud800"}]}',
     400, "not valid JSON"),
    ("wrong_type_messages", {**GOOD, "messages": "hi"}, 400, "'messages' must be an array"),
    ("wrong_type_temperature", {**GOOD, "temperature": "hot"}, 400, "'temperature'"),
    ("negative_max_tokens", {**GOOD, "max_tokens": -5}, 400, "'max_tokens'"),
    ("huge_max_tokens", {**GOOD, "max_tokens": 10**12}, 400, "'max_tokens'"),
    ("n_above_limit", {**GOOD, "n": 1000}, 400, "'n'"),
    ("empty_messages", {**GOOD, "messages": []}, 400, "must not be empty"),
    ("roleless_message", {**GOOD, "messages": [{"content": "hi"}]}, 400, "role"),
    ("unknown_role", {**GOOD, "messages": [{"role": "robot", "content": "hi"}]}, 400, "role"),
    ("tool_schema_not_object", {**GOOD, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": [1]}}]}, 400, "parameters"),
    ("tools_not_array", {**GOOD, "tools": "f"}, 400, "'tools'"),
    ("bad_stop", {**GOOD, "stop": 7}, 400, "'stop'"),
    ("top_logprobs_too_many", {**GOOD, "logprobs": True, "top_logprobs": 50}, 400, "top_logprobs"),
    ("prompt_too_long", {**GOOD, "messages": [{"role": "user", "content": "once upon a time " * 400}]},
     400, "context"),
    ("file_path_as_model", {**GOOD, "model": "/etc/passwd"}, 404, "does not exist"),
    # Fields the server does not implement: refused by name, never ignored.
    ("response_format_unsupported_keyword", {**GOOD, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}}}}, 400,
     "schema /properties/n/minimum: keyword 'minimum' is not supported"),
    # Legacy functions are tools: this model has no tool-call format.
    ("legacy_functions", {**GOOD, "functions": [{"name": "f", "parameters": {}}]}, 400,
     "'functions' is not supported by this model"),
    ("audio_modality", {**GOOD, "modalities": ["text", "audio"]}, 400, "modalities"),
    ("logit_bias_outside_vocabulary", {**GOOD, "logit_bias": {"100000": 5}}, 400,
     "outside the vocabulary"),
    ("logit_bias_out_of_range", {**GOOD, "logit_bias": {"5": 500}}, 400, "logit_bias"),
]


@pytest.mark.parametrize("name,body,status,text", BAD_CHAT, ids=[c[0] for c in BAD_CHAT])
def test_bad_chat_request(llama_server, name, body, status, text):
    r = post(llama_server, CHAT, None, raw=body) if isinstance(body, bytes) else \
        post(llama_server, CHAT, body)
    err = openai_error(r, status)
    assert text in err["message"]


BAD_MESSAGES = [
    ("missing_max_tokens", {"model": MODEL, "messages": [{"role": "user", "content": "x"}]},
     "max_tokens"),
    ("system_role_in_messages", {"model": MODEL, "max_tokens": 5,
                                 "messages": [{"role": "system", "content": "x"}]}, "role"),
    ("tool_schema_not_object", {"model": MODEL, "max_tokens": 5, "tools": [
        {"name": "f", "input_schema": "object"}], "messages": [{"role": "user", "content": "x"}]},
     "input_schema"),
    ("empty_messages", {"model": MODEL, "max_tokens": 5, "messages": []}, "must not be empty"),
]


@pytest.mark.parametrize("name,body,text", BAD_MESSAGES, ids=[c[0] for c in BAD_MESSAGES])
def test_bad_messages_request(llama_server, name, body, text):
    err = anthropic_error(post(llama_server, "/v1/messages", body), 400)
    assert err["type"] == "invalid_request_error"
    assert text in err["message"]


def test_logit_bias_steers_the_tokens(llama_server):
    """logit_bias +100 on one token makes greedy decoding pick it every time;
    -100 on the cold run's first token changes the first token."""
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 4, "temperature": 0,
            "logprobs": 0, "return_tokens_as_token_ids": True}
    cold = post(llama_server, "/v1/completions", body).json()["choices"][0]["logprobs"]["tokens"]
    forced = post(llama_server, "/v1/completions", {**body, "logit_bias": {"300": 100}})
    assert forced.status_code == 200, forced.text
    assert forced.json()["choices"][0]["logprobs"]["tokens"] == ["token_id:300"] * 4
    first = cold[0].split(":")[1]
    banned = post(llama_server, "/v1/completions", {**body, "logit_bias": {first: -100}})
    assert banned.json()["choices"][0]["logprobs"]["tokens"][0] != cold[0]


def test_bad_completion_prompt(llama_server):
    err = openai_error(post(llama_server, "/v1/completions", {"model": MODEL, "prompt": {"a": 1}}),
                       400)
    assert "'prompt'" in err["message"]


def test_unknown_model_404(llama_server):
    err = openai_error(post(llama_server, CHAT, {**GOOD, "model": "gpt-4o"}), 404)
    assert err["code"] == "model_not_found"
    r = httpx.get(llama_server.url + "/v1/models/gpt-4o")
    assert openai_error(r, 404)["code"] == "model_not_found"
    assert httpx.get(llama_server.url + "/v1/models/" + MODEL).json()["id"] == MODEL


def test_unknown_route_404(llama_server):
    openai_error(httpx.get(llama_server.url + "/v1/nothing"), 404)


def test_server_survives_bad_input(llama_server):
    assert httpx.get(llama_server.url + "/health").json() == {"status": "ok"}
    assert post(llama_server, CHAT, GOOD).status_code == 200
    m = llama_server.metrics()
    assert m['dsv4_requests_total{route="/v1/chat/completions",status="400"}'] >= 1
    assert m['dsv4_requests_total{route="/v1/chat/completions",status="200"}'] >= 1


def test_api_key_required(key_server):
    err = openai_error(post(key_server, CHAT, GOOD), 401)
    assert err["code"] == "invalid_api_key"
    openai_error(post(key_server, CHAT, GOOD, {"Authorization": "Bearer wrong"}), 401)
    anthropic_error(post(key_server, "/v1/messages", GOOD, {"x-api-key": "nope"}), 401)
    assert httpx.get(key_server.url + "/metrics").status_code == 401
    assert httpx.get(key_server.url + "/health").status_code == 200  # open for probes
    assert post(key_server, CHAT, GOOD, {"Authorization": "Bearer sekret"}).status_code == 200
    assert post(key_server, CHAT, GOOD, {"x-api-key": "sekret"}).status_code == 200


def test_body_too_large_413(key_server):
    big = {**GOOD, "messages": [{"role": "user", "content": "x" * 10000}]}
    auth = {"Authorization": "Bearer sekret"}
    err = openai_error(post(key_server, CHAT, big, auth), 413)
    assert "too large" in err["message"]
    anthropic_error(post(key_server, "/v1/messages", big, auth), 413)
    assert post(key_server, CHAT, GOOD, auth).status_code == 200


def test_metrics_page(llama_server):
    m = llama_server.metrics()
    for name in ("dsv4_prompt_tokens_total", "dsv4_generation_tokens_total", "dsv4_queue_depth",
                 "dsv4_running_sequences", "dsv4_tokens_per_second", "dsv4_kv_cache_usage_ratio",
                 "dsv4_kv_cache_capacity_tokens"):
        assert name in m
    assert m["dsv4_max_sequences"] == 16
    assert m["dsv4_kv_cache_capacity_tokens"] == 16 * 512


def test_deeply_nested_body_is_refused_and_server_survives(echo_server):
    nested = "[" * 200000 + "]" * 200000
    body = ('{"model": "test-echo-model", "messages": [{"role": "user", "content": "hi"}], '
            '"tools": [{"type": "function", "function": {"name": "f", "parameters": {"a": %s}}}]}'
            % nested)
    r = httpx.post(echo_server.url + "/v1/chat/completions", content=body, timeout=30,
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert "deeper than" in r.json()["error"]["message"]
    assert httpx.get(echo_server.url + "/health", timeout=5).status_code == 200


def test_listen_backlog_is_raised(llama_server):
    # cpp-httplib listens with a backlog of 5; the server raises it so that a
    # burst of clients is not reset while the engine keeps the cores busy.
    out = subprocess.run(["ss", "-ltnH", f"sport = :{llama_server.port}"], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[0] == "LISTEN"
    assert int(out[2]) >= 128  # Send-Q of a listening socket: its backlog
