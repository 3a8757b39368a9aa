"""`dsv4 serve` with the official `openai` client: chat (plain format on
stories260K, DeepSeek-V4 format on the echo model), streaming, reasoning, a
tool-call round trip, logprobs, seeds, n, stop strings, usage, completions."""
import json

import openai
import pytest

PROMPT = "Once upon a time"


def client(server, **kw):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60,
                         **kw)


def chat(server, model, content, **kw):
    return client(server).chat.completions.create(
        model=model, messages=[{"role": "user", "content": content}], **kw)


def test_models_list(llama_server):
    ids = [m.id for m in client(llama_server).models.list()]
    assert ids == ["stories260K"]


def test_chat_plain_format_equals_completion(llama_server):
    r = chat(llama_server, "stories260K", PROMPT, max_tokens=24, temperature=0)
    text = r.choices[0].message.content
    assert r.object == "chat.completion"
    assert r.choices[0].finish_reason in ("stop", "length")
    assert len(text) > 0
    assert r.usage.completion_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # The plain chat format is the content after BOS, so the raw completion agrees.
    c = client(llama_server).completions.create(model="stories260K", prompt=PROMPT, max_tokens=24,
                                                temperature=0)
    assert c.choices[0].text == text
    assert c.usage.prompt_tokens == r.usage.prompt_tokens


def test_chat_stream_equals_non_stream(llama_server):
    whole = chat(llama_server, "stories260K", PROMPT, max_tokens=30, temperature=0)
    stream = chat(llama_server, "stories260K", PROMPT, max_tokens=30, temperature=0, stream=True,
                  stream_options={"include_usage": True})
    pieces, finish, usage, roles = [], None, None, []
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
            assert chunk.choices == []
            continue
        delta = chunk.choices[0].delta
        if delta.role:
            roles.append(delta.role)
        pieces.append(delta.content or "")
        finish = chunk.choices[0].finish_reason or finish
    assert roles == ["assistant"]
    assert "".join(pieces) == whole.choices[0].message.content
    assert finish == whole.choices[0].finish_reason
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_reasoning_content_is_separate(echo_server):
    r = chat(echo_server, "test-echo-model", "Hello there", reasoning_effort="high")
    msg = r.choices[0].message
    assert msg.content == "Echo: Hello there"
    assert msg.model_extra["reasoning_content"] == "Thinking about it."
    assert "</think>" not in msg.content
    # Thinking off: no reasoning at all.
    r = chat(echo_server, "test-echo-model", "Hello there")
    assert r.choices[0].message.content == "Echo: Hello there"
    assert "reasoning_content" not in (r.choices[0].message.model_extra or {})


def test_reasoning_streams_separately(echo_server):
    stream = chat(echo_server, "test-echo-model", "streamed", stream=True,
                  extra_body={"thinking": {"type": "enabled"}})
    reasoning, content = "", ""
    for chunk in stream:
        delta = chunk.choices[0].delta
        reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
        content += delta.content or ""
    assert reasoning == "Thinking about it."
    assert content == "Echo: streamed"


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


def test_tool_call_round_trip(echo_server):
    c = client(echo_server)
    messages = [{"role": "user", "content": CALL}]
    r = c.chat.completions.create(model="test-echo-model", messages=messages, tools=TOOLS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function"
    assert call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "days": 3}
    # Send the result back: the model sees it (the echo model repeats it).
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny, 22C"})
    r2 = c.chat.completions.create(model="test-echo-model", messages=messages, tools=TOOLS)
    assert r2.choices[0].finish_reason == "stop"
    assert r2.choices[0].message.content == "Tool results: sunny, 22C"
    assert not r2.choices[0].message.tool_calls


def test_tool_call_streaming(echo_server):
    stream = client(echo_server).chat.completions.create(
        model="test-echo-model", messages=[{"role": "user", "content": CALL}], tools=TOOLS,
        stream=True)
    calls, finish, content = {}, None, ""
    for chunk in stream:
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        for tc in choice.delta.tool_calls or []:
            entry = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            if tc.id:
                entry["id"] = tc.id
            if tc.function and tc.function.name:
                entry["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                entry["arguments"] += tc.function.arguments
        finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    assert content == ""
    assert list(calls) == [0]
    assert calls[0]["name"] == "get_weather"
    assert calls[0]["id"].startswith("call_")
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris", "days": 3}


def test_tools_rejected_by_plain_model(llama_server):
    with pytest.raises(openai.BadRequestError) as e:
        chat(llama_server, "stories260K", "hi", tools=TOOLS)
    assert "tools" in e.value.body["message"]


def test_logprobs(llama_server):
    r = chat(llama_server, "stories260K", PROMPT, max_tokens=12, temperature=0, logprobs=True,
             top_logprobs=3)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens
    assert "".join(t.token for t in lp) == r.choices[0].message.content
    for t in lp:
        assert t.logprob <= 0
        assert len(t.top_logprobs) == 3
        assert t.top_logprobs[0].token == t.token  # greedy takes the most likely
        assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob >= t.top_logprobs[2].logprob
        assert bytes(t.bytes).decode("utf-8", "replace") == t.token


def test_completion_logprobs(llama_server):
    r = client(llama_server).completions.create(model="stories260K", prompt=PROMPT, max_tokens=5,
                                                temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 5
    assert "".join(lp.tokens) == r.choices[0].text
    assert all(len(t) == 2 for t in lp.top_logprobs)
    assert lp.text_offset[0] == 0


def test_seed_reproducible(llama_server):
    def sample(seed):
        return chat(llama_server, "stories260K", PROMPT, max_tokens=40, temperature=1.0,
                    seed=seed).choices[0].message.content
    assert sample(1234) == sample(1234)
    others = {sample(s) for s in (1, 2, 3)}
    assert len(others) > 1  # different seeds, different stories


def test_n_choices(llama_server):
    r = chat(llama_server, "stories260K", PROMPT, max_tokens=20, temperature=1.0, seed=5, n=3)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert len({c.message.content for c in r.choices}) > 1
    assert r.usage.completion_tokens == sum(
        chat(llama_server, "stories260K", PROMPT, max_tokens=20, temperature=1.0, seed=5 + i)
        .usage.completion_tokens for i in range(3))


def test_stop_string(llama_server):
    whole = chat(llama_server, "stories260K", PROMPT, max_tokens=40, temperature=0)
    text = whole.choices[0].message.content
    stop = text[10:14]
    r = chat(llama_server, "stories260K", PROMPT, max_tokens=40, temperature=0, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == text[:text.index(stop)]


def test_max_completion_tokens(llama_server):
    r = client(llama_server).chat.completions.create(
        model="stories260K", messages=[{"role": "user", "content": PROMPT}],
        max_completion_tokens=3, temperature=0)
    assert r.usage.completion_tokens <= 3
