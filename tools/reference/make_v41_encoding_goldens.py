#!/usr/bin/env python3
"""Generates DeepSeek-V4.1 chat-encoding goldens with a reference encoder.

The reference is DeepSeek-V4.1's `encoding.py` (the encoding_dsv41.py copy
named in tests/data/tokenizer/dsv41_encoding/README.md). It is NOT part of this
repository: pass its path. Only the generated strings are committed.

Usage:
  python tools/reference/make_v41_encoding_goldens.py \
      --reference /path/to/encoding_dsv41.py \
      --out tests/data/tokenizer/dsv41_encoding/goldens.json

Output: {"encode": [{"name", "request", "options", "expected"}...],
         "parse":  [{"name", "completion", "thinking_mode", "expected" | "error"}...]}
`request` is what the C++ EncodeChatDsv41 receives (a message list, or
{"messages", "tools"}); `options` mirrors Dsv41ChatOptions, with
reasoning_effort as the reference takes it (a name or an int; null: default).
The script applies the two input rules dsv4 documents before calling the
reference: top-level tools go to a leading system message (one is inserted
when the first message is not a system message), and "developer" messages
are rendered as system messages.
"""

import argparse
import copy
import importlib.util
import json

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a specific location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}
CALC_TOOL = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate \"math\"\nwith\ttabs, ünïcödé 数学 and \u0001 control",
        "parameters": {
            "type": "object",
            "properties": {
                "expr": {"type": "string"},
                "scale": {"type": "number", "default": 1e-05, "examples": [0.1, 1e16, 2.5, -0.0]},
                "flags": {"type": "array", "items": {"type": "boolean"}},
            },
        },
    },
}


def call(cid, name, args):
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}


def to_reference(request):
    """The messages the reference gets for a C++ request (see module doc)."""
    if isinstance(request, list):
        messages = copy.deepcopy(request)
    else:
        messages = copy.deepcopy(request["messages"])
        if request.get("tools"):
            if not messages or messages[0].get("role") not in ("system", "developer"):
                messages.insert(0, {"role": "system", "content": ""})
            messages[0]["tools"] = request["tools"]
    for m in messages:
        if m.get("role") == "developer":
            m["role"] = "system"
    return messages


def encode_cases(enc):
    out = []

    def add(name, request, mode="thinking", drop_thinking=True, add_bos=True, effort=None):
        prompt = enc.encode_messages(to_reference(request), thinking_mode=mode,
                                     drop_thinking=drop_thinking,
                                     add_default_bos_token=add_bos, reasoning_effort=effort)
        out.append({"name": name, "request": request,
                    "options": {"thinking_mode": mode, "drop_thinking": drop_thinking,
                                "add_bos": add_bos, "reasoning_effort": effort},
                    "expected": prompt})

    sys_user = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Hello! 你好"}]
    add("empty", [])
    add("empty_no_bos", [], add_bos=False)
    add("user_only_chat", [{"role": "user", "content": "hi"}], mode="chat")
    add("user_only_thinking", [{"role": "user", "content": "hi"}])
    add("system_user_chat", sys_user, mode="chat")
    add("system_user_thinking", sys_user)
    add("no_bos", sys_user, add_bos=False)
    for effort in ["low", "high", "max", 1, 37, 100]:
        add(f"effort_{effort}", sys_user, effort=effort)
    add("effort_max_chat_mode", sys_user, mode="chat", effort="max")
    add("effort_low_user_only", [{"role": "user", "content": "q"}], effort="low")
    add("null_and_empty_content", [{"role": "system", "content": None},
                                   {"role": "user", "content": ""}])

    multi = [{"role": "system", "content": "sys"},
             {"role": "user", "content": "2+2?"},
             {"role": "assistant", "reasoning_content": "add them", "content": "4"},
             {"role": "user", "content": "and 3+3?"}]
    add("multi_turn_drop_thinking", multi)
    add("multi_turn_keep_thinking", multi, drop_thinking=False)
    add("multi_turn_chat", multi, mode="chat")
    add("multi_turn_last_assistant", multi[:3])
    add("multi_turn_last_assistant_chat", multi[:3], mode="chat")
    add("wo_eos_prefill", multi[:2] + [{"role": "assistant", "reasoning_content": "hmm",
                                        "content": "The answer", "wo_eos": True}])

    mid = [{"role": "system", "content": "sys"},
           {"role": "user", "content": "hi"},
           {"role": "assistant", "reasoning_content": "greet", "content": "Hello!"},
           {"role": "system", "content": "From now on answer in French."}]
    add("mid_system_last", mid)
    add("mid_system_last_chat", mid, mode="chat")
    add("mid_system_keep_thinking", mid, drop_thinking=False)
    add("mid_system_then_user", mid + [{"role": "user", "content": "How are you?"}])
    add("mid_system_then_assistant", mid + [{"role": "assistant", "reasoning_content": "fr",
                                              "content": "Bonjour"}])
    add("system_not_first", [{"role": "user", "content": "a"},
                             {"role": "system", "content": "b"}])
    add("developer_first", [{"role": "developer", "content": "Be terse."},
                            {"role": "user", "content": "hi"}])
    add("developer_mid", [{"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "yo"},
                          {"role": "developer", "content": "Be terse."},
                          {"role": "user", "content": "again"}], mode="chat")

    add("latest_reminder", [{"role": "system", "content": "sys"},
                            {"role": "user", "content": "hi"},
                            {"role": "latest_reminder", "content": "Today is Monday."}])
    add("latest_reminder_before_user", [{"role": "latest_reminder", "content": "Note"},
                                        {"role": "user", "content": "hi"}], mode="chat")

    add("response_format", [{"role": "system", "content": "Reply in JSON.",
                             "response_format": {"type": "json_schema", "json_schema": {
                                 "name": "r", "schema": {"type": "object", "properties": {
                                     "answer": {"type": "integer"}}}}}},
                            {"role": "user", "content": "2+2"}])
    add("response_format_chat", [{"role": "system", "content": "",
                                  "response_format": {"type": "json_object"}},
                                 {"role": "user", "content": "x"}], mode="chat")

    tools = [WEATHER_TOOL, CALC_TOOL]
    add("tools_top_level", {"messages": [{"role": "user", "content": "Weather in Paris?"}],
                            "tools": tools})
    add("tools_top_level_chat", {"messages": [{"role": "user", "content": "Weather?"}],
                                 "tools": [WEATHER_TOOL]}, mode="chat")
    add("tools_with_system", {"messages": sys_user, "tools": tools}, effort="max")
    add("tools_and_response_format", {"messages": [
        {"role": "system", "content": "S", "response_format": {"type": "json_object"}},
        {"role": "user", "content": "u"}], "tools": [WEATHER_TOOL]})

    calls = [call("call_a", "get_weather", {"location": "Paris", "unit": "celsius"}),
             call("call_b", "calc", {"expr": "1+1", "scale": 0.5, "flags": [True, False],
                                     "meta": None, "n": 3})]
    convo = [{"role": "user", "content": "Weather in Paris and 1+1?"},
             {"role": "assistant", "reasoning_content": "two tools", "content": "",
              "tool_calls": calls},
             {"role": "tool", "tool_call_id": "call_b", "content": "2"},
             {"role": "tool", "tool_call_id": "call_a", "content": "Sunny, 21°C"}]
    add("tool_results_sorted", {"messages": convo, "tools": tools})
    add("tool_results_sorted_chat", {"messages": convo, "tools": tools}, mode="chat")
    final = convo + [{"role": "assistant", "reasoning_content": "done",
                      "content": "Sunny, and 2."},
                     {"role": "user", "content": "Thanks!"}]
    add("tool_conversation_continues", {"messages": final, "tools": tools})
    add("tool_conversation_no_tools_drops", final)
    add("tool_result_then_user_text", {"messages": convo + [
        {"role": "user", "content": "Also, tomorrow?"}], "tools": tools})
    add("tool_result_list_content", {"messages": convo[:2] + [
        {"role": "tool", "tool_call_id": "call_a",
         "content": [{"type": "text", "text": "part 1"}, {"type": "text", "text": "part 2"}]},
        {"role": "tool", "tool_call_id": "call_b", "content": "2"}], "tools": tools})
    add("tool_call_with_content", {"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Let me check.",
         "tool_calls": [call("c1", "get_weather", {"location": "東京"})]}], "tools": tools})

    odd_args = [call("o1", "f", {"s": "a \"quoted\"\nline", "u": "ünï"}),
                call("o2", "f", json.dumps(json.dumps({"double": "encoded"}))),
                call("o3", "f", "not json at all"),
                call("o4", "f", "[1, 2]"),
                {"id": "o5", "type": "function", "function": {"name": "f",
                                                              "arguments": {"obj": [1, 2.5]}}},
                call("o6", "f", "{}")]
    add("tool_call_argument_forms", [{"role": "user", "content": "x"},
                                     {"role": "assistant", "content": "", "tool_calls": odd_args}],
        mode="chat")

    add("task_query", [{"role": "user", "content": "search this", "task": "query"}])
    add("task_action", [{"role": "user", "content": "act", "task": "action"}])
    add("task_action_chat", [{"role": "user", "content": "act", "task": "action"}], mode="chat")
    add("task_answer_has_no_thinking", [{"role": "user", "content": "t", "task": "title"},
                                        {"role": "assistant", "content": "A title"}])
    add("consecutive_users_merge", [{"role": "user", "content": "one"},
                                    {"role": "user", "content": "two"}])
    return out


def parse_cases(enc):
    d = "｜DSML｜"
    eos = "<｜end▁of▁sentence｜>"
    block = (f"\n\n<{d} calls>\n<{d} invoke name=\"get_weather\">\n"
             f"<{d} parameter name=\"location\" string=\"true\">Paris</{d} parameter>\n"
             f"<{d} parameter name=\"days\" string=\"false\">3</{d} parameter>\n"
             f"</{d} invoke>\n<{d} invoke name=\"noop\">\n</{d} invoke>\n</{d} calls>")
    texts = [
        ("thinking_plain", "thinking", "reason</think>answer" + eos),
        ("chat_plain", "chat", "just an answer" + eos),
        ("thinking_tool_calls", "thinking", "need weather</think>Checking." + block + eos),
        ("chat_tool_calls", "chat", block + eos),
        ("v4_tags_are_content", "chat",
         f"x\n\n<{d}tool_calls>\n<{d}invoke name=\"f\">\n</{d}invoke>\n</{d}tool_calls>" + eos),
        ("string_escapes", "chat",
         f"\n\n<{d} calls>\n<{d} invoke name=\"f\">\n"
         f"<{d} parameter name=\"q\" string=\"true\">a \"b\"\nc\\d</{d} parameter>\n"
         f"<{d} parameter name=\"o\" string=\"false\">{{\"k\": [1, 2]}}</{d} parameter>\n"
         f"</{d} invoke>\n</{d} calls>" + eos),
    ]
    out = []
    for name, mode, text in texts:
        case = {"name": name, "completion": text, "thinking_mode": mode}
        try:
            parsed = enc.parse_message_from_completion_text(text, thinking_mode=mode)
            case["expected"] = {
                "reasoning_content": parsed["reasoning_content"],
                "content": parsed["content"],
                "tool_calls": [{"name": t["function"]["name"],
                                "arguments": t["function"]["arguments"]}
                               for t in parsed["tool_calls"]],
            }
        except (AssertionError, ValueError) as e:
            case["error"] = str(e)
        out.append(case)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reference", required=True, help="path to the reference encoding_dsv41.py")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    spec = importlib.util.spec_from_file_location("encoding_dsv41", args.reference)
    enc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(enc)
    out = {"encode": encode_cases(enc), "parse": parse_cases(enc)}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(out['encode'])} encode and {len(out['parse'])} parse goldens to {args.out}")


if __name__ == "__main__":
    main()
