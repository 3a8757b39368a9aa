// The chat page of dsv4 serve: talks to this server's /v1/chat/completions
// with stream: true and renders the answer as it arrives. Model output is
// only ever inserted as text nodes (never innerHTML). Settings live in
// localStorage; the API key, when set, is sent as "Authorization: Bearer".
"use strict";

const SETTINGS_KEY = "dsv4-chat.settings";
const DEFAULTS = {
  api_key: "",
  system: "",
  temperature: "0.6",
  max_tokens: "",
  thinking: false,
  tools: "",
};

const $ = (id) => document.getElementById(id);
const ui = {
  messages: $("messages"),
  composer: $("composer"),
  input: $("input"),
  send: $("send"),
  stop: $("stop"),
  error: $("error"),
  model: $("model"),
  newChat: $("new-chat"),
  settings: $("settings"),
  settingsToggle: $("settings-toggle"),
  settingsError: $("settings-error"),
};

// The conversation sent with every request (OpenAI messages, without the
// system prompt, which is taken from the settings at each send).
let history = [];
let controller = null;  // the AbortController of the request in flight
let conversation = 0;  // counts new chats: a request from an older one leaves no trace
let modelId = null;

// ---- settings ---------------------------------------------------------------

function loadSettings() {
  let stored = {};
  try {
    stored = JSON.parse(localStorage.getItem(SETTINGS_KEY) || "{}") || {};
  } catch (e) {
    stored = {};
  }
  const s = { ...DEFAULTS, ...stored };
  for (const [name, value] of Object.entries(s)) {
    const field = ui.settings.elements[name];
    if (!field) continue;
    if (field.type === "checkbox") field.checked = Boolean(value);
    else field.value = String(value);
  }
}

function saveSettings() {
  const s = {};
  for (const name of Object.keys(DEFAULTS)) {
    const field = ui.settings.elements[name];
    s[name] = field.type === "checkbox" ? field.checked : field.value;
  }
  localStorage.setItem(SETTINGS_KEY, JSON.stringify(s));
}

// The request fields the settings give, or throws an Error naming the field.
function requestOptions() {
  const f = ui.settings.elements;
  const out = {};
  const temperature = f.temperature.value.trim();
  if (temperature !== "") {
    const t = Number(temperature);
    if (!Number.isFinite(t) || t < 0) throw new Error("Temperature must be a number >= 0");
    out.temperature = t;
  }
  const maxTokens = f.max_tokens.value.trim();
  if (maxTokens !== "") {
    const m = Number(maxTokens);
    if (!Number.isInteger(m) || m < 1) throw new Error("Max tokens must be a whole number >= 1");
    out.max_tokens = m;
  }
  out.thinking = { type: f.thinking.checked ? "enabled" : "disabled" };
  const tools = f.tools.value.trim();
  if (tools !== "") {
    let parsed;
    try {
      parsed = JSON.parse(tools);
    } catch (e) {
      throw new Error("Tools is not valid JSON: " + e.message);
    }
    if (!Array.isArray(parsed)) throw new Error("Tools must be a JSON array");
    out.tools = parsed;
  }
  return out;
}

function authHeaders() {
  const key = ui.settings.elements.api_key.value.trim();
  return key ? { Authorization: "Bearer " + key } : {};
}

// ---- rendering --------------------------------------------------------------

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function scrollToEnd() {
  ui.messages.scrollTop = ui.messages.scrollHeight;
}

// Fills `node` with `text`: fenced ``` code blocks become <pre><code>, `inline
// code` becomes <code>, everything else stays text.
function renderMarkdown(node, text) {
  node.replaceChildren();
  const fence = /```[^\n]*\n?([\s\S]*?)(?:```|$)/g;
  let at = 0;
  for (let m = fence.exec(text); m !== null; m = fence.exec(text)) {
    renderInline(node, text.slice(at, m.index));
    const pre = el("pre");
    pre.appendChild(el("code", "", m[1]));
    node.appendChild(pre);
    at = fence.lastIndex;
    if (m[0].length === 0) break;
  }
  renderInline(node, text.slice(at));
}

function renderInline(node, text) {
  const parts = text.split(/(`[^`\n]+`)/);
  for (const part of parts) {
    if (part.length > 2 && part.startsWith("`") && part.endsWith("`")) {
      node.appendChild(el("code", "", part.slice(1, -1)));
    } else if (part) {
      node.appendChild(document.createTextNode(part));
    }
  }
}

function addUserMessage(text) {
  const msg = el("div", "msg user");
  msg.appendChild(el("div", "role", "You"));
  msg.appendChild(el("div", "content", text));
  ui.messages.appendChild(msg);
  scrollToEnd();
  return msg;
}

// An assistant message being streamed: thinking (folded), text, tool calls.
class AssistantView {
  constructor() {
    this.node = el("div", "msg assistant");
    this.node.dataset.state = "streaming";
    this.node.appendChild(el("div", "role", "Assistant"));
    this.thinking = null;
    this.thinkingText = null;
    this.content = el("div", "content");
    this.node.appendChild(this.content);
    this.tools = el("div", "tool-calls");
    this.node.appendChild(this.tools);
    this.status = el("div", "status", "…");
    this.node.appendChild(this.status);
    this.toolViews = [];
    ui.messages.appendChild(this.node);
    scrollToEnd();
  }

  setReasoning(text) {
    if (!this.thinking) {
      this.thinking = el("details", "thinking");
      this.thinking.appendChild(el("summary", "", "Thinking"));
      this.thinkingText = el("div", "thinking-text");
      this.thinking.appendChild(this.thinkingText);
      this.node.insertBefore(this.thinking, this.content);
    }
    this.thinkingText.textContent = text;
  }

  setContent(text) {
    renderMarkdown(this.content, text);
  }

  setToolCall(index, call) {
    let view = this.toolViews[index];
    if (!view) {
      view = el("div", "tool-call");
      view.appendChild(el("div", "tool-name"));
      view.appendChild(el("pre", "tool-args"));
      view.setAttribute("role", "group");
      this.toolViews[index] = view;
      this.tools.appendChild(view);
    }
    view.firstChild.textContent = "Tool call: " + call.name;
    view.setAttribute("aria-label", "Tool call " + call.name);
    let args = call.arguments;
    try {
      args = JSON.stringify(JSON.parse(args), null, 2);
    } catch (e) {
      // Still streaming, or not JSON: shown as it came.
    }
    view.lastChild.textContent = args;
  }

  finish(state, text) {
    this.node.dataset.state = state;
    this.status.textContent = text;
    if (this.thinking) this.thinking.querySelector("summary").textContent = "Thought";
  }
}

function showError(message) {
  ui.error.textContent = message;
  ui.error.hidden = false;
}

function clearError() {
  ui.error.textContent = "";
  ui.error.hidden = true;
}

function setBusy(busy) {
  ui.send.disabled = busy;
  ui.stop.hidden = !busy;
}

// ---- talking to the server --------------------------------------------------

// "STATUS: message" from an error answer in the OpenAI shape (or its text).
async function errorText(response) {
  const body = await response.text();
  let message = body.trim();
  try {
    const parsed = JSON.parse(body);
    if (parsed && parsed.error) message = parsed.error.message || JSON.stringify(parsed.error);
  } catch (e) {
    // Not JSON: the body as it is.
  }
  return `Error ${response.status}: ${message || response.statusText}`;
}

async function fetchModel(signal) {
  const r = await fetch("v1/models", { headers: authHeaders(), signal });
  if (!r.ok) throw new Error(await errorText(r));
  const body = await r.json();
  if (!body.data || !body.data.length) throw new Error("The server lists no model");
  modelId = body.data[0].id;
  ui.model.textContent = modelId;
  return modelId;
}

// Reads an SSE body and calls onData for each parsed "data:" payload.
async function readEvents(response, onData) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, end).replace(/\r$/, "");
      buffer = buffer.slice(end + 1);
      if (!line.startsWith("data:")) continue;
      const data = line.slice(5).trim();
      if (data === "[DONE]") return;
      onData(JSON.parse(data));
    }
  }
}

async function send(text) {
  let options;
  try {
    options = requestOptions();
  } catch (e) {
    showError(e.message);
    ui.settings.hidden = false;
    ui.settingsToggle.setAttribute("aria-expanded", "true");
    return;
  }
  clearError();
  const userNode = addUserMessage(text);
  history.push({ role: "user", content: text });
  const mine = new AbortController();
  const signal = mine.signal;
  const chat = conversation;
  controller = mine;
  setBusy(true);

  let view = null;
  const answer = { content: "", reasoning: "", calls: [] };
  let finishReason = null;
  let usage = null;
  try {
    const model = modelId || (await fetchModel(signal));
    const system = ui.settings.elements.system.value.trim();
    const messages = system ? [{ role: "system", content: system }, ...history] : history;
    const response = await fetch("v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json", ...authHeaders() },
      body: JSON.stringify({
        model,
        messages,
        stream: true,
        stream_options: { include_usage: true },
        ...options,
      }),
      signal,
    });
    if (!response.ok) throw new Error(await errorText(response));
    view = new AssistantView();
    await readEvents(response, (chunk) => {
      if (chunk.error) throw new Error("Error: " + (chunk.error.message || "the stream failed"));
      if (chunk.usage) usage = chunk.usage;
      const choice = chunk.choices && chunk.choices[0];
      if (!choice) return;
      const delta = choice.delta || {};
      if (delta.reasoning_content) {
        answer.reasoning += delta.reasoning_content;
        view.setReasoning(answer.reasoning);
      }
      if (delta.content) {
        answer.content += delta.content;
        view.setContent(answer.content);
      }
      for (const tc of delta.tool_calls || []) {
        const i = tc.index || 0;
        const call = (answer.calls[i] ||= { id: "", name: "", arguments: "" });
        if (tc.id) call.id = tc.id;
        if (tc.function && tc.function.name) call.name += tc.function.name;
        if (tc.function && tc.function.arguments) call.arguments += tc.function.arguments;
        view.setToolCall(i, call);
      }
      if (choice.finish_reason) finishReason = choice.finish_reason;
      scrollToEnd();
    });
    const tokens = usage ? `${usage.completion_tokens} tokens, ` : "";
    view.finish("done", `${tokens}finish: ${finishReason || "none"}`);
  } catch (e) {
    if (signal.aborted) {
      if (view) view.finish("stopped", "Stopped");
    } else {
      if (view) view.finish("error", "Failed");
      showError(e.message.startsWith("Error") ? e.message : "Request failed: " + e.message);
    }
  } finally {
    if (controller === mine) {
      controller = null;
      setBusy(false);
    }
  }
  if (chat !== conversation) return;  // "New chat" was pressed meanwhile
  if (!view) {
    // Nothing came back: the turn is taken back, its text returned to the input.
    history.pop();
    userNode.remove();
    if (!ui.input.value) ui.input.value = text;
    return;
  }
  const message = { role: "assistant", content: answer.content };
  const calls = answer.calls.filter(Boolean);
  if (calls.length) {
    message.tool_calls = calls.map((c) => ({
      id: c.id,
      type: "function",
      function: { name: c.name, arguments: c.arguments },
    }));
  }
  history.push(message);
}

function newChat() {
  conversation += 1;
  if (controller) controller.abort();
  controller = null;
  setBusy(false);
  history = [];
  ui.messages.replaceChildren();
  clearError();
  ui.input.value = "";
  ui.input.focus();
}

// ---- wiring -----------------------------------------------------------------

ui.composer.addEventListener("submit", (event) => {
  event.preventDefault();
  const text = ui.input.value.trim();
  if (!text || controller) return;
  ui.input.value = "";
  send(text);
});

ui.input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    ui.composer.requestSubmit();
  }
});

ui.stop.addEventListener("click", () => {
  if (controller) controller.abort();
});

// Escape stops the answer being streamed, wherever the focus is.
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && controller) controller.abort();
});

ui.newChat.addEventListener("click", newChat);

ui.settingsToggle.addEventListener("click", () => {
  const open = ui.settings.hidden;
  ui.settings.hidden = !open;
  ui.settingsToggle.setAttribute("aria-expanded", String(open));
});

ui.settings.addEventListener("submit", (event) => event.preventDefault());
ui.settings.addEventListener("input", (event) => {
  saveSettings();
  if (event.target.name === "api_key") modelId = null;
  if (event.target.name === "tools") {
    try {
      requestOptions();
      ui.settingsError.hidden = true;
    } catch (e) {
      ui.settingsError.textContent = e.message;
      ui.settingsError.hidden = false;
    }
  }
});

loadSettings();
fetchModel().catch(() => {
  ui.model.textContent = "";  // e.g. the API key is not set yet; the first send reports it
});
ui.input.focus();
