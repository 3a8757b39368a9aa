"""The chat page at `/` (web/, served by src/server/web_page.cc), driven in
Debian's headless Chromium against a real `dsv4 serve` over the scripted echo
model: streamed answers, folded thinking, tool calls, stop, settings, errors.

DSV4_CHAT_SCREENSHOT=docs/chat-page.png makes test_screenshot write the
picture docs/server.md shows (it writes to a temporary folder otherwise)."""
import json
import os
import struct
import time

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                        "days": {"type": "integer"}}},
    },
}]
# The echo model answers "Echo: " + this, one token at a time (seconds at 15 ms per step).
LONG = " ".join(f"word{i}" for i in range(400))

# Records every request body the page sends to /v1/chat/completions, and every
# text the last assistant message showed while it streamed.
RECORDER = """
window.__bodies = [];
const realFetch = window.fetch;
window.fetch = (url, init) => {
  if (String(url).includes('chat/completions') && init && init.body) {
    window.__bodies.push(JSON.parse(init.body));
  }
  return realFetch(url, init);
};
window.__seen = [];
new MutationObserver(() => {
  const all = document.querySelectorAll('.msg.assistant .content');
  if (all.length) window.__seen.push(all[all.length - 1].textContent);
}).observe(document.getElementById('messages'), {childList: true, subtree: true,
                                                 characterData: true});
"""


def open_page(browser, server, settings=None):
    """Loads the page with fresh settings (`settings`: stored before load)."""
    browser.get(server.url + "/")
    browser.execute_script("localStorage.clear();")
    if settings:
        browser.execute_script("localStorage.setItem('dsv4-chat.settings', arguments[0]);",
                               json.dumps(settings))
    browser.get(server.url + "/")
    WebDriverWait(browser, 10).until(lambda d: d.execute_script("return document.readyState")
                                     == "complete")
    browser.execute_script(RECORDER)


def send(browser, text):
    box = browser.find_element(By.ID, "input")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def assistants(browser):
    return browser.find_elements(By.CSS_SELECTOR, ".msg.assistant")


def wait_answer(browser, count, state="done", timeout=30):
    """The `count`-th assistant message once its state is `state`."""
    def ready(d):
        msgs = assistants(d)
        return len(msgs) >= count and msgs[count - 1].get_attribute("data-state") == state
    WebDriverWait(browser, timeout).until(ready)
    return assistants(browser)[count - 1]


def content(msg):
    return msg.find_element(By.CSS_SELECTOR, ".content").get_attribute("textContent")


def bodies(browser):
    return browser.execute_script("return window.__bodies;")


def open_settings(browser):
    if not browser.find_element(By.ID, "settings").is_displayed():
        browser.find_element(By.ID, "settings-toggle").click()


def set_field(browser, field_id, value):
    open_settings(browser)
    field = browser.find_element(By.ID, field_id)
    field.clear()
    field.send_keys(value)


def test_streamed_answer_appears(browser, page_server):
    open_page(browser, page_server)
    text = " ".join(f"token{i}" for i in range(30))
    send(browser, text)
    msg = wait_answer(browser, 1)
    assert content(msg) == "Echo: " + text
    user = browser.find_elements(By.CSS_SELECTOR, ".msg.user .content")
    assert [u.text for u in user] == [text]
    # It grew piece by piece: several partial texts, each a prefix of the answer.
    seen = [s for s in browser.execute_script("return window.__seen;") if s]
    partial = {s for s in seen if s != "Echo: " + text}
    assert len(partial) >= 3, seen
    assert all(("Echo: " + text).startswith(s) for s in partial)
    [body] = bodies(browser)
    assert body["stream"] is True
    assert body["model"] == "test-echo-model"
    assert body["messages"] == [{"role": "user", "content": text}]
    assert body["thinking"] == {"type": "disabled"}
    status = msg.find_element(By.CSS_SELECTOR, ".status").text
    assert "finish: stop" in status
    # No thinking block when thinking is off.
    assert msg.find_elements(By.CSS_SELECTOR, "details.thinking") == []


def test_page_fetches_only_from_its_server(browser, page_server):
    open_page(browser, page_server)
    send(browser, "hello")
    wait_answer(browser, 1)
    urls = browser.execute_script(
        "return [location.href, ...performance.getEntriesByType('resource').map(e => e.name)];")
    assert any(u.endswith("/chat.js") for u in urls)
    assert any(u.endswith("/v1/chat/completions") for u in urls)
    assert all(u.startswith(page_server.url + "/") for u in urls), urls


def test_model_output_is_text_not_html(browser, page_server):
    open_page(browser, page_server)
    evil = '<img src=x onerror="window.__pwned=1"><b>bold</b>'
    send(browser, evil)
    msg = wait_answer(browser, 1)
    assert content(msg) == "Echo: " + evil
    assert msg.find_elements(By.CSS_SELECTOR, ".content img, .content b") == []
    assert browser.execute_script("return window.__pwned === undefined;")


def test_code_blocks_render_as_code(browser, page_server):
    open_page(browser, page_server)
    box = browser.find_element(By.ID, "input")
    box.send_keys("see ```")
    box.send_keys(Keys.SHIFT, Keys.ENTER)
    box.send_keys("x = <1>")
    box.send_keys(Keys.SHIFT, Keys.ENTER)
    box.send_keys("``` and `y`")
    box.send_keys(Keys.ENTER)
    msg = wait_answer(browser, 1)
    [code] = msg.find_elements(By.CSS_SELECTOR, ".content pre code")
    assert code.get_attribute("textContent") == "x = <1>\n"
    inline = msg.find_elements(By.CSS_SELECTOR, ".content > code")
    assert [c.text for c in inline] == ["y"]


def test_shift_enter_is_a_newline_enter_sends(browser, page_server):
    open_page(browser, page_server)
    box = browser.find_element(By.ID, "input")
    box.send_keys("line one")
    box.send_keys(Keys.SHIFT, Keys.ENTER)
    box.send_keys("line two")
    assert box.get_attribute("value") == "line one\nline two"
    assert browser.find_elements(By.CSS_SELECTOR, ".msg") == []
    box.send_keys(Keys.ENTER)
    msg = wait_answer(browser, 1)
    assert content(msg) == "Echo: line one\nline two"
    assert box.get_attribute("value") == ""
    # Every control has a label.
    for field_id in ("input", "api-key", "system-prompt", "temperature", "max-tokens", "thinking",
                     "tools"):
        labels = browser.find_elements(By.CSS_SELECTOR, f"label[for='{field_id}']")
        assert len(labels) == 1, field_id


def test_thinking_is_folded_and_expands(browser, page_server):
    open_page(browser, page_server)
    open_settings(browser)
    browser.find_element(By.ID, "thinking").click()
    send(browser, "think first")
    msg = wait_answer(browser, 1)
    assert content(msg) == "Echo: think first"
    details = msg.find_element(By.CSS_SELECTOR, "details.thinking")
    text = details.find_element(By.CSS_SELECTOR, ".thinking-text")
    assert details.get_attribute("open") is None
    assert not text.is_displayed()
    assert text.get_attribute("textContent") == "Thinking about it."
    details.find_element(By.TAG_NAME, "summary").click()
    assert details.get_attribute("open") is not None
    assert text.is_displayed()
    assert text.text == "Thinking about it."
    assert bodies(browser)[0]["thinking"] == {"type": "enabled"}
    # The reasoning is not sent back with the next turn.
    send(browser, "again")
    wait_answer(browser, 2)
    assert bodies(browser)[1]["messages"][1] == {"role": "assistant",
                                                 "content": "Echo: think first"}


def test_tool_call_is_shown(browser, page_server):
    open_page(browser, page_server, settings={"tools": json.dumps(TOOLS)})
    send(browser, 'CALL get_weather {"city": "Paris", "days": 3}')
    msg = wait_answer(browser, 1)
    [call] = msg.find_elements(By.CSS_SELECTOR, ".tool-call")
    assert call.find_element(By.CSS_SELECTOR, ".tool-name").text == "Tool call: get_weather"
    args = call.find_element(By.CSS_SELECTOR, ".tool-args").get_attribute("textContent")
    assert json.loads(args) == {"city": "Paris", "days": 3}
    assert "finish: tool_calls" in msg.find_element(By.CSS_SELECTOR, ".status").text
    assert bodies(browser)[0]["tools"] == TOOLS
    # The call is part of the conversation that follows.
    send(browser, "thanks")
    assert content(wait_answer(browser, 2)) == "Echo: thanks"
    sent = bodies(browser)[1]["messages"][1]
    assert sent["role"] == "assistant"
    [sent_call] = sent["tool_calls"]
    assert sent_call["id"].startswith("call_")
    assert sent_call["function"]["name"] == "get_weather"
    assert json.loads(sent_call["function"]["arguments"]) == {"city": "Paris", "days": 3}


def test_stop_cancels_the_generation(browser, page_server):
    open_page(browser, page_server)
    before = page_server.metrics()
    send(browser, LONG)
    WebDriverWait(browser, 10).until(lambda d: assistants(d) and len(content(assistants(d)[0])) > 20)
    stop = browser.find_element(By.ID, "stop")
    assert stop.is_displayed()
    stop.click()
    msg = wait_answer(browser, 1, state="stopped", timeout=10)
    shown = content(msg)
    assert 20 < len(shown) < len("Echo: " + LONG)
    assert ("Echo: " + LONG).startswith(shown)
    assert not browser.find_element(By.ID, "stop").is_displayed()
    # The server cancelled the sequence and its one slot is free again.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = page_server.metrics()
        if m["dsv4_running_sequences"] == 0:
            break
        time.sleep(0.05)
    assert m["dsv4_running_sequences"] == 0
    assert m["dsv4_sequences_cancelled_total"] == before["dsv4_sequences_cancelled_total"] + 1
    # The conversation goes on with the part that was shown.
    send(browser, "after the stop")
    msg2 = wait_answer(browser, 2)
    assert content(msg2) == "Echo: after the stop"
    messages = bodies(browser)[1]["messages"]
    assert messages[1]["role"] == "assistant" and messages[1]["content"] == shown
    assert messages[2] == {"role": "user", "content": "after the stop"}


def wait_running(server, count):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if server.metrics()["dsv4_running_sequences"] == count:
            return
        time.sleep(0.05)
    raise AssertionError(f"dsv4_running_sequences did not become {count}")


def test_escape_stops_and_new_chat_during_a_stream_leaves_no_trace(browser, page_server):
    open_page(browser, page_server)
    send(browser, LONG)
    WebDriverWait(browser, 10).until(lambda d: assistants(d) and len(content(assistants(d)[0])) > 20)
    browser.find_element(By.ID, "input").send_keys(Keys.ESCAPE)
    wait_answer(browser, 1, state="stopped", timeout=10)
    wait_running(page_server, 0)
    # New chat while the next answer streams: it is cancelled and forgotten.
    send(browser, LONG)
    WebDriverWait(browser, 10).until(
        lambda d: len(assistants(d)) == 2 and len(content(assistants(d)[1])) > 20)
    browser.find_element(By.ID, "new-chat").click()
    assert browser.find_elements(By.CSS_SELECTOR, ".msg") == []
    wait_running(page_server, 0)
    assert not browser.find_element(By.ID, "stop").is_displayed()
    assert browser.find_element(By.ID, "input").get_attribute("value") == ""
    send(browser, "clean slate")
    assert content(wait_answer(browser, 1)) == "Echo: clean slate"
    assert bodies(browser)[2]["messages"] == [{"role": "user", "content": "clean slate"}]
    assert len(browser.find_elements(By.CSS_SELECTOR, ".msg")) == 2


def test_conversation_continues_and_new_chat_resets(browser, page_server):
    open_page(browser, page_server, settings={"system": "Be brief."})
    send(browser, "first")
    wait_answer(browser, 1)
    send(browser, "second")
    assert content(wait_answer(browser, 2)) == "Echo: second"
    assert bodies(browser)[1]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "Echo: first"},
        {"role": "user", "content": "second"},
    ]
    browser.find_element(By.ID, "new-chat").click()
    assert browser.find_elements(By.CSS_SELECTOR, ".msg") == []
    send(browser, "fresh")
    assert content(wait_answer(browser, 1)) == "Echo: fresh"
    assert bodies(browser)[2]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "fresh"},
    ]


def test_settings_apply_and_persist(browser, page_server):
    open_page(browser, page_server)
    set_field(browser, "max-tokens", "3")
    set_field(browser, "temperature", "0")
    send(browser, "one two three four five six")
    msg = wait_answer(browser, 1)
    shown = content(msg)
    assert "Echo: one two three four five six".startswith(shown)
    assert len(shown) < len("Echo: one two three four five six")
    status = msg.find_element(By.CSS_SELECTOR, ".status").text
    assert "3 tokens" in status and "finish: length" in status
    body = bodies(browser)[0]
    assert body["max_tokens"] == 3 and body["temperature"] == 0
    # Kept across a reload.
    browser.refresh()
    assert browser.find_element(By.ID, "max-tokens").get_attribute("value") == "3"
    assert browser.find_element(By.ID, "temperature").get_attribute("value") == "0"


def test_invalid_settings_are_reported_before_sending(browser, page_server):
    open_page(browser, page_server)
    set_field(browser, "tools", "[not json")
    assert "Tools is not valid JSON" in browser.find_element(By.ID, "settings-error").text
    send(browser, "hello")
    error = browser.find_element(By.ID, "error")
    assert error.is_displayed() and "Tools is not valid JSON" in error.text
    assert browser.find_elements(By.CSS_SELECTOR, ".msg") == []
    assert bodies(browser) == []


def test_server_error_is_shown(browser, page_server):
    # A tool without a name: the server answers 400 and names the field.
    open_page(browser, page_server,
              settings={"tools": json.dumps([{"type": "function", "function": {}}])})
    send(browser, "hello")
    error = browser.find_element(By.ID, "error")
    WebDriverWait(browser, 10).until(lambda d: error.is_displayed())
    assert error.text.startswith("Error 400: ")
    assert "tools[0]" in error.text
    # The failed turn is taken back: its text is in the input again, no message stays.
    assert browser.find_elements(By.CSS_SELECTOR, ".msg") == []
    assert browser.find_element(By.ID, "input").get_attribute("value") == "hello"


def test_bad_api_key_is_shown(browser, page_key_server):
    open_page(browser, page_key_server, settings={"api_key": "wrong"})
    send(browser, "hello")
    error = browser.find_element(By.ID, "error")
    WebDriverWait(browser, 10).until(lambda d: error.is_displayed())
    assert error.text == "Error 401: Invalid or missing API key"
    assert browser.find_elements(By.CSS_SELECTOR, ".msg.assistant") == []
    # The right key works, and the error goes away.
    set_field(browser, "api-key", "sekret")
    browser.find_element(By.ID, "input").send_keys(Keys.ENTER)
    msg = wait_answer(browser, 1)
    assert content(msg) == "Echo: hello"
    assert not error.is_displayed()
    # The page itself needs no key; the API does.
    assert httpx.get(page_key_server.url + "/").status_code == 200
    assert httpx.get(page_key_server.url + "/v1/models").status_code == 401


def _png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_screenshot(browser, page_server, tmp_path):
    browser.set_window_size(900, 900)
    open_page(browser, page_server, settings={"tools": json.dumps(TOOLS), "thinking": True,
                                              "system": "You are a helpful assistant."})
    send(browser, "Hello! Which tools do you have?")
    wait_answer(browser, 1)
    send(browser, 'CALL get_weather {"city": "Paris", "days": 3}')
    wait_answer(browser, 2)
    assistants(browser)[0].find_element(By.CSS_SELECTOR, "details.thinking summary").click()
    path = os.environ.get("DSV4_CHAT_SCREENSHOT") or str(tmp_path / "chat-page.png")
    assert browser.save_screenshot(path)
    with open(path, "rb") as f:
        width, height = _png_size(f.read())
    assert width > 400 and height > 300
