"""The Ollama API of `dsv4 serve` (/api/chat, /api/generate, /api/tags,
/api/show, /api/ps, /api/version), judged by the official `ollama` Python
client: streaming and not, options, tools, thinking, the model listings,
errors in Ollama's {"error": ...} shape, and a client that disconnects."""
import json
import socket
import time

import httpx
import jsonschema
import ollama
import pytest

ECHO = "test-echo-model"
STORIES = "stories260K"
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                        "days": {"type": "integer"}}},
    },
}]
CALL = 'CALL get_weather {"city": "Paris", "days": 3}'
METRICS = ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration",
           "eval_count", "eval_duration")


def client(server, **kwargs):
    return ollama.Client(host=server.url, timeout=60, **kwargs)


def raw_post(server, path, body, raw=None):
    return httpx.post(server.url + path, content=raw if raw is not None else json.dumps(body),
                      headers={"Content-Type": "application/json"}, timeout=30)


def ollama_error(r, status):
    """The body of an error answer: Ollama's {"error": "..."} and nothing else."""
    assert r.status_code == status, r.text
    body = r.json()
    assert list(body) == ["error"] and isinstance(body["error"], str) and body["error"]
    return body["error"]


def assert_final(part):
    assert part.done is True
    for name in METRICS:
        assert isinstance(part[name], int) and part[name] >= 0, name
    assert part.prompt_eval_count > 0
    assert part.total_duration >= part.eval_duration


# ---- chat --------------------------------------------------------------------


def test_chat_not_streamed(echo_server):
    r = client(echo_server).chat(model=ECHO, stream=False,
                                 messages=[{"role": "user", "content": "hello there"}])
    assert r.model == ECHO
    assert r.message.role == "assistant"
    assert r.message.content == "Echo: hello there"
    assert r.message.thinking is None
    assert r.done_reason == "stop"
    assert r.eval_count == 5  # "E", "cho", ":", " hello", " there"
    assert_final(r)
    assert r.created_at.endswith("Z")


def test_chat_streams_by_default(echo_server):
    # Ollama streams unless "stream": false; the bare HTTP default is NDJSON.
    r = raw_post(echo_server, "/api/chat",
                 {"model": ECHO, "messages": [{"role": "user", "content": "one two"}]})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert len(lines) >= 2
    assert all(not line["done"] for line in lines[:-1])
    assert lines[-1]["done"] is True and lines[-1]["done_reason"] == "stop"
    assert "".join(line["message"]["content"] for line in lines) == "Echo: one two"


def test_chat_streamed_with_the_client(echo_server):
    c = client(echo_server)
    messages = [{"role": "user", "content": "streamed"}]
    parts = list(c.chat(model=ECHO, stream=True, messages=messages))
    assert "".join(p.message.content or "" for p in parts) == "Echo: streamed"
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    assert_final(parts[-1])
    whole = c.chat(model=ECHO, stream=False, messages=messages)
    assert parts[-1].eval_count == whole.eval_count
    assert parts[-1].prompt_eval_count == whole.prompt_eval_count


def test_chat_without_messages_loads_the_model(echo_server):
    r = client(echo_server).chat(model=ECHO, messages=[], stream=False)
    assert r.done is True and r.done_reason == "load"
    assert r.message.content == ""


def test_model_name_with_latest_tag(echo_server):
    r = client(echo_server).chat(model=ECHO + ":latest", stream=False,
                                 messages=[{"role": "user", "content": "tagged"}])
    assert r.message.content == "Echo: tagged"
    assert r.model == ECHO + ":latest"


# ---- generate ----------------------------------------------------------------


def test_generate_not_streamed_returns_a_context(echo_server):
    c = client(echo_server)
    r = c.generate(model=ECHO, prompt="first", stream=False)
    assert r.response == "Echo: first"
    assert r.done_reason == "stop"
    assert_final(r)
    # The context: the prompt's tokens, the answer's, and the end of the turn.
    assert len(r.context) == r.prompt_eval_count + r.eval_count + 1
    # Sent back, it is the start of the next prompt.
    r2 = c.generate(model=ECHO, prompt="second", context=r.context, stream=False)
    assert r2.response == "Echo: second"
    assert list(r2.context[:len(r.context)]) == list(r.context)
    assert r2.prompt_eval_count > len(r.context)


def test_generate_streamed(echo_server):
    parts = list(client(echo_server).generate(model=ECHO, prompt="a b c", stream=True))
    assert "".join(p.response for p in parts) == "Echo: a b c"
    assert_final(parts[-1])
    assert parts[-1].context and all(p.context is None for p in parts[:-1])


def test_generate_with_system_and_think(echo_server):
    r = client(echo_server).generate(model=ECHO, prompt="why", system="Be brief.", think=True,
                                     stream=False)
    assert r.thinking == "Thinking about it."
    assert r.response == "Echo: why"


def test_generate_raw_prompt_is_not_templated(echo_server):
    # raw: the prompt goes to the model as it is (here: the V4 chat markup by
    # hand), and the output is not parsed.
    prompt = "<｜begin▁of▁sentence｜><｜User｜>by hand<｜Assistant｜></think>"
    r = client(echo_server).generate(model=ECHO, prompt=prompt, raw=True, stream=False)
    assert r.response == "Echo: by hand"


def test_generate_without_prompt_loads_the_model(echo_server):
    r = client(echo_server).generate(model=ECHO, stream=False)
    assert r.done_reason == "load" and r.response == ""


def test_generate_logprobs(echo_server):
    r = client(echo_server).generate(model=ECHO, prompt="x y", logprobs=True, top_logprobs=2,
                                     stream=False)
    assert len(r.logprobs) == r.eval_count
    assert "".join(lp.token for lp in r.logprobs) == "Echo: x y"
    assert all(len(lp.top_logprobs) == 2 for lp in r.logprobs)
    assert all(lp.logprob <= 0 for lp in r.logprobs)


# ---- options -----------------------------------------------------------------


def test_num_predict_ends_with_length(echo_server):
    r = client(echo_server).chat(model=ECHO, stream=False, options={"num_predict": 2},
                                 messages=[{"role": "user", "content": "a b c d e"}])
    assert r.eval_count == 2
    assert r.done_reason == "length"
    assert r.message.content == "Echo"


def test_stop_option(echo_server):
    r = client(echo_server).generate(model=ECHO, prompt="cut here", stream=False,
                                     options={"stop": [" here"]})
    assert r.response == "Echo: cut"
    assert r.done_reason == "stop"


def test_unknown_options_are_ignored(echo_server):
    r = client(echo_server).generate(model=ECHO, prompt="ok", stream=False,
                                     options={"num_gpu": 1, "mirostat": 0, "no_such_option": 3})
    assert r.response == "Echo: ok"


def test_seed_reproduces_a_sampled_answer(llama_server):
    c = client(llama_server)

    def run(seed, temperature=1.0):
        return c.generate(model=STORIES, prompt="Once upon a time", stream=False,
                          options={"seed": seed, "temperature": temperature, "num_predict": 40,
                                   "top_k": 0, "top_p": 1.0}).response

    a = run(7)
    assert a and run(7) == a
    assert any(run(s) != a for s in (8, 9, 10))
    # Temperature 0 is greedy: the seed does not matter.
    assert run(1, 0.0) == run(2, 0.0)


def test_num_ctx_bounds_the_request(llama_server):
    r = client(llama_server).generate(model=STORIES, prompt="Once upon a time", stream=False,
                                      options={"num_ctx": 12, "temperature": 0})
    assert r.done_reason == "length"
    assert r.prompt_eval_count + r.eval_count == 12


# ---- tools and thinking -----------------------------------------------------


def test_tool_call_round_trip(echo_server):
    c = client(echo_server)
    messages = [{"role": "user", "content": CALL}]
    r = c.chat(model=ECHO, messages=messages, tools=TOOLS, stream=False)
    assert r.done_reason == "stop"
    assert r.message.content == ""
    [call] = r.message.tool_calls
    assert call.function.name == "get_weather"
    assert call.function.arguments == {"city": "Paris", "days": 3}
    # The result goes back as a "tool" message; the echo model repeats it.
    messages.append(r.message)
    messages.append({"role": "tool", "tool_name": "get_weather", "content": "sunny, 22C"})
    r2 = c.chat(model=ECHO, messages=messages, tools=TOOLS, stream=False)
    assert r2.message.content == "Tool results: sunny, 22C"
    assert not r2.message.tool_calls


def test_tool_call_streamed(echo_server):
    parts = list(client(echo_server).chat(model=ECHO, messages=[{"role": "user", "content": CALL}],
                                          tools=TOOLS, stream=True))
    calls = [tc for p in parts for tc in (p.message.tool_calls or [])]
    assert [(tc.function.name, dict(tc.function.arguments)) for tc in calls] == [
        ("get_weather", {"city": "Paris", "days": 3})]
    assert "".join(p.message.content or "" for p in parts) == ""
    assert parts[-1].done and parts[-1].done_reason == "stop"


def test_tools_from_python_functions(echo_server):
    def get_weather(city: str, days: int) -> str:
        """Weather for a city.

        Args:
          city: the city
          days: how many days
        """
        return "sunny"

    r = client(echo_server).chat(model=ECHO, messages=[{"role": "user", "content": CALL}],
                                 tools=[get_weather], stream=False)
    assert r.message.tool_calls[0].function.name == "get_weather"


@pytest.mark.parametrize("think", [True, "low", "medium", "high"])
def test_think_separates_the_reasoning(echo_server, think):
    r = client(echo_server).chat(model=ECHO, think=think, stream=False,
                                 messages=[{"role": "user", "content": "ponder"}])
    assert r.message.thinking == "Thinking about it."
    assert r.message.content == "Echo: ponder"


def test_think_off(echo_server):
    r = client(echo_server).chat(model=ECHO, think=False, stream=False,
                                 messages=[{"role": "user", "content": "quick"}])
    assert r.message.thinking is None
    assert r.message.content == "Echo: quick"


def test_think_streamed(echo_server):
    parts = list(client(echo_server).chat(model=ECHO, think=True, stream=True,
                                          messages=[{"role": "user", "content": "ponder"}]))
    assert "".join(p.message.thinking or "" for p in parts) == "Thinking about it."
    assert "".join(p.message.content or "" for p in parts) == "Echo: ponder"


def test_thinking_in_history_is_accepted(echo_server):
    messages = [{"role": "user", "content": "first"},
                {"role": "assistant", "content": "Echo: first", "thinking": "hmm"},
                {"role": "user", "content": "second"}]
    r = client(echo_server).chat(model=ECHO, messages=messages, think=True, stream=False)
    assert r.message.content == "Echo: second"


# ---- listings ----------------------------------------------------------------


def test_tags_show_ps_version(echo_server):
    c = client(echo_server)
    [m] = c.list().models
    assert m.model == ECHO
    assert m.details.family and m.details.format
    assert m.modified_at is not None
    show = c.show(ECHO)
    assert show.capabilities == ["completion", "tools", "thinking"]
    assert show.details.family == m.details.family
    assert show.modelinfo["general.architecture"] == m.details.family
    assert "temperature" in show.parameters
    assert c.show(ECHO + ":latest").capabilities == show.capabilities
    [p] = c.ps().models
    assert p.model == ECHO and p.context_length == 4096
    version = httpx.get(echo_server.url + "/api/version", timeout=5).json()["version"]
    assert [int(x) for x in version.split(".")] >= [0, 9, 0]  # thinking arrived in 0.9


def test_show_of_a_plain_model(llama_server):
    show = client(llama_server).show(STORIES)
    assert show.capabilities == ["completion"]
    assert show.details.parameter_size.endswith("K")  # 260K parameters


# ---- errors ------------------------------------------------------------------


def test_unknown_model_is_404(echo_server):
    with pytest.raises(ollama.ResponseError) as e:
        client(echo_server).chat(model="llama3", messages=[{"role": "user", "content": "x"}])
    assert e.value.status_code == 404
    assert e.value.error == 'model "llama3" not found, try pulling it first'
    with pytest.raises(ollama.ResponseError) as e:
        client(echo_server).show("llama3")
    assert e.value.status_code == 404


@pytest.mark.parametrize("path,body,names", [
    ("/api/chat", {"format": 3}, "'format'"),
    ("/api/chat", {"format": {"type": "string", "pattern": "a+"}}, "format: schema /pattern"),
    ("/api/generate", {"prompt": "x", "format": "yaml"}, "'format'"),
    ("/api/generate", {"prompt": "x", "suffix": "y"}, "'suffix'"),
    ("/api/generate", {"prompt": "x", "template": "{{ .Prompt }}"}, "'template'"),
    ("/api/generate", {"prompt": "x", "images": ["aGVsbG8="]}, "'images'"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x", "images": ["aGVsbG8="]}]},
     "'messages[0].images'"),
    ("/api/chat", {"messages": [{"role": "robot", "content": "x"}]}, "'messages[0].role'"),
    ("/api/chat", {"messages": [{"role": "user", "content": 3}]}, "'messages[0].content'"),
    ("/api/chat", {"messages": "hi"}, "'messages'"),
    ("/api/chat", {"options": {"temperature": "hot"}}, 'option "temperature" must be of type'),
    ("/api/chat", {"options": {"num_predict": "10"}}, 'option "num_predict" must be of type'),
    ("/api/chat", {"options": {"stop": "x"}}, 'option "stop" must be of type array'),
    ("/api/chat", {"options": {"top_p": 2}}, 'option "top_p"'),
    ("/api/chat", {"options": {"num_predict": 0}}, 'option "num_predict"'),
    ("/api/chat", {"options": []}, "'options'"),
    ("/api/chat", {"think": "max"}, "invalid think value"),
    ("/api/chat", {"stream": "yes"}, "'stream'"),
    ("/api/chat", {"keep_alive": [1]}, "'keep_alive'"),
    ("/api/chat", {"tools": [{"type": "function", "function": {}}]}, "'tools[0].function.name'"),
    ("/api/chat", {"top_logprobs": 99, "logprobs": True}, "top_logprobs"),
    ("/api/generate", {"prompt": "x", "context": [1, -2]}, "'context[1]'"),
    ("/api/generate", {"prompt": "x", "context": [10**9]}, "'context[0]'"),
    ("/api/generate", {"prompt": "x", "context": "abc"}, "'context'"),
    ("/api/generate", {"prompt": "x", "raw": True, "think": True}, "'think'"),
    ("/api/generate", {"prompt": 5}, "'prompt'"),
])
def test_bad_input_is_400_naming_the_field(echo_server, path, body, names):
    body = {"model": ECHO, "messages": [{"role": "user", "content": "x"}], **body}
    if path == "/api/generate":
        body.pop("messages")
    message = ollama_error(raw_post(echo_server, path, body), 400)
    assert names in message


def test_missing_model_and_bad_json(echo_server):
    assert ollama_error(raw_post(echo_server, "/api/chat", {"messages": []}),
                        400) == "model is required"
    assert "not valid JSON" in ollama_error(raw_post(echo_server, "/api/chat", None, raw="{"), 400)
    assert "must be a JSON object" in ollama_error(
        raw_post(echo_server, "/api/generate", None, raw="[1]"), 400)


def test_the_client_sees_the_error(echo_server):
    with pytest.raises(ollama.ResponseError) as e:
        client(echo_server).chat(model=ECHO, format={"type": "string", "pattern": "a+"},
                                 messages=[{"role": "user", "content": "x"}])
    assert e.value.status_code == 400 and "'pattern'" in e.value.error


PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer"}}}


def test_format_json_constrains_free_text(llama_server):
    # stories260K writes stories, never JSON, unless constrained.
    c = client(llama_server)
    free = c.generate(model="stories260K", prompt="Once upon a time",
                      options={"num_predict": 24, "seed": 3})
    with pytest.raises(ValueError):
        json.loads(free.response)
    r = c.generate(model="stories260K", prompt="Once upon a time", format="json",
                   options={"num_predict": 48, "seed": 3})
    assert isinstance(json.loads(r.response), (dict, list, str, int, float, bool, type(None)))


def test_format_schema_streamed_and_not(llama_server):
    c = client(llama_server)
    for stream in (False, True):
        out = c.chat(model="stories260K", messages=[{"role": "user", "content": "Tell me"}],
                     format=PERSON, stream=stream, options={"num_predict": 64, "seed": 5})
        text = "".join(p.message.content for p in out) if stream else out.message.content
        person = json.loads(text)
        jsonschema.validate(person, PERSON)


def test_format_with_thinking_constrains_only_the_answer(echo_server):
    r = client(echo_server).chat(
        model=ECHO, think=True, format=PERSON,
        messages=[{"role": "user", "content": 'REPLY {"name": "Ada", "age": 36}'}])
    assert json.loads(r.message.content) == {"name": "Ada", "age": 36}


def test_plain_model_refuses_tools_and_think(llama_server):
    for extra, what in (({"tools": TOOLS}, "does not support tools"),
                        ({"think": True}, "does not support thinking")):
        body = {"model": STORIES, "messages": [{"role": "user", "content": "x"}], **extra}
        assert what in ollama_error(raw_post(llama_server, "/api/chat", body), 400)


def test_prompt_longer_than_num_ctx(llama_server):
    body = {"model": STORIES, "prompt": "Once upon a time there was a dog", "stream": False,
            "options": {"num_ctx": 4}}
    assert "num_ctx" in ollama_error(raw_post(llama_server, "/api/generate", body), 400)


def test_unknown_api_route_is_404_in_ollama_shape(echo_server):
    assert "/api/pull" in ollama_error(raw_post(echo_server, "/api/pull", {"model": "x"}), 404)
    # "/" is the chat page (Ollama answers "Ollama is running" there): a probe gets 200.
    r = httpx.get(echo_server.url + "/", timeout=5)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")


def test_api_key(key_server):
    r = httpx.get(key_server.url + "/api/tags", timeout=5)
    assert ollama_error(r, 401) == "Invalid or missing API key"
    [m] = client(key_server, headers={"Authorization": "Bearer sekret"}).list().models
    assert m.model == STORIES
    with pytest.raises(ollama.ResponseError) as e:
        client(key_server, headers={"Authorization": "Bearer wrong"}).generate(model=STORIES,
                                                                               prompt="x")
    assert e.value.status_code == 401


# ---- disconnect ---------------------------------------------------------------


def wait_for(server, name, value, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        m = server.metrics()
        if m.get(name) == value:
            return m
        time.sleep(0.05)
    raise AssertionError(f"{name} never became {value}: {server.metrics()}")


def test_disconnect_mid_stream_cancels(slow_server):
    wait_for(slow_server, "dsv4_running_sequences", 0, seconds=5)
    before = slow_server.metrics().get("dsv4_sequences_cancelled_total", 0)
    body = {"model": STORIES, "prompt": "Once upon a time",
            "options": {"num_predict": 500, "seed": 1}}
    with httpx.stream("POST", slow_server.url + "/api/generate", json=body, timeout=30) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        parts = [json.loads(next(lines)) for _ in range(3)]  # a few tokens, then hang up
        assert all(p["done"] is False for p in parts)
        assert slow_server.metrics()["dsv4_running_sequences"] == 1
    # 500 tokens at 20 ms per step would take 10 s; the cancel takes a step or two.
    m = wait_for(slow_server, "dsv4_running_sequences", 0, seconds=5)
    assert m["dsv4_sequences_cancelled_total"] == before + 1
    assert m['dsv4_requests_total{route="/api/generate",status="200"}'] >= 1


def test_disconnect_while_waiting_for_a_whole_answer_cancels(slow_server):
    wait_for(slow_server, "dsv4_running_sequences", 0, seconds=5)
    before = slow_server.metrics().get("dsv4_sequences_cancelled_total", 0)
    # A raw client: send the request, read the first bytes of the (slow)
    # response, then hang up. The server notices at its next keep-alive space.
    body = json.dumps({"model": STORIES, "prompt": "Once upon a time", "stream": False,
                       "options": {"num_predict": 500}}).encode()
    host, port = slow_server.url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /api/generate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: " +
                     str(len(body)).encode() + b"\r\n\r\n" + body)
        assert sock.recv(12).startswith(b"HTTP/1.1 200")
        assert slow_server.metrics()["dsv4_running_sequences"] == 1
    m = wait_for(slow_server, "dsv4_running_sequences", 0, seconds=6)
    assert m["dsv4_sequences_cancelled_total"] == before + 1
