"""The OpenAI Responses API (/v1/responses, src/server/responses_api.h) through
the official `openai` client (`client.responses`) on the scripted echo model
with the DeepSeek-V4 tokenizer and chat format. The echo model answers
"Echo: <last user text>", "Thinking about it.</think>" first in thinking
mode, a DSML call to NAME for "CALL NAME {json}", and "Tool results: R" when
the last user turn holds tool results (src/engine/echo_model.h)."""
import json
import signal
import time

import httpx
import jsonschema
import openai
import pydantic
import pytest

from conftest import Server, V4_TOKENIZER

MODEL = "test-echo-model"
TOOLS = [
    {"type": "function", "name": "get_weather", "description": "Weather for a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "days": {"type": "integer"}}},
     "strict": False},
    {"type": "function", "name": "get_time", "description": "Time in a zone",
     "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}},
]
CALL = 'CALL get_weather {"city": "Paris", "days": 3}'


def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def create(server, **kw):
    kw.setdefault("temperature", 0)
    return oai(server).responses.create(model=MODEL, **kw)


def raw_post(server, body):
    return httpx.post(server.url + "/v1/responses", json=body, timeout=30)


def stream_events(server, **kw):
    """create(stream=True): the list of events."""
    kw.setdefault("temperature", 0)
    return list(oai(server).responses.create(model=MODEL, stream=True, **kw))


def test_create_with_string_input(echo_server):
    r = create(echo_server, input="Hello there")
    assert r.id.startswith("resp_")
    assert r.object == "response"
    assert r.status == "completed"
    assert r.model == MODEL
    assert r.created_at > 0
    assert r.output_text == "Echo: Hello there"
    assert len(r.output) == 1
    msg = r.output[0]
    assert msg.type == "message" and msg.role == "assistant" and msg.status == "completed"
    assert msg.id.startswith("msg_")
    assert [c.type for c in msg.content] == ["output_text"]
    u = r.usage
    assert u.input_tokens > 0 and u.output_tokens > 0
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert u.output_tokens_details.reasoning_tokens == 0
    assert u.input_tokens_details.cached_tokens >= 0
    assert r.store is True and r.parallel_tool_calls is True and r.tools == []


def test_create_with_item_input(echo_server):
    r = create(echo_server, input=[
        {"role": "system", "content": "You are terse."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "one"}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Echo: one"}]},
        {"role": "developer", "content": [{"type": "input_text", "text": "Be nice."}]},
        {"role": "user", "content": [{"type": "input_text", "text": "two"},
                                     {"type": "input_text", "text": "three"}]},
    ])
    assert r.status == "completed"
    assert r.output_text == "Echo: two\n\nthree"


def test_instructions_are_a_system_message_and_are_echoed(echo_server):
    plain = create(echo_server, input="Hi")
    instructed = create(echo_server, input="Hi", instructions="Answer in French, briefly.")
    assert instructed.output_text == "Echo: Hi"
    assert instructed.instructions == "Answer in French, briefly."
    assert plain.instructions is None
    assert instructed.usage.input_tokens > plain.usage.input_tokens
    # Not carried over by previous_response_id (OpenAI's rule): the follow-up
    # has the same prompt whether the first turn had instructions or not.
    a = create(echo_server, input="next", previous_response_id=plain.id)
    b = create(echo_server, input="next", previous_response_id=instructed.id)
    assert b.instructions is None
    assert a.usage.input_tokens == b.usage.input_tokens


def test_stream_helper_event_order_and_text(echo_server):
    expected = create(echo_server, input="streamed words").output_text
    with oai(echo_server).responses.stream(model=MODEL, input="streamed words",
                                           temperature=0) as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [e.type for e in events]
    assert types[:5] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added",
                         "response.output_text.delta"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    assert set(types[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == expected == final.output_text == "Echo: streamed words"
    done = next(e for e in events if e.type == "response.output_text.done")
    assert done.text == expected
    assert final.status == "completed"
    assert final.id == events[0].response.id
    # A streamed response is stored too.
    assert oai(echo_server).responses.retrieve(final.id).output_text == expected


def test_stream_helper_with_thinking_and_strict_tools(echo_server):
    tools = [{**TOOLS[0], "strict": True}]
    with oai(echo_server).responses.stream(model=MODEL, input=CALL, tools=tools, temperature=0,
                                           reasoning={"effort": "high"}) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [o.type for o in final.output] == ["reasoning", "function_call"]
    assert final.output[0].content[0].text == "Thinking about it."
    call = final.output[1]
    assert call.parsed_arguments == {"city": "Paris", "days": 3}
    types = [e.type for e in events]
    assert types.count("response.output_item.added") == types.count(
        "response.output_item.done") == 2
    assert "response.function_call_arguments.done" in types


def test_create_stream_true(echo_server):
    events = stream_events(echo_server, input="raw stream")
    assert events[0].type == "response.created"
    assert events[0].response.status == "in_progress"
    assert events[1].type == "response.in_progress"
    assert events[-1].type == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added = [e for e in events if e.type == "response.output_item.added"]
    done = [e for e in events if e.type == "response.output_item.done"]
    assert len(added) == len(done) == 1
    assert added[0].item.id == done[0].item.id == events[-1].response.output[0].id
    assert added[0].item.status == "in_progress" and done[0].item.status == "completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == events[-1].response.output_text == "Echo: raw stream"
    assert events[-1].response.usage.output_tokens > 0


def test_function_call_then_output_continues(echo_server):
    r = create(echo_server, input=CALL, tools=TOOLS)
    assert r.status == "completed"
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and r.output_text == ""
    call = calls[0]
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris", "days": 3}
    assert call.call_id.startswith("call_") and call.id.startswith("fc_")
    assert call.status == "completed"
    assert [t.name for t in r.tools] == ["get_weather", "get_time"]
    r2 = create(echo_server, previous_response_id=r.id, tools=TOOLS, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}])
    assert r2.output_text == "Tool results: sunny, 21 C"
    assert r2.previous_response_id == r.id
    # The same, stateless: the call given back as input items.
    r3 = create(echo_server, tools=TOOLS, store=False, input=[
        {"role": "user", "content": CALL},
        {"type": "function_call", "call_id": "c1", "name": "get_weather",
         "arguments": call.arguments},
        {"type": "function_call_output", "call_id": "c1", "output": "rain"}])
    assert r3.output_text == "Tool results: rain"


def test_function_call_streaming(echo_server):
    events = stream_events(echo_server, input=CALL, tools=TOOLS)
    added = [e for e in events if e.type == "response.output_item.added"]
    assert [a.item.type for a in added] == ["function_call"]
    assert added[0].item.name == "get_weather" and added[0].item.arguments == ""
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert done.arguments == args
    assert json.loads(args) == {"city": "Paris", "days": 3}
    final = events[-1].response
    assert events[-1].type == "response.completed"
    assert final.output[0].arguments == args
    assert final.output[0].call_id == added[0].item.call_id


def test_tool_choice(echo_server):
    r = create(echo_server, input="Hello there", tools=TOOLS, tool_choice="required")
    assert [o.type for o in r.output] == ["function_call"] * len(r.output) and r.output
    assert all(o.name in ("get_weather", "get_time") for o in r.output)
    r = create(echo_server, input=CALL, tools=TOOLS,
               tool_choice={"type": "function", "name": "get_time"})
    assert [(o.type, o.name) for o in r.output] == [("function_call", "get_time")]
    assert r.tool_choice.name == "get_time"
    r = create(echo_server, input=CALL, tools=TOOLS, tool_choice="none")
    assert all(o.type == "message" for o in r.output)
    r = create(echo_server, input=CALL, tools=TOOLS, parallel_tool_calls=False)
    assert r.parallel_tool_calls is False
    assert [o.type for o in r.output] == ["function_call"]


def test_reasoning_items_with_thinking(echo_server):
    r = create(echo_server, input="think first", reasoning={"effort": "high"})
    assert [o.type for o in r.output] == ["reasoning", "message"]
    rs = r.output[0]
    assert rs.id.startswith("rs_")
    assert [c.text for c in rs.content] == ["Thinking about it."]
    assert rs.summary == []
    assert r.output_text == "Echo: think first"
    assert 0 < r.usage.output_tokens_details.reasoning_tokens < r.usage.output_tokens
    assert r.reasoning.effort == "high"
    # effort none: thinking off.
    r = create(echo_server, input="think first", reasoning={"effort": "none"})
    assert [o.type for o in r.output] == ["message"]
    # A summary asked for: the thinking text, streamed as both.
    events = stream_events(echo_server, input="think first",
                           reasoning={"effort": "medium", "summary": "auto"})
    final = events[-1].response
    assert final.output[0].summary[0].text == "Thinking about it."
    text = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    summary = "".join(e.delta for e in events
                      if e.type == "response.reasoning_summary_text.delta")
    assert text == summary == "Thinking about it."
    types = [e.type for e in events]
    assert types.index("response.reasoning_text.done") < types.index("response.output_text.delta")
    # The reasoning item given back as input (stateless) is accepted.
    r = create(echo_server, store=False, reasoning={"effort": "high"}, input=[
        {"role": "user", "content": "a"},
        {"type": "reasoning", "id": final.output[0].id, "summary": [],
         "content": [{"type": "reasoning_text", "text": "Thinking about it."}]},
        {"role": "assistant", "content": "Echo: a"},
        {"role": "user", "content": "b"}])
    assert r.output_text == "Echo: b"


def test_encrypted_reasoning_round_trip(echo_server):
    r = create(echo_server, input="x", store=False, reasoning={"effort": "high"},
               include=["reasoning.encrypted_content"])
    assert r.output[0].encrypted_content == "Thinking about it."


def test_previous_response_id_chains_and_does_not_leak(echo_server):
    r1 = create(echo_server, input="first")
    r2 = create(echo_server, input="second", previous_response_id=r1.id)
    r3 = create(echo_server, input="third", previous_response_id=r2.id)
    assert r3.output_text == "Echo: third"
    assert r1.usage.input_tokens < r2.usage.input_tokens < r3.usage.input_tokens
    # An unrelated request sees none of it.
    alone = create(echo_server, input="third")
    again = create(echo_server, input="third")
    assert alone.usage.input_tokens == again.usage.input_tokens < r3.usage.input_tokens
    items = list(oai(echo_server).responses.input_items.list(r3.id, order="asc"))
    texts = [(i.type, i.role, i.content[0].text) for i in items]
    assert texts == [("message", "user", "first"), ("message", "assistant", "Echo: first"),
                     ("message", "user", "second"), ("message", "assistant", "Echo: second"),
                     ("message", "user", "third")]
    assert all(i.id for i in items)
    # Default order: newest first; limit and after page through.
    page = oai(echo_server).responses.input_items.list(r3.id, limit=2)
    assert [i.content[0].text for i in page.data] == ["third", "Echo: second"]
    assert page.has_more is True
    nxt = oai(echo_server).responses.input_items.list(r3.id, limit=2, after=page.data[-1].id)
    assert [i.content[0].text for i in nxt.data] == ["second", "Echo: first"]


def test_retrieve_and_delete(echo_server):
    client = oai(echo_server)
    r = create(echo_server, input="keep me", metadata={"k": "v"}, user="u1")
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == "Echo: keep me"
    assert got.metadata == {"k": "v"} and got.user == "u1"
    assert got.usage.total_tokens == r.usage.total_tokens
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.retrieve(r.id)
    assert e.value.body["code"] == "response_not_found"
    assert r.id in e.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model=MODEL, input="x", previous_response_id=r.id)
    assert e.value.body["param"] == "previous_response_id"


def test_max_output_tokens_is_incomplete(echo_server):
    r = create(echo_server, input="a long enough answer", max_output_tokens=2)
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 2
    assert r.output[0].status == "incomplete"
    assert r.max_output_tokens == 2
    events = stream_events(echo_server, input="a long enough answer", max_output_tokens=2)
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"
    # An incomplete response is stored and can be continued.
    r2 = create(echo_server, input="go on", previous_response_id=r.id)
    assert r2.output_text == "Echo: go on"


def test_store_false_is_not_kept(echo_server):
    r = create(echo_server, input="forget me", store=False)
    assert r.store is False and r.output_text == "Echo: forget me"
    resp = raw_post(echo_server, {"model": MODEL, "input": "x", "previous_response_id": r.id})
    assert resp.status_code == 404
    err = resp.json()["error"]
    assert err["param"] == "previous_response_id"
    assert err["type"] == "invalid_request_error"
    assert r.id in err["message"]
    assert httpx.get(f"{echo_server.url}/v1/responses/{r.id}").status_code == 404


BAD = [
    ({"input": "x", "model": "nope"}, 404, "model", "nope"),
    ({"model": MODEL}, 400, "input", "input"),
    ({"model": MODEL, "input": 42}, 400, "input", "must be a string or an array"),
    ({"model": MODEL, "input": [{"role": "robot", "content": "x"}]}, 400, "input[0].role",
     "robot"),
    ({"model": MODEL, "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "http://x"}]}]}, 400, "input[0].content[0].type",
     "input_image"),
    ({"model": MODEL, "input": [{"type": "function_call_output", "output": "x"}]}, 400,
     "input[0].call_id", "call_id"),
    ({"model": MODEL, "input": [{"type": "function_call", "call_id": "c", "name": "f",
                                 "arguments": "[1]"}]}, 400, "input[0].arguments", "object"),
    ({"model": MODEL, "input": [{"type": "web_search_call", "id": "w"}]}, 400, "input[0].type",
     "web_search_call"),
    ({"model": MODEL, "input": "x", "tools": [{"type": "web_search"}]}, 400, "tools[0].type",
     "web_search"),
    ({"model": MODEL, "input": "x", "tools": [{"type": "function", "name": "a\"b"}]}, 400,
     "tools[0].name", "quote"),
    ({"model": MODEL, "input": "x", "text": {"format": {"type": "json_schema", "name": "s"}}},
     400, "text.format.schema", "required"),
    ({"model": MODEL, "input": "x", "text": {"format": {"type": "json_schema", "name": "s",
                                                        "schema": {"type": "string",
                                                                   "pattern": "a+"}}}},
     400, "text.format.schema", "'pattern'"),
    ({"model": MODEL, "input": "x", "temperature": 5}, 400, "temperature", "temperature"),
    ({"model": MODEL, "input": "x", "max_output_tokens": 0}, 400, "max_output_tokens",
     "max_output_tokens"),
    ({"model": MODEL, "input": "x", "tools": TOOLS,
      "tool_choice": {"type": "function", "name": "nope"}}, 400, "tool_choice.name", "nope"),
    ({"model": MODEL, "input": "x", "tool_choice": "required"}, 400, "tool_choice", "tools"),
    ({"model": MODEL, "input": "x", "include": ["message.output_text.logprobs"]}, 400,
     "include[0]", "message.output_text.logprobs"),
    ({"model": MODEL, "input": "x", "reasoning": {"effort": "extreme"}}, 400,
     "reasoning.effort", "extreme"),
    ({"model": MODEL, "input": "x", "background": True}, 400, "background", "background"),
    ({"model": MODEL, "input": "x", "truncation": "middle"}, 400, "truncation", "middle"),
    ({"model": MODEL, "input": "x", "metadata": {"k": 1}}, 400, "metadata.k", "string"),
    ({"model": MODEL, "input": "x", "stop": [""]}, 400, "stop[0]", "stop"),
]


@pytest.mark.parametrize("body,status,param,needle", BAD,
                         ids=[f"{b[2]}-{i}" for i, b in enumerate(BAD)])
def test_bad_requests_name_the_field(echo_server, body, status, param, needle):
    resp = raw_post(echo_server, body)
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["param"] == param, err
    assert needle in err["message"], err
    assert err["type"] == "invalid_request_error"


def test_bad_json_and_sdk_error(echo_server):
    resp = httpx.post(echo_server.url + "/v1/responses", content=b"{not json", timeout=10)
    assert resp.status_code == 400
    assert "not valid JSON" in resp.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError) as e:
        oai(echo_server).responses.create(model=MODEL, input="x",
                                          tools=[{"type": "web_search_preview"}])
    assert e.value.body["param"] == "tools[0].type"
    assert "web_search_preview" in e.value.body["message"]
    # The server is still fine.
    assert create(echo_server, input="ok").output_text == "Echo: ok"


def test_input_items_bad_query(echo_server):
    r = create(echo_server, input="q")
    base = f"{echo_server.url}/v1/responses/{r.id}/input_items"
    for query, param in [("limit=0", "limit"), ("limit=x", "limit"), ("order=up", "order"),
                         ("after=nope", "after")]:
        resp = httpx.get(f"{base}?{query}")
        assert resp.status_code == 400, query
        assert resp.json()["error"]["param"] == param
    assert httpx.get(f"{echo_server.url}/v1/responses/resp_nope/input_items").status_code == 404


def test_metrics_count_responses_routes(echo_server):
    r = create(echo_server, input="m")
    oai(echo_server).responses.retrieve(r.id)
    httpx.get(f"{echo_server.url}/v1/responses/resp_unknown/input_items")
    m = echo_server.metrics()
    assert m['dsv4_requests_total{route="/v1/responses",status="200"}'] >= 1
    assert m['dsv4_requests_total{route="/v1/responses/{id}",status="200"}'] >= 1
    assert m['dsv4_requests_total{route="/v1/responses/{id}",status="404"}'] >= 1


@pytest.fixture(scope="module")
def small_store_server():
    server = Server("--test-echo-model", "--tokenizer", str(V4_TOKENIZER), "--max-sequences", "2",
                    "--responses-store", "2")
    yield server
    server.stop()
    assert server.proc.returncode == 0


def test_store_evicts_least_recently_used(small_store_server):
    s = small_store_server
    a = create(s, input="a")
    b = create(s, input="b")
    oai(s).responses.retrieve(a.id)  # a is now the most recently used
    c = create(s, input="c")
    assert oai(s).responses.retrieve(a.id).id == a.id
    assert oai(s).responses.retrieve(c.id).id == c.id
    with pytest.raises(openai.NotFoundError):
        oai(s).responses.retrieve(b.id)


def test_plain_format_model(llama_server):
    client = openai.OpenAI(base_url=llama_server.url + "/v1", api_key="x", max_retries=0)
    model = client.models.list().data[0].id
    r = client.responses.create(model=model, input="Once upon a time", max_output_tokens=8)
    assert r.status in ("completed", "incomplete")
    assert r.usage.output_tokens <= 8
    resp = httpx.post(llama_server.url + "/v1/responses", timeout=10, json={
        "model": model, "input": "x", "tools": TOOLS})
    assert resp.status_code == 400


PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer"}}}


class Person(pydantic.BaseModel):
    name: str
    age: int


def test_text_format_constrains_the_answer(llama_server):
    # stories260K writes stories, never JSON, unless constrained.
    client = openai.OpenAI(base_url=llama_server.url + "/v1", api_key="x", max_retries=0)
    r = client.responses.create(model="stories260K", input="Tell me", max_output_tokens=64,
                                text={"format": {"type": "json_schema", "name": "person",
                                                 "schema": PERSON, "strict": True}})
    assert r.status == "completed"
    jsonschema.validate(json.loads(r.output_text), PERSON)
    assert r.text.format.type == "json_schema"
    r = client.responses.create(model="stories260K", input="Tell me", max_output_tokens=48,
                                text={"format": {"type": "json_object"}})
    json.loads(r.output_text)
    parsed = client.responses.parse(model="stories260K", input="Tell me", max_output_tokens=64,
                                    text_format=Person)
    assert isinstance(parsed.output_parsed, Person)


def test_text_format_with_reasoning_streamed(echo_server):
    with oai(echo_server).responses.stream(
            model=MODEL, input='REPLY {"name": "Ada", "age": 36}', reasoning={"effort": "high"},
            text_format=Person) as stream:
        final = stream.get_final_response()
    assert [o.type for o in final.output] == ["reasoning", "message"]
    assert final.output_parsed == Person(name="Ada", age=36)


def wait_for(server, name, value, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        m = server.metrics()
        if m.get(name) == value:
            return m
        time.sleep(0.05)
    raise AssertionError(f"{name} never became {value}: {server.metrics()}")


# stories260K at 20 ms per step (conftest.slow_server): 500 tokens take 10 s.
LONG = {"model": "stories260K", "input": "Once upon a time", "max_output_tokens": 500,
        "temperature": 1.0}
EXTRA = {"seed": 1, "repetition_penalty": 1.0}  # chat sampling fields, taken here too


def test_stream_disconnect_frees_the_slot(slow_server):
    wait_for(slow_server, "dsv4_running_sequences", 0, seconds=5)
    before = slow_server.metrics().get("dsv4_sequences_cancelled_total", 0)
    with httpx.stream("POST", slow_server.url + "/v1/responses", json={**LONG, **EXTRA, "stream": True},
                      timeout=30) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        events = [next(lines) for _ in range(12)]  # a few events, then hang up
        assert "event: response.created" in events
        assert slow_server.metrics()["dsv4_running_sequences"] == 1
    m = wait_for(slow_server, "dsv4_running_sequences", 0, seconds=5)
    assert m["dsv4_sequences_cancelled_total"] == before + 1
    assert m["dsv4_kv_cache_tokens"] == 0


def test_slow_non_streaming_response_is_valid_json(slow_server):
    wait_for(slow_server, "dsv4_running_sequences", 0, seconds=5)
    client = openai.OpenAI(base_url=slow_server.url + "/v1", api_key="x", max_retries=0,
                           timeout=30)
    # Past a second the body is sent chunked behind keep-alive spaces.
    r = client.responses.create(**{**LONG, "max_output_tokens": 80}, extra_body=EXTRA)
    assert r.status == "incomplete"
    assert r.usage.output_tokens == 80
    assert client.responses.retrieve(r.id).usage.output_tokens == 80


def test_sigterm_ends_a_stream_with_response_failed():
    s = Server("--threads", "1", "--test-step-delay-ms", "20", "--shutdown-grace", "1")
    try:
        with httpx.Client(timeout=30) as client:
            with client.stream("POST", s.url + "/v1/responses",
                               json={**LONG, **EXTRA, "stream": True}) as resp:
                lines = resp.iter_lines()
                assert next(lines) == "event: response.created"
                s.proc.send_signal(signal.SIGTERM)
                data = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
        last = data[-1]
        assert last["type"] == "response.failed"
        assert "shutting down" in last["response"]["error"]["message"]
        assert [d["sequence_number"] for d in data] == list(range(len(data)))
        assert s.proc.wait(timeout=10) == 0
    finally:
        s.stop()
