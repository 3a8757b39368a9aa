"""`dsv4 lsp` driven by a real LSP client (pygls' LanguageClient, lsprotocol
types) as a subprocess: initialize, documents with full and incremental
changes, inline and plain completions checked against the greedy output of a
real `dsv4 serve` (/v1/completions) for the same prompt, cancellation of a
completion by a newer one (-32800), remote mode against that server,
shutdown/exit; and raw frames for the protocol errors a library client never
sends (bad frames, requests before initialize)."""
import asyncio
import json
import os
import re
import subprocess
import time

import httpx
import pytest
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException, JsonRpcRequestCancelled
from pygls.lsp.client import LanguageClient

from conftest import Server, _binary

URI = "file:///story.txt"
PROMPT = "Once upon a time"
N_PREDICT = 24


def greedy(server, prompt, n, headers=None, cut=True):
    """The server's greedy continuation, cut as `dsv4 lsp` cuts it by default:
    before the first blank line (the document's indentation is 0, so the
    end-of-block rule never applies); cut=False: the whole text."""
    r = httpx.post(server.url + "/v1/completions", headers=headers, timeout=60,
                   json={"model": "stories260K", "prompt": prompt, "max_tokens": n,
                         "temperature": 0})
    assert r.status_code == 200, r.text
    text = r.json()["choices"][0]["text"]
    m = re.search(r"\n[ \t\r]*\n", text) if cut else None
    return text[:m.start()] if m else text


async def start(*args):
    if not any(a in ("--server", "--model", "-m") for a in args):
        args = ("--model", "stories260K", *args)  # the bundled model the servers here run
    client = LanguageClient("dsv4-test", "1")
    await client.start_io(_binary(), "lsp", *args)
    result = await asyncio.wait_for(client.initialize_async(lsp.InitializeParams(
        capabilities=lsp.ClientCapabilities(), process_id=os.getpid())), 60)
    client.initialized(lsp.InitializedParams())
    return client, result


async def stop(client):
    await asyncio.wait_for(client.shutdown_async(None), 10)
    client.exit(None)
    await asyncio.wait_for(client.stop(), 10)
    return client._server.returncode


def open_doc(client, text, uri=URI):
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        text_document=lsp.TextDocumentItem(uri=uri, language_id="plaintext", version=1,
                                           text=text)))


def inline(client, line, character, uri=URI):
    return client.text_document_inline_completion_async(lsp.InlineCompletionParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri),
        position=lsp.Position(line=line, character=character),
        context=lsp.InlineCompletionContext(trigger_kind=lsp.InlineCompletionTriggerKind.Invoked)))


def insert_text(result):
    items = result.items if isinstance(result, lsp.InlineCompletionList) else result
    assert len(items) == 1, result
    return items[0].insert_text


def test_inline_completion_is_the_models_greedy_continuation(llama_server):
    expected = greedy(llama_server, PROMPT, N_PREDICT)
    assert expected

    async def go():
        client, init = await start("--threads", "1", "--n-predict", str(N_PREDICT))
        caps = init.capabilities
        assert caps.inline_completion_provider is not None
        assert caps.completion_provider is not None
        assert caps.text_document_sync.change == lsp.TextDocumentSyncKind.Incremental
        # "Once upon" + an incremental insertion of " a time" at its end.
        open_doc(client, "Once upon")
        client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=URI, version=2),
            content_changes=[lsp.TextDocumentContentChangePartial(
                range=lsp.Range(start=lsp.Position(line=0, character=9),
                                end=lsp.Position(line=0, character=9)),
                text=" a time")]))
        got = insert_text(await asyncio.wait_for(inline(client, 0, len(PROMPT)), 60))
        listed = await asyncio.wait_for(client.text_document_completion_async(
            lsp.CompletionParams(text_document=lsp.TextDocumentIdentifier(uri=URI),
                                 position=lsp.Position(line=0, character=len(PROMPT)))), 60)
        return got, listed, await stop(client)

    got, listed, code = asyncio.run(go())
    assert got == expected
    assert isinstance(listed, lsp.CompletionList)
    assert len(listed.items) == 1
    assert listed.items[0].text_edit.new_text == expected
    assert code == 0


def test_a_newer_request_cancels_the_one_in_flight(llama_server):
    async def go():
        client, _ = await start("--threads", "1", "--n-predict", "64", "--no-stop-at-blank-line",
                                "--test-step-delay-ms", "50")
        open_doc(client, PROMPT)
        first = asyncio.ensure_future(inline(client, 0, len(PROMPT)))
        await asyncio.sleep(0.3)  # the first is generating (64 steps of at least 50 ms)
        second = asyncio.ensure_future(inline(client, 0, len(PROMPT)))
        with pytest.raises(JsonRpcRequestCancelled) as cancelled:
            await asyncio.wait_for(first, 30)
        result = await asyncio.wait_for(second, 60)
        return cancelled.value, result, await stop(client)

    error, result, code = asyncio.run(go())
    assert error.code == -32800
    assert insert_text(result)  # the newer request completes
    assert code == 0


def test_remote_mode_completes_through_dsv4_serve(key_server):
    headers = {"Authorization": "Bearer sekret"}
    expected = greedy(key_server, PROMPT, N_PREDICT, headers)

    async def go(key):
        client, _ = await start("--server", key_server.url, "--api-key", key,
                                "--n-predict", str(N_PREDICT))
        open_doc(client, PROMPT)
        try:
            return insert_text(await asyncio.wait_for(inline(client, 0, len(PROMPT)), 60))
        except JsonRpcException as e:
            return e
        finally:
            await stop(client)

    assert asyncio.run(go("sekret")) == expected
    error = asyncio.run(go("wrong"))
    assert isinstance(error, JsonRpcException)
    assert error.code == -32803  # RequestFailed
    assert "401" in str(error)


@pytest.fixture(scope="module")
def slow_llama():
    """stories260K, 50 ms per engine step: a completion runs long enough to be cancelled."""
    server = Server("--max-sequences", "4", "--test-step-delay-ms", "50", "--threads", "1")
    yield server
    server.stop()


def test_remote_cancellation_closes_the_http_request(slow_llama):
    expected = greedy(slow_llama, PROMPT, 64, cut=False)
    before = slow_llama.metrics().get("dsv4_sequences_cancelled_total", 0)

    async def go():
        client, _ = await start("--server", slow_llama.url, "--n-predict", "64",
                                "--no-stop-at-blank-line")
        open_doc(client, PROMPT)
        first = asyncio.ensure_future(inline(client, 0, len(PROMPT)))
        await asyncio.sleep(0.5)  # the server is generating it (64 steps of at least 50 ms)
        second = asyncio.ensure_future(inline(client, 0, len(PROMPT)))
        with pytest.raises(JsonRpcRequestCancelled) as cancelled:
            await asyncio.wait_for(first, 30)
        result = await asyncio.wait_for(second, 60)
        return cancelled.value, result, await stop(client)

    error, result, code = asyncio.run(go())
    assert error.code == -32800
    assert insert_text(result) == expected
    assert code == 0
    # The closed request made the server cancel the first sequence.
    deadline = time.monotonic() + 5
    while (slow_llama.metrics().get("dsv4_sequences_cancelled_total", 0) < before + 1
           and time.monotonic() < deadline):
        time.sleep(0.05)
    assert slow_llama.metrics()["dsv4_sequences_cancelled_total"] >= before + 1


def test_remote_mode_without_a_server_fails_the_request():
    async def go():
        client, _ = await start("--server", "http://127.0.0.1:1")
        open_doc(client, PROMPT)
        with pytest.raises(JsonRpcException) as e:
            await asyncio.wait_for(inline(client, 0, 4), 30)
        await stop(client)
        return e.value

    error = asyncio.run(go())
    assert error.code == -32803
    assert "cannot complete through the server" in str(error)


class RawLsp:
    """`dsv4 lsp` over pipes, one framed message at a time."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([_binary(), "lsp", *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def send_bytes(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message):
        body = json.dumps(message).encode()
        self.send_bytes(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def read(self):
        length = None
        while True:
            line = self.proc.stdout.readline()
            assert line, "dsv4 lsp closed its output"
            if line == b"\r\n":
                break
            name, value = line.decode().split(":", 1)
            if name.lower() == "content-length":
                length = int(value)
        return json.loads(self.proc.stdout.read(length))


def test_protocol_errors_over_raw_frames():
    s = RawLsp("--server", "http://127.0.0.1:1")
    try:
        s.send({"jsonrpc": "2.0", "id": 1, "method": "textDocument/completion", "params": {}})
        assert s.read()["error"]["code"] == -32002  # ServerNotInitialized
        s.send_bytes(b"Content-Length: 7\r\n\r\n{\"a\": }")
        reply = s.read()
        assert reply["error"]["code"] == -32700 and reply["id"] is None
        s.send_bytes(b"Content-Type: text/plain\r\n\r\n")
        assert s.read()["error"]["code"] == -32700  # a frame without Content-Length
        s.send({"jsonrpc": "2.0", "id": "x", "method": 12})
        reply = s.read()
        assert reply["error"]["code"] == -32600 and reply["id"] == "x"
        s.send({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"capabilities": {}}})
        assert "inlineCompletionProvider" in s.read()["result"]["capabilities"]
        s.send({"jsonrpc": "2.0", "method": "some/notification", "params": {}})  # ignored
        s.send({"jsonrpc": "2.0", "id": 3, "method": "no/such/method", "params": {}})
        reply = s.read()
        assert reply["id"] == 3 and reply["error"]["code"] == -32601
        s.send({"jsonrpc": "2.0", "method": "exit"})  # without shutdown: exit code 1
        assert s.proc.wait(timeout=10) == 1
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()
