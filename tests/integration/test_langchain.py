"""LangChain's `ChatOpenAI.with_structured_output` against `dsv4 serve`, both
methods: "json_schema" (response_format json_schema: constrained decoding)
and "function_calling" (a tool forced by tool_choice: the call's arguments
constrained by the tool's parameters).

The echo model (DeepSeek-V4 tokenizer and chat format) answers "REPLY TEXT"
with TEXT and "CALL NAME {json}" with a DSML call to NAME, so conforming
answers pass through unchanged and the instances are known exactly; a plain
prompt under a forced call and stories260K's random text under a schema show
the constraint alone producing valid instances.

Nothing here may reach the network: LangChain's token counting loads
tiktoken's BPE files from the internet on first use. A guard refuses every
connection that is not to the loopback server, with an error that says so.
"""
import asyncio
import ipaddress
import json
import socket
from typing import Literal

import httpx
import pydantic
import pytest
from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI

ECHO = "test-echo-model"
LLAMA = "stories260K"


class NetworkAccess(RuntimeError):
    """A test tried to reach a host other than the local server."""


def _loopback(host):
    if host in ("localhost", "") or host is None:
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def no_network(monkeypatch, tmp_path):
    """Loopback only; no LangSmith tracing; an empty tiktoken cache (so a
    code path that counts tokens would try to download, and fail here)."""
    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect

    def getaddrinfo(host, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else host
        if not _loopback(name):
            raise NetworkAccess(f"network access to {name!r} attempted in an offline test")
        return real_getaddrinfo(host, *args, **kwargs)

    def connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address[0]):
            raise NetworkAccess(f"connection to {address!r} attempted in an offline test")
        return real_connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    for var in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
        monkeypatch.setenv(var, "false")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken"))
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID"):
        monkeypatch.delenv(var, raising=False)


def llm(server, model=ECHO, **kw):
    kw.setdefault("temperature", 0)  # greedy: deterministic where the constraint bends the text
    return ChatOpenAI(base_url=server.url + "/v1", api_key="unused", model=model,
                      max_retries=0, timeout=60, **kw)


class Pet(pydantic.BaseModel):
    kind: Literal["cat", "dog"]
    name: str


class Person(pydantic.BaseModel):
    """A person and their pets."""
    name: str = pydantic.Field(description="The full name")
    age: int
    pets: list[Pet]


ADA = Person(name="Ada Lovelace", age=36, pets=[Pet(kind="cat", name="Puff")])
ADA_JSON = ADA.model_dump_json()


# ---- method="json_schema" -------------------------------------------------------------------

def test_json_schema_method(echo_server):
    structured = llm(echo_server).with_structured_output(Person, method="json_schema")
    out = structured.invoke("REPLY " + ADA_JSON)
    assert isinstance(out, Person)
    assert out == ADA


def test_json_schema_method_include_raw(echo_server):
    structured = llm(echo_server).with_structured_output(Person, method="json_schema",
                                                         include_raw=True)
    out = structured.invoke("REPLY " + ADA_JSON)
    assert out["parsing_error"] is None
    assert out["parsed"] == ADA
    assert isinstance(out["raw"], AIMessage)
    assert json.loads(out["raw"].content) == json.loads(ADA_JSON)


def test_json_schema_method_async(echo_server):
    structured = llm(echo_server).with_structured_output(Person, method="json_schema")
    out = asyncio.run(structured.ainvoke("REPLY " + ADA_JSON))
    assert out == ADA


def test_json_schema_method_on_random_text(llama_server):
    # stories260K writes random stories; only the constraint makes them a Person.
    for seed in range(4):
        structured = llm(llama_server, model=LLAMA, temperature=1.0, seed=seed,
                         max_tokens=64).with_structured_output(Person, method="json_schema",
                                                               include_raw=True)
        out = structured.invoke("Once upon a time")
        assert out["parsing_error"] is None
        assert isinstance(out["parsed"], Person)
        # The answer's text itself is the instance.
        assert Person.model_validate_json(out["raw"].content) == out["parsed"]


# ---- method="function_calling" --------------------------------------------------------------

def test_function_calling_method(echo_server):
    structured = llm(echo_server).with_structured_output(Person, method="function_calling")
    out = structured.invoke("CALL Person " + ADA_JSON)
    assert isinstance(out, Person)
    assert out == ADA


def test_function_calling_method_include_raw(echo_server):
    structured = llm(echo_server).with_structured_output(Person, method="function_calling",
                                                         include_raw=True)
    out = structured.invoke("CALL Person " + ADA_JSON)
    assert out["parsing_error"] is None
    assert out["parsed"] == ADA
    raw = out["raw"]
    assert isinstance(raw, AIMessage)
    [call] = raw.tool_calls
    assert call["name"] == "Person"
    assert call["args"] == json.loads(ADA_JSON)
    assert raw.response_metadata["finish_reason"] == "tool_calls"


@pytest.mark.parametrize("prompt", [
    "Hello there",                                            # no call at all
    'CALL Person {"name": "Ada", "age": "thirty-six"}',       # a wrong type, pets missing
])
def test_function_calling_method_forced_call_is_valid(echo_server, prompt):
    # The forced tool call's arguments follow the model's schema whatever the
    # model writes.
    structured = llm(echo_server).with_structured_output(Person, method="function_calling",
                                                         include_raw=True)
    out = structured.invoke(prompt)
    assert out["parsing_error"] is None
    assert isinstance(out["parsed"], Person)
    [call] = out["raw"].tool_calls
    assert call["name"] == "Person"
    Person.model_validate(call["args"])
    if "Ada" in prompt:
        assert out["parsed"].name == "Ada"


# ---- the offline guard ----------------------------------------------------------------------

def test_token_counting_would_need_the_network(echo_server):
    # The code paths above do not count tokens; this one does, and the guard
    # stops its download with a clear error instead of a hang or a silent fetch.
    with pytest.raises(NetworkAccess, match="network access"):
        llm(echo_server).get_num_tokens("hello")
    # The local server stays reachable.
    assert httpx.get(echo_server.url + "/health", timeout=5).status_code == 200
