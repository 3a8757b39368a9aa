"""tool_choice enforcement (server/tool_choice.h) through the official
`openai` and `anthropic` clients on the scripted echo model with the
DeepSeek-V4 tokenizer and chat format. The echo model answers "Echo: ..." or,
for "CALL NAME {json}", a DSML call to NAME; constrained decoding must turn
that into exactly what tool_choice asks for: required -> calls to listed
tools, a named function -> one call to it, none -> no calls."""
import json

import anthropic
import httpx
import openai
import pytest

MODEL = "test-echo-model"
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                        "days": {"type": "integer"}}}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Time in a zone",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}},
]
NAMES = {"get_weather", "get_time"}
CALL = 'CALL get_weather {"city": "Paris", "days": 3}'
NAMED = {"type": "function", "function": {"name": "get_time"}}


def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def chat(server, content, **kw):
    kw.setdefault("max_tokens", 200)
    # Greedy: where the constraint refuses the echo script's token, every
    # allowed token has the same logit, and sampling among them could write a
    # non-JSON value into a string="false" parameter (the constraint does not
    # check values) about one run in five.
    kw.setdefault("temperature", 0)
    return oai(server).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": content}], tools=TOOLS, **kw)


def stream_calls(server, content, **kw):
    """Streams a chat; returns ({index: {name, arguments, id}}, content, finish_reason)."""
    calls, text, finish = {}, "", None
    for chunk in chat(server, content, stream=True, **kw):
        choice = chunk.choices[0]
        text += choice.delta.content or ""
        for tc in choice.delta.tool_calls or []:
            entry = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            entry["id"] = tc.id or entry["id"]
            if tc.function and tc.function.name:
                entry["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                entry["arguments"] += tc.function.arguments
        finish = choice.finish_reason or finish
    return calls, text, finish


def test_required_turns_a_plain_answer_into_a_call(echo_server):
    r = chat(echo_server, "Hello there", tool_choice="required")
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert choice.message.tool_calls
    for call in choice.message.tool_calls:
        assert call.function.name in NAMES
        assert isinstance(json.loads(call.function.arguments), dict)
    # auto: the same prompt is a plain answer.
    r = chat(echo_server, "Hello there")
    assert r.choices[0].message.content == "Echo: Hello there"
    assert not r.choices[0].message.tool_calls


def test_required_streaming(echo_server):
    calls, content, finish = stream_calls(echo_server, "Hello there", tool_choice="required")
    assert finish == "tool_calls"
    assert content == ""
    assert calls
    for entry in calls.values():
        assert entry["name"] in NAMES
        assert entry["id"].startswith("call_")
        assert isinstance(json.loads(entry["arguments"]), dict)


def test_required_without_parallel_calls_makes_one(echo_server):
    r = chat(echo_server, "Hello there", tool_choice="required", parallel_tool_calls=False)
    [call] = r.choices[0].message.tool_calls
    assert call.function.name in NAMES
    m = messages(echo_server, "Hello there",
                 tool_choice={"type": "any", "disable_parallel_tool_use": True})
    assert len([b for b in m.content if b.type == "tool_use"]) == 1


def test_required_keeps_a_call_the_model_makes(echo_server):
    r = chat(echo_server, CALL, tool_choice="required")
    [call] = r.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "days": 3}
    assert r.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("prompt", ["Hello there", CALL])
def test_named_function(echo_server, prompt):
    r = chat(echo_server, prompt, tool_choice=NAMED)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.function.name == "get_time"
    assert isinstance(json.loads(call.function.arguments), dict)


@pytest.mark.parametrize("prompt", ["Hello there", CALL])
def test_named_function_streaming(echo_server, prompt):
    calls, content, finish = stream_calls(echo_server, prompt, tool_choice=NAMED)
    assert finish == "tool_calls"
    assert content == ""
    assert [c["name"] for c in calls.values()] == ["get_time"]
    assert isinstance(json.loads(calls[0]["arguments"]), dict)


def test_named_function_after_reasoning(echo_server):
    r = chat(echo_server, "Hello there", tool_choice=NAMED, reasoning_effort="high")
    msg = r.choices[0].message
    assert msg.model_extra["reasoning_content"] == "Thinking about it."
    [call] = msg.tool_calls
    assert call.function.name == "get_time"


def test_forced_call_cut_by_max_tokens_is_closed(echo_server):
    for max_tokens in (1, 3, 12):
        r = chat(echo_server, CALL, tool_choice="required", max_tokens=max_tokens)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls", max_tokens
        assert r.usage.completion_tokens <= max_tokens
        [call] = choice.message.tool_calls
        assert call.function.name in NAMES
        assert isinstance(json.loads(call.function.arguments), dict)


def test_none_never_calls(echo_server):
    for stream in (False, True):
        if stream:
            calls, _, finish = stream_calls(echo_server, CALL, tool_choice="none")
            assert calls == {}
        else:
            r = chat(echo_server, CALL, tool_choice="none")
            assert not r.choices[0].message.tool_calls
            finish = r.choices[0].finish_reason
        assert finish in ("stop", "length")


def test_tool_choice_needs_matching_tools(echo_server):
    for body in (
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
        {"tool_choice": "required"},
        {"tools": [{"type": "function", "function": {"name": 'a"b'}}]},
    ):
        r = httpx.post(echo_server.url + "/v1/chat/completions", timeout=30, json={
            "model": MODEL, "messages": [{"role": "user", "content": "x"}], **body})
        assert r.status_code == 400, body
        assert "tool" in r.json()["error"]["message"]


# ---- Anthropic ----

A_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
            "input_schema": t["function"]["parameters"]} for t in TOOLS]


def messages(server, content, **kw):
    c = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=60)
    # Greedy, as chat(). In the body, not as an argument: anthropic 2.x
    # dropped `temperature` from messages.create.
    kw.setdefault("extra_body", {"temperature": 0})
    return c.messages.create(model=MODEL, max_tokens=200, tools=A_TOOLS,
                             messages=[{"role": "user", "content": content}], **kw)


def test_anthropic_any(echo_server):
    m = messages(echo_server, "Hello there", tool_choice={"type": "any"})
    assert m.stop_reason == "tool_use"
    uses = [b for b in m.content if b.type == "tool_use"]
    assert uses and all(b.name in NAMES for b in uses)
    assert all(isinstance(b.input, dict) for b in uses)


def test_anthropic_named_tool(echo_server):
    m = messages(echo_server, CALL, tool_choice={"type": "tool", "name": "get_time"})
    assert m.stop_reason == "tool_use"
    assert [b.name for b in m.content if b.type == "tool_use"] == ["get_time"]


def test_anthropic_named_tool_streaming(echo_server):
    c = anthropic.Anthropic(base_url=echo_server.url, api_key="unused", max_retries=0, timeout=60)
    with c.messages.stream(model=MODEL, max_tokens=200, tools=A_TOOLS,
                           extra_body={"temperature": 0},
                           tool_choice={"type": "tool", "name": "get_time"},
                           messages=[{"role": "user", "content": "Hello there"}]) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [b.name for b in final.content if b.type == "tool_use"] == ["get_time"]


def test_anthropic_none(echo_server):
    m = messages(echo_server, CALL, tool_choice={"type": "none"})
    assert not [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason in ("end_turn", "max_tokens")


def test_anthropic_tool_choice_errors(echo_server):
    for body in ({"tools": A_TOOLS, "tool_choice": {"type": "tool", "name": "nope"}},
                 {"tool_choice": {"type": "any"}}):
        r = httpx.post(echo_server.url + "/v1/messages", timeout=30, json={
            "model": MODEL, "max_tokens": 10, "messages": [{"role": "user", "content": "x"}],
            **body})
        assert r.status_code == 400, body
        assert r.json()["type"] == "error"


def test_forced_call_arguments_follow_the_tool_schema(echo_server):
    # "days" is an integer in the schema: the echo model's "three" (a string)
    # is bent into an integer; "city" passes unchanged.
    c = chat(echo_server, 'CALL get_weather {"city": "Paris", "days": "three"}',
             tool_choice={"type": "function", "function": {"name": "get_weather"}})
    calls = c.choices[0].message.tool_calls
    assert len(calls) == 1 and calls[0].function.name == "get_weather"
    args = json.loads(calls[0].function.arguments)
    assert args["city"] == "Paris"
    assert isinstance(args.get("days", 0), int)
    assert set(args) <= {"city", "days"}


def test_auto_call_arguments_follow_the_tool_schema(echo_server):
    # tool_choice auto: the model chooses to call; its arguments still follow
    # the schema ("three" is bent into an integer). A plain answer is untouched.
    c = chat(echo_server, 'CALL get_weather {"city": "Paris", "days": "three"}')
    calls = c.choices[0].message.tool_calls
    assert len(calls) == 1 and calls[0].function.name == "get_weather"
    args = json.loads(calls[0].function.arguments)
    assert args["city"] == "Paris" and isinstance(args.get("days", 0), int)
    assert c.choices[0].finish_reason == "tool_calls"
    plain = chat(echo_server, "Hello there")
    assert plain.choices[0].message.tool_calls is None
    assert plain.choices[0].message.content
