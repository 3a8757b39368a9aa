"""Structured output (server/structured_output.h, src/constrain): OpenAI
response_format json_object / json_schema and Anthropic output_config.format,
through the official clients and raw HTTP.

The schema suite decodes a few hundred generated schemas (json_schema_gen.py,
seeded) with the random-weight stories260K model and validates every output
with the `jsonschema` package. The echo model (DeepSeek-V4 tokenizer and chat
format) answers "REPLY TEXT" with TEXT, so a conforming answer passes through
unchanged and a non-conforming one is bent into the schema, deterministically
(greedy); with thinking on its reasoning stays free.
"""
import concurrent.futures
import json

import anthropic
import httpx
import jsonschema
import openai
import pydantic
import pytest

from json_schema_gen import generate

ECHO = "test-echo-model"
LLAMA = "stories260K"
CHAT = "/v1/chat/completions"
SUITE_SEED = 20240611
SUITE_SIZE = 300


def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def post(server, path, body):
    return httpx.post(server.url + path, json=body, timeout=60)


def json_schema_format(schema, name="out"):
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


def check(schema, text):
    value = json.loads(text)
    jsonschema.Draft202012Validator(schema).validate(value)
    return value


# ---- the schema suite -------------------------------------------------------------------------

def test_schema_suite_outputs_validate(llama_server):
    schemas = generate(SUITE_SEED, SUITE_SIZE)
    for s in schemas:
        jsonschema.Draft202012Validator.check_schema(s)

    def run(i):
        body = {"model": LLAMA, "messages": [{"role": "user", "content": "Once upon a time"}],
                "max_tokens": 48, "temperature": 1.0, "seed": i,
                "response_format": json_schema_format(schemas[i])}
        r = post(llama_server, CHAT, body)
        assert r.status_code == 200, (schemas[i], r.text)
        choice = r.json()["choices"][0]
        return i, choice["message"]["content"], choice["finish_reason"]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, range(len(schemas))))
    finishes = {"stop": 0, "length": 0}
    for i, text, finish in results:
        try:
            check(schemas[i], text)
        except (ValueError, jsonschema.ValidationError) as e:
            pytest.fail(f"schema {i} {json.dumps(schemas[i])}: output {text!r}: {e}")
        finishes[finish] += 1
    assert sum(finishes.values()) == SUITE_SIZE
    # Most close before max_tokens (completion is forced near the end; the
    # rest end at max_tokens with the completion appended).
    assert finishes["stop"] > SUITE_SIZE // 2, finishes


def test_json_object_free_form(llama_server):
    for seed in range(5):
        r = post(llama_server, CHAT, {
            "model": LLAMA, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 40,
            "seed": seed, "response_format": {"type": "json_object"}})
        assert r.status_code == 200, r.text
        assert isinstance(json.loads(r.json()["choices"][0]["message"]["content"]), dict)


def test_completions_and_streaming(llama_server):
    schema = {"type": "object", "properties": {"n": {"type": "integer"},
                                               "s": {"type": "string", "maxLength": 4}},
              "required": ["n", "s"], "additionalProperties": False}
    r = post(llama_server, "/v1/completions", {
        "model": LLAMA, "prompt": "Once", "max_tokens": 30, "seed": 3,
        "response_format": json_schema_format(schema)})
    assert r.status_code == 200, r.text
    check(schema, r.json()["choices"][0]["text"])
    text = ""
    for chunk in oai(llama_server).chat.completions.create(
            model=LLAMA, messages=[{"role": "user", "content": "hi"}], max_tokens=30, seed=4,
            stream=True, response_format=json_schema_format(schema)):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
    check(schema, text)


def test_text_format_unchanged(llama_server):
    body = {"model": LLAMA, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 12,
            "temperature": 0}
    plain = post(llama_server, CHAT, body).json()["choices"][0]["message"]["content"]
    text = post(llama_server, CHAT, {**body, "response_format": {"type": "text"}})
    assert text.json()["choices"][0]["message"]["content"] == plain


# ---- official clients on the echo model --------------------------------------------------------

class Person(pydantic.BaseModel):
    name: str
    age: int
    tags: list[str]


def test_openai_parse_passes_a_conforming_answer(echo_server):
    reply = json.dumps({"name": "Ada", "age": 36, "tags": ["math"]})
    c = oai(echo_server).chat.completions.parse(
        model=ECHO, messages=[{"role": "user", "content": "REPLY " + reply}],
        response_format=Person, temperature=0, max_tokens=100)
    msg = c.choices[0].message
    assert msg.parsed == Person(name="Ada", age=36, tags=["math"])
    assert msg.content == reply
    assert c.choices[0].finish_reason == "stop"


def test_openai_parse_bends_a_wrong_answer_into_the_schema(echo_server):
    # "age" as a string: the constraint refuses the quote and the value
    # becomes an integer; the output still parses into the model.
    c = oai(echo_server).chat.completions.parse(
        model=ECHO, messages=[{"role": "user", "content": 'REPLY {"name": "Ada", "age": "old"}'}],
        response_format=Person, temperature=0, max_tokens=60)
    p = c.choices[0].message.parsed
    assert isinstance(p, Person)
    assert p.name == "Ada"
    check(Person.model_json_schema(), c.choices[0].message.content)


def test_openai_plain_echo_is_constrained(echo_server):
    # "Echo: ..." is not JSON: every token is chosen by the mask.
    r = post(echo_server, CHAT, {
        "model": ECHO, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 40,
        "temperature": 0, "response_format": {"type": "json_object"}})
    assert r.status_code == 200, r.text
    assert isinstance(json.loads(r.json()["choices"][0]["message"]["content"]), dict)


def test_thinking_reasons_freely_then_answers_in_json(echo_server):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}},
              "required": ["answer"], "additionalProperties": False}
    c = oai(echo_server).chat.completions.create(
        model=ECHO, messages=[{"role": "user", "content": 'REPLY {"answer": 42}'}],
        temperature=0, max_tokens=60, response_format=json_schema_format(schema),
        extra_body={"thinking": {"type": "enabled"}})
    msg = c.choices[0].message
    assert msg.model_extra["reasoning_content"] == "Thinking about it."
    assert json.loads(msg.content) == {"answer": 42}


def test_thinking_out_of_room_forces_the_answer(echo_server):
    # 12 tokens: "Thinking about it.</think>" fits, but a long reply does not;
    # the JSON is completed within max_tokens or by Close.
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    r = post(echo_server, CHAT, {
        "model": ECHO, "max_tokens": 12, "temperature": 0, "thinking": {"type": "enabled"},
        "messages": [{"role": "user", "content": "REPLY " + json.dumps({"a": "x" * 200})}],
        "response_format": json_schema_format(schema)})
    assert r.status_code == 200, r.text
    msg = r.json()["choices"][0]["message"]
    assert msg["reasoning_content"] == "Thinking about it."
    check(schema, msg["content"])


def test_anthropic_output_config_format(echo_server):
    c = anthropic.Anthropic(base_url=echo_server.url, api_key="unused", max_retries=0, timeout=60)
    schema = {"type": "object", "properties": {"city": {"type": "string"},
                                               "days": {"type": "integer"}},
              "required": ["city", "days"], "additionalProperties": False}
    m = c.messages.create(
        model=ECHO, max_tokens=80,
        messages=[{"role": "user", "content": 'REPLY {"city": "Paris", "days": "three"}'}],
        output_config={"format": {"type": "json_schema", "schema": schema}})
    value = check(schema, m.content[0].text)
    assert value["city"] == "Paris"
    parsed = c.messages.parse(
        model=ECHO, max_tokens=80,
        messages=[{"role": "user", "content": 'REPLY {"name": "Bo", "age": 7, "tags": []}'}],
        output_format=Person)
    assert parsed.parsed_output == Person(name="Bo", age=7, tags=[])


def test_anthropic_thinking_then_schema(echo_server):
    c = anthropic.Anthropic(base_url=echo_server.url, api_key="unused", max_retries=0, timeout=60)
    m = c.messages.create(
        model=ECHO, max_tokens=200,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[{"role": "user", "content": 'REPLY {"ok": true}'}],
        output_config={"format": {"type": "json_schema", "schema": {
            "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}})
    kinds = [b.type for b in m.content]
    assert kinds == ["thinking", "text"], m.content
    assert m.content[0].thinking == "Thinking about it."
    assert json.loads(m.content[1].text) == {"ok": True}


# ---- errors -------------------------------------------------------------------------------------

@pytest.mark.parametrize("schema,status,needle", [
    ({"type": "string", "pattern": "^a"}, 400, "keyword 'pattern' is not supported"),
    ({"$defs": {"N": {"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}}}},
      "$ref": "#/$defs/N"}, 400, "recursive reference \"#/$defs/N\""),
    ({"type": "strng"}, 400, "unknown type \"strng\""),
    ({"$ref": "#/$defs/Nope"}, 400, "does not exist"),
])
def test_bad_schema_is_a_400_naming_it(echo_server, schema, status, needle):
    with pytest.raises(openai.BadRequestError) as e:
        oai(echo_server).chat.completions.create(
            model=ECHO, messages=[{"role": "user", "content": "hi"}], max_tokens=5,
            response_format=json_schema_format(schema))
    assert e.value.status_code == status
    assert "response_format.json_schema.schema" in e.value.message
    assert needle in e.value.message


def test_bad_output_config_is_an_anthropic_400(echo_server):
    c = anthropic.Anthropic(base_url=echo_server.url, api_key="unused", max_retries=0, timeout=60)
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.create(model=ECHO, max_tokens=5, messages=[{"role": "user", "content": "hi"}],
                          output_config={"format": {"type": "json_schema", "schema": {
                              "type": "array", "items": [{"type": "string"}]}}})
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "output_config.format.schema" in e.value.message
    assert "tuple validation" in e.value.message


def test_format_with_forced_tool_call_is_refused(echo_server):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    r = post(echo_server, CHAT, {
        "model": ECHO, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
        "tools": tools, "tool_choice": "required", "response_format": {"type": "json_object"}})
    assert r.status_code == 400
    assert "'response_format' together with a forced tool call" in r.json()["error"]["message"]


def test_server_survives_many_bad_schemas(echo_server):
    for s in [{"anyOf": []}, {"type": ["x"]}, {"properties": 3}, {"enum": []},
              {"type": "array", "minItems": 10 ** 9}, {"allOf": [{}, {}]}, {"not": {}}]:
        r = post(echo_server, CHAT, {"model": ECHO, "messages": [{"role": "user", "content": "h"}],
                                     "max_tokens": 5, "response_format": json_schema_format(s)})
        assert r.status_code == 400, (s, r.text)
        assert r.json()["error"]["type"] == "invalid_request_error"
    assert httpx.get(echo_server.url + "/health", timeout=5).status_code == 200
