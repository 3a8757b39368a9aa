"""OpenAI's legacy function calling (`functions`, `function_call`) through the
official `openai` client on the scripted echo model (DeepSeek-V4 tokenizer and
chat format). The server maps them to tools / tool_choice; a request with
`functions` is answered in the legacy shape: `message.function_call` ({name,
arguments}, no `tool_calls`), finish_reason "function_call", and
`delta.function_call` pieces when streamed. The echo model answers
"CALL NAME {json}" with a DSML call to NAME, anything else with "Echo: ..."."""
import json

import httpx
import jsonschema
import openai
import pytest

MODEL = "test-echo-model"
WEATHER = {"type": "object",
           "properties": {"city": {"type": "string"},
                          "days": {"type": "integer"},
                          "unit": {"enum": ["C", "F"]}},
           "required": ["city", "days", "unit"],
           "additionalProperties": False}
FUNCTIONS = [
    {"name": "get_weather", "description": "Weather for a city", "parameters": WEATHER},
    {"name": "get_time", "description": "Time in a zone",
     "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}},
]
CALL = 'CALL get_weather {"city": "Paris", "days": 3, "unit": "C"}'


def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def chat(server, content, **kw):
    kw.setdefault("max_tokens", 200)
    kw.setdefault("temperature", 0)  # greedy: deterministic where the constraint bends the script
    messages = content if isinstance(content, list) else [{"role": "user", "content": content}]
    return oai(server).chat.completions.create(model=MODEL, messages=messages,
                                               functions=FUNCTIONS, **kw)


def stream(server, content, **kw):
    """Streams a chat; returns ({name, arguments} or None, content, finish_reason)."""
    call, text, finish = None, "", None
    for chunk in chat(server, content, stream=True, **kw):
        choice = chunk.choices[0]
        assert choice.delta.tool_calls is None  # the legacy shape only
        text += choice.delta.content or ""
        fc = choice.delta.function_call
        if fc is not None:
            if call is None:
                assert fc.name, "the first function_call delta names the function"
                call = {"name": fc.name, "arguments": ""}
            else:
                assert not fc.name, "the name comes once"
            call["arguments"] += fc.arguments or ""
        finish = choice.finish_reason or finish
    return call, text, finish


def test_call_in_the_legacy_shape(echo_server):
    r = chat(echo_server, CALL)
    choice = r.choices[0]
    assert choice.finish_reason == "function_call"
    assert choice.message.content is None
    assert choice.message.tool_calls is None
    assert choice.message.function_call.name == "get_weather"
    assert json.loads(choice.message.function_call.arguments) == {
        "city": "Paris", "days": 3, "unit": "C"}
    # The raw body has no tool_calls key at all.
    raw = httpx.post(echo_server.url + "/v1/chat/completions", timeout=60, json={
        "model": MODEL, "messages": [{"role": "user", "content": CALL}],
        "functions": FUNCTIONS}).json()
    assert "tool_calls" not in raw["choices"][0]["message"]
    assert raw["choices"][0]["message"]["function_call"]["name"] == "get_weather"


def test_plain_answer_with_functions(echo_server):
    r = chat(echo_server, "Hello there")
    choice = r.choices[0]
    assert choice.message.content == "Echo: Hello there"
    assert choice.message.function_call is None
    assert choice.finish_reason == "stop"


def test_streamed_call(echo_server):
    call, text, finish = stream(echo_server, CALL)
    assert finish == "function_call"
    assert text == ""
    assert call["name"] == "get_weather"
    assert json.loads(call["arguments"]) == {"city": "Paris", "days": 3, "unit": "C"}


def test_streamed_plain_answer(echo_server):
    call, text, finish = stream(echo_server, "Hello there")
    assert call is None
    assert text == "Echo: Hello there"
    assert finish == "stop"


@pytest.mark.parametrize("prompt", [
    "Hello there",                                  # no call: one is forced
    'CALL get_time {"tz": "UTC"}',                  # a call to another function
    'CALL get_weather {"city": "Oslo", "days": "three"}',  # a wrong type, a missing argument
])
def test_forced_function_call_follows_the_parameters(echo_server, prompt):
    r = chat(echo_server, prompt, function_call={"name": "get_weather"})
    choice = r.choices[0]
    assert choice.finish_reason == "function_call"
    assert choice.message.function_call.name == "get_weather"
    args = json.loads(choice.message.function_call.arguments)
    jsonschema.Draft202012Validator(WEATHER).validate(args)
    if "Oslo" in prompt:
        assert args["city"] == "Oslo"
    # Streamed, the same call.
    call, text, finish = stream(echo_server, prompt, function_call={"name": "get_weather"})
    assert finish == "function_call" and text == ""
    assert call["name"] == "get_weather"
    assert json.loads(call["arguments"]) == args


def test_function_call_none_and_auto(echo_server):
    r = chat(echo_server, CALL, function_call="none")
    assert r.choices[0].message.function_call is None
    assert r.choices[0].finish_reason in ("stop", "length")
    r = chat(echo_server, CALL, function_call="auto")
    assert r.choices[0].message.function_call.name == "get_weather"


def test_history_with_role_function(echo_server):
    history = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None,
         "function_call": {"name": "get_weather",
                           "arguments": '{"city": "Paris", "days": 1, "unit": "C"}'}},
        {"role": "function", "name": "get_weather", "content": "sunny, 21 C"},
    ]
    r = chat(echo_server, history)
    assert r.choices[0].message.content == "Tool results: sunny, 21 C"
    assert r.choices[0].message.function_call is None
    assert r.choices[0].finish_reason == "stop"
    # The call the server made, given back as it came.
    first = chat(echo_server, CALL).choices[0].message
    r = chat(echo_server, [
        {"role": "user", "content": CALL},
        {"role": "assistant", "content": first.content,
         "function_call": {"name": first.function_call.name,
                           "arguments": first.function_call.arguments}},
        {"role": "function", "name": "get_weather", "content": "rain"}])
    assert r.choices[0].message.content == "Tool results: rain"


def post(server, body):
    return httpx.post(server.url + "/v1/chat/completions", timeout=30,
                      json={"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                            **body})


TOOLS = [{"type": "function", "function": f} for f in FUNCTIONS]


@pytest.mark.parametrize("body, field", [
    ({"functions": FUNCTIONS, "tools": TOOLS}, "functions"),
    ({"functions": FUNCTIONS, "function_call": "auto", "tool_choice": "auto"}, "function_call"),
    ({"tools": TOOLS, "function_call": {"name": "get_weather"}}, "function_call"),
    ({"functions": FUNCTIONS, "function_call": {"name": "nope"}}, "function_call"),
    ({"functions": FUNCTIONS, "function_call": "required"}, "function_call"),
    ({"functions": FUNCTIONS, "function_call": {"name": 5}}, "function_call.name"),
    ({"functions": []}, "functions"),
    ({"functions": [{"description": "no name"}]}, "functions[0].name"),
    ({"functions": [{"name": "f", "parameters": "object"}]}, "functions[0].parameters"),
    ({"messages": [{"role": "user", "content": "x"},
                   {"role": "function", "content": "r"}]}, "messages[1].name"),
    ({"messages": [{"role": "user", "content": "x"},
                   {"role": "assistant", "function_call": {"arguments": "{}"}}]},
     "messages[1].function_call.name"),
])
def test_errors_name_the_field(echo_server, body, field):
    r = post(echo_server, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert err["message"].startswith(f"'{field}' "), err["message"]
    # The SDK raises BadRequestError for the same request.
    if "messages" not in body:
        with pytest.raises(openai.BadRequestError) as e:
            oai(echo_server).chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "x"}], **body)
        assert f"'{field}'" in str(e.value)
    assert httpx.get(echo_server.url + "/health", timeout=5).status_code == 200


def test_completions_refuse_functions(echo_server):
    r = httpx.post(echo_server.url + "/v1/completions", timeout=30, json={
        "model": MODEL, "prompt": "x", "functions": FUNCTIONS})
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("'functions' ")
