"""`dsv4 serve` with the official `anthropic` client on the scripted echo
model (DeepSeek-V4 chat format): messages, thinking blocks, streaming events,
tool_use round trips, errors."""
import anthropic
import pytest

MODEL = "test-echo-model"
TOOLS = [{"name": "get_weather", "description": "Weather for a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
CALL = 'CALL get_weather {"city": "Paris", "days": 3}'


def client(server, **kw):
    kw.setdefault("api_key", "unused")
    return anthropic.Anthropic(base_url=server.url, max_retries=0, timeout=60, **kw)


def test_messages(echo_server):
    m = client(echo_server).messages.create(
        model=MODEL, max_tokens=100, system="be nice",
        messages=[{"role": "user", "content": "hi there"}])
    assert m.type == "message"
    assert m.role == "assistant"
    assert m.id.startswith("msg_")
    assert [b.type for b in m.content] == ["text"]
    assert m.content[0].text == "Echo: hi there"
    assert m.stop_reason == "end_turn"
    assert m.usage.input_tokens > 0
    assert m.usage.output_tokens > 0


def test_thinking_block(echo_server):
    m = client(echo_server).messages.create(
        model=MODEL, max_tokens=100, thinking={"type": "enabled", "budget_tokens": 50},
        messages=[{"role": "user", "content": "hi"}])
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[0].thinking == "Thinking about it."
    assert m.content[1].text == "Echo: hi"


def test_adaptive_thinking_thinks(echo_server):
    # The newer SDKs' style: the model decides; DeepSeek-V4's thinking mode does.
    m = client(echo_server).messages.create(
        model=MODEL, max_tokens=100, thinking={"type": "adaptive"},
        messages=[{"role": "user", "content": "hi"}])
    assert [b.type for b in m.content] == ["thinking", "text"]


def test_count_tokens_is_the_prompt_a_request_runs(echo_server):
    c = client(echo_server)
    kwargs = dict(model=MODEL, system="be nice", tools=TOOLS,
                  messages=[{"role": "user", "content": "how many tokens is this?"}])
    counted = c.messages.count_tokens(**kwargs)
    ran = c.messages.create(max_tokens=5, **kwargs)
    assert counted.input_tokens == ran.usage.input_tokens > 0
    # Thinking changes the prompt (the V4 encoding's opening tag): counted too.
    thinking = c.messages.count_tokens(thinking={"type": "enabled", "budget_tokens": 50}, **kwargs)
    ran = c.messages.create(max_tokens=5, thinking={"type": "enabled", "budget_tokens": 50},
                            **kwargs)
    assert thinking.input_tokens == ran.usage.input_tokens
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.count_tokens(model=MODEL, messages=[])
    assert e.value.body["error"]["type"] == "invalid_request_error"


def test_max_tokens_stop_reason(echo_server):
    m = client(echo_server).messages.create(
        model=MODEL, max_tokens=2, messages=[{"role": "user", "content": "a long message"}])
    assert m.stop_reason == "max_tokens"
    assert m.usage.output_tokens == 2


def test_stop_sequence(echo_server):
    m = client(echo_server).messages.create(
        model=MODEL, max_tokens=100, stop_sequences=["world"],
        messages=[{"role": "user", "content": "hello world again"}])
    assert m.stop_reason == "stop_sequence"
    assert m.stop_sequence == "world"
    assert m.content[0].text == "Echo: hello "


def test_streaming(echo_server):
    c = client(echo_server)
    kwargs = dict(model=MODEL, max_tokens=100, thinking={"type": "enabled", "budget_tokens": 50},
                  messages=[{"role": "user", "content": "stream me"}])
    with c.messages.stream(**kwargs) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Echo: stream me"
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == "Thinking about it."
    assert final.stop_reason == "end_turn"
    whole = c.messages.create(**kwargs)
    assert final.content[1].text == whole.content[1].text
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_stream_event_order(echo_server):
    with client(echo_server).messages.stream(
            model=MODEL, max_tokens=100,
            messages=[{"role": "user", "content": "x"}]) as stream:
        types = [e.type for e in stream]
    # The SDK adds its own "text" events next to the raw ones.
    raw = [t for t in types if t != "text"]
    assert raw[0] == "message_start"
    assert raw[1] == "content_block_start"
    assert raw[-3:] == ["content_block_stop", "message_delta", "message_stop"]


def test_tool_use_round_trip(echo_server):
    c = client(echo_server)
    messages = [{"role": "user", "content": CALL}]
    m = c.messages.create(model=MODEL, max_tokens=200, tools=TOOLS, messages=messages)
    assert m.stop_reason == "tool_use"
    [use] = [b for b in m.content if b.type == "tool_use"]
    assert use.name == "get_weather"
    assert use.input == {"city": "Paris", "days": 3}
    assert use.id.startswith("toolu_")
    messages.append({"role": "assistant", "content": [b.model_dump() for b in m.content]})
    messages.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": use.id, "content": "rainy"}]})
    m2 = c.messages.create(model=MODEL, max_tokens=200, tools=TOOLS, messages=messages)
    assert m2.stop_reason == "end_turn"
    assert m2.content[0].text == "Tool results: rainy"


def test_tool_use_streaming(echo_server):
    with client(echo_server).messages.stream(
            model=MODEL, max_tokens=200, tools=TOOLS,
            messages=[{"role": "user", "content": CALL}]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    [use] = [b for b in final.content if b.type == "tool_use"]
    assert use.name == "get_weather"
    assert use.input == {"city": "Paris", "days": 3}


def test_unknown_model(echo_server):
    with pytest.raises(anthropic.NotFoundError) as e:
        client(echo_server).messages.create(model="claude-9", max_tokens=5,
                                            messages=[{"role": "user", "content": "x"}])
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "not_found_error"


def test_bad_request_shape(echo_server):
    with pytest.raises(anthropic.BadRequestError) as e:
        client(echo_server).messages.create(model=MODEL, max_tokens=-1,
                                            messages=[{"role": "user", "content": "x"}])
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in e.value.body["error"]["message"]


def test_api_key(key_server):
    with pytest.raises(anthropic.AuthenticationError):
        client(key_server, api_key="wrong").messages.create(
            model="stories260K", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    m = client(key_server, api_key="sekret").messages.create(
        model="stories260K", max_tokens=5, messages=[{"role": "user", "content": "Once"}])
    assert m.usage.output_tokens > 0
