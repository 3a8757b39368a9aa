#!/usr/bin/env python3
"""Generates DeepSeek-V4 chat-encoding goldens with DeepSeek's reference encoder.

The reference is `encoding_dsv4.py` from the official DeepSeek-V4 release
(`encoding/` folder; MIT). It is NOT part of this repository: pass the folder
that holds it. Only the generated strings are committed.

Usage:
  python tools/goldens/chat_dsv4_goldens.py --encoding-dir /tmp/dsref/encoding \
      --out tests/data/tokenizer/chat_dsv4_goldens.json

Output: {"encode": [{"name", "request", "options", "expected"}...],
         "parse":  [{"name", "completion", "thinking_mode", "expected" | "error"}...]}
`request` is what the C++ EncodeChatDsv4 receives (a message list, or
{"messages", "tools"}); `options` mirrors Dsv4ChatOptions.
"""

import argparse
import copy
import json
import os
import sys

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
                "precision": {"type": "integer", "minimum": 0, "maximum": 10000000000000000000},
                "scale": {"type": "number", "default": 1e-05, "examples": [0.1, 1e16, 1e15, 2.5, -0.0, 100.0]},
                "flags": {"type": "array", "items": {"type": "boolean"}},
                "meta": {"type": ["object", "null"], "additionalProperties": True},
            },
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {"name": "search", "description": "Web search", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
}


def call(cid, name, args):
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}


def encode_cases(enc_dir):
    tests = os.path.join(enc_dir, "tests")
    cases = []

    def add(name, messages, mode="thinking", drop_thinking=True, add_bos=True, effort=None, request=None):
        cases.append(dict(name=name, messages=messages, mode=mode, drop_thinking=drop_thinking,
                          add_bos=add_bos, effort=effort, request=request))

    # The four official cases shipped with the encoder.
    td = json.load(open(os.path.join(tests, "test_input_1.json")))
    add("official_1_tools_request", None, request=td)
    add("official_2", json.load(open(os.path.join(tests, "test_input_2.json"))))
    add("official_3_developer_search", json.load(open(os.path.join(tests, "test_input_3.json"))))
    add("official_4_action_task", json.load(open(os.path.join(tests, "test_input_4.json"))), mode="chat")

    sys_msg = {"role": "system", "content": "You are a helpful assistant."}
    u = lambda t: {"role": "user", "content": t}
    a = lambda c, r=None, **kw: dict({"role": "assistant", "content": c, "reasoning_content": r}, **kw)

    add("chat_single_user", [sys_msg, u("Hi!")], mode="chat")
    add("thinking_single_user", [sys_msg, u("Hi!")])
    add("no_system", [u("What is 2+2?")])
    add("system_only", [sys_msg])
    add("chat_multi_turn_reasoning_ignored",
        [sys_msg, u("a"), a("b", "r1"), u("c"), a("d", "r2"), u("e")], mode="chat")
    add("thinking_drop_earlier_reasoning",
        [sys_msg, u("a"), a("b", "r1"), u("c"), a("d", "r2"), u("e")])
    add("thinking_keep_reasoning_drop_off",
        [sys_msg, u("a"), a("b", "r1"), u("c"), a("d", "r2"), u("e")], drop_thinking=False)
    add("thinking_last_assistant_keeps_reasoning", [u("q"), a("answer", "because")])
    add("effort_max_thinking", [sys_msg, u("Prove it.")], effort="max")
    add("effort_max_chat_has_no_effect", [sys_msg, u("Prove it.")], mode="chat", effort="max")
    add("effort_high", [u("Prove it.")], effort="high")
    add("effort_max_without_system", [u("Prove it.")], effort="max")

    tools_sys = dict(sys_msg, tools=[WEATHER_TOOL, SEARCH_TOOL])
    add("parallel_tool_results_sorted",
        [tools_sys, u("Weather in Paris and Rome? Also search news."),
         a("", "Need three calls.", tool_calls=[call("c1", "get_weather", {"location": "Paris"}),
                                                call("c2", "get_weather", {"location": "Rome", "unit": "celsius"}),
                                                call("c3", "search", {"q": "news"})]),
         {"role": "tool", "tool_call_id": "c3", "content": "news result"},
         {"role": "tool", "tool_call_id": "c1", "content": "Paris: 20C"},
         {"role": "tool", "tool_call_id": "c2", "content": "Rome: 25C"},
         a("Paris 20C, Rome 25C.", "Done.")])
    add("parallel_tool_results_chat_mode",
        [tools_sys, u("Weather?"),
         a("", None, tool_calls=[call("c1", "get_weather", {"location": "Paris"}),
                                 call("c2", "get_weather", {"location": "Rome"})]),
         {"role": "tool", "tool_call_id": "c2", "content": "Rome"},
         {"role": "tool", "tool_call_id": "c1", "content": "Paris"}], mode="chat")
    add("tool_call_non_string_args",
        [dict(sys_msg, tools=[CALC_TOOL]), u("compute"),
         a("", "thinking", tool_calls=[call("x", "calc", {
             "expr": "1+1", "precision": 3, "scale": 0.5, "flags": [True, False], "meta": {"k": [1, 2.0, None]},
             "big": 12345678901234567890, "tiny": 1e-07, "huge": 1.5e300, "neg": -3, "unicode": "ü数\n\"q\""})])])
    add("tool_call_unparsable_arguments",
        [tools_sys, u("x"), a("", None, tool_calls=[call("x", "search", "not json {")])])
    add("tool_call_empty_arguments_object",
        [tools_sys, u("x"), a("", None, tool_calls=[call("x", "search", "{}")])])
    add("tool_result_list_content",
        [tools_sys, u("x"), a("", None, tool_calls=[call("t1", "search", {"q": "img"})]),
         {"role": "tool", "tool_call_id": "t1",
          "content": [{"type": "text", "text": "part one"}, {"type": "image_url", "image_url": {"url": "u"}},
                      {"type": "text", "text": "part two"}]}])
    add("tool_message_without_id", [tools_sys, u("x"), a("", None, tool_calls=[call("t1", "search", {"q": "a"})]),
                                    {"role": "tool", "content": "r"}])
    add("user_then_user", [sys_msg, u("first"), u("second")])
    add("user_then_tool_merged", [tools_sys, u("look"), {"role": "tool", "tool_call_id": "z", "content": "zz"}])
    add("tool_then_user_merged",
        [tools_sys, u("x"), a("", None, tool_calls=[call("t1", "search", {"q": "a"})]),
         {"role": "tool", "tool_call_id": "t1", "content": "res"}, u("thanks, and?")])
    add("response_format_system",
        [dict(sys_msg, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}),
         u("json please")])
    add("response_format_developer_chat",
        [{"role": "developer", "content": "dev says", "response_format": {"type": "json_object"}}], mode="chat")
    add("developer_with_tools_chat",
        [sys_msg, {"role": "developer", "content": "find it", "tools": [SEARCH_TOOL]}], mode="chat")
    add("developer_dropped_before_last_user",
        [sys_msg, {"role": "developer", "content": "old dev"}, a("x", "r"), u("new")])
    add("latest_reminder_after_system", [sys_msg, {"role": "latest_reminder", "content": "2026-01-01, Paris"}, u("hi")])
    add("latest_reminder_after_user", [sys_msg, u("hi"), {"role": "latest_reminder", "content": "late"}])
    for task in ["query", "authority", "domain", "read_url"]:
        add(f"task_{task}", [sys_msg, dict(u("search me"), task=task)], mode="chat")
    add("task_action_thinking", [sys_msg, dict(u("route me"), task="action")])
    add("task_action_then_answer_chat", [sys_msg, dict(u("route me"), task="action"), a("Search")], mode="chat")
    add("task_title_on_assistant", [sys_msg, u("hello"), a("Hi there", "r", task="title")])
    add("task_title_then_title_answer", [sys_msg, u("hello"), a("Hi there", "r", task="title"), a("Greeting")])
    add("wo_eos_prefill", [sys_msg, u("Start with yes"), a("Yes,", "ok", wo_eos=True)])
    add("assistant_null_content_tool_calls_chat",
        [tools_sys, u("x"), {"role": "assistant", "content": None, "tool_calls": [call("1", "search", {"q": "z"})]}],
        mode="chat")
    add("no_bos", [sys_msg, u("Hi")], add_bos=False)
    add("unicode_and_escapes",
        [{"role": "system", "content": "系统 🧑‍🤝‍🧑\n\t\"quotes\" \\ back"}, u("こんにちは 👋🏽 \u2028 end")])
    add("multiple_system_messages", [sys_msg, {"role": "system", "content": "Second system."}, u("x")])
    add("assistant_after_assistant", [u("x"), a("one", "r1"), a("two", "r2")])
    add("tools_disable_drop_thinking",
        [tools_sys, u("a"), a("b", "r1"), u("c"), a("d", "r2"), u("e")])
    add("empty_system_content", [{"role": "system", "content": ""}, u("x")])
    add("top_level_tools_with_system_request", None,
        request={"tools": [SEARCH_TOOL], "messages": [sys_msg, u("find cats")]})
    return cases


def parse_cases(enc):
    dsml = enc.dsml_token
    eos = enc.eos_token
    tc = (f"\n\n<{dsml}tool_calls>\n<{dsml}invoke name=\"get_weather\">\n"
          f"<{dsml}parameter name=\"location\" string=\"true\">Beijing</{dsml}parameter>\n"
          f"<{dsml}parameter name=\"days\" string=\"false\">3</{dsml}parameter>\n"
          f"<{dsml}parameter name=\"opts\" string=\"false\">{{\"a\": [1, 2]}}</{dsml}parameter>\n"
          f"</{dsml}invoke>\n<{dsml}invoke name=\"search\">\n"
          f"<{dsml}parameter name=\"q\" string=\"true\">line1\nline2 \"quoted\" ü</{dsml}parameter>\n"
          f"</{dsml}invoke>\n</{dsml}tool_calls>")
    empty_invoke = f"\n\n<{dsml}tool_calls>\n<{dsml}invoke name=\"noargs\">\n</{dsml}invoke>\n</{dsml}tool_calls>"
    cases = [
        ("thinking_content", "Simple arithmetic.</think>2 + 2 = 4." + eos, "thinking"),
        ("thinking_empty_reasoning", "</think>Answer." + eos, "thinking"),
        ("chat_content", "Just the answer." + eos, "chat"),
        ("chat_multiline_content", "Line 1\n\nLine 2\n\n" + eos, "chat"),
        ("thinking_tool_calls", "Need weather.</think>" + tc + eos, "thinking"),
        ("thinking_content_and_tool_calls", "r</think>Let me check." + tc + eos, "thinking"),
        ("chat_tool_calls", tc + eos, "chat"),
        ("chat_tool_calls_no_eos", tc, "chat"),
        ("empty_invoke", "</think>" + empty_invoke + eos, "thinking"),
        ("error_missing_think_end", "no end of thinking" + eos, "thinking"),
        ("error_text_after_eos", "ok" + eos + "more", "chat"),
        ("error_think_tag_in_content", "</think>a <think> b" + eos, "thinking"),
        ("error_dsml_in_content", "a ｜DSML｜ b" + eos, "chat"),
        ("error_bad_invoke_header", f"\n\n<{dsml}tool_calls>\n<{dsml}invoke nam=\"x\">\n</{dsml}invoke>\n</{dsml}tool_calls>" + eos, "chat"),
        ("error_bad_param_header", f"\n\n<{dsml}tool_calls>\n<{dsml}invoke name=\"x\">\n<{dsml}parameter name=\"k\" string=\"maybe\">v</{dsml}parameter>\n</{dsml}invoke>\n</{dsml}tool_calls>" + eos, "chat"),
        ("error_duplicate_param", f"\n\n<{dsml}tool_calls>\n<{dsml}invoke name=\"x\">\n<{dsml}parameter name=\"k\" string=\"true\">1</{dsml}parameter>\n<{dsml}parameter name=\"k\" string=\"true\">2</{dsml}parameter>\n</{dsml}invoke>\n</{dsml}tool_calls>" + eos, "chat"),
        ("error_text_after_tool_calls", tc + "trailing" + eos, "chat"),
        ("error_missing_newline_after_block", f"\n\n<{dsml}tool_calls><{dsml}invoke name=\"x\">\n</{dsml}invoke>\n</{dsml}tool_calls>" + eos, "chat"),
    ]
    out = []
    for name, text, mode in cases:
        entry = {"name": name, "completion": text, "thinking_mode": mode}
        try:
            parsed = enc.parse_message_from_completion_text(text, thinking_mode=mode)
            entry["expected"] = {
                "reasoning_content": parsed["reasoning_content"],
                "content": parsed["content"],
                "tool_calls": [{"name": t["function"]["name"], "arguments": t["function"]["arguments"]}
                               for t in parsed["tool_calls"]],
            }
            assert not name.startswith("error_"), name
        except (AssertionError, ValueError) as e:
            assert name.startswith("error_"), f"{name}: {e!r}"
            entry["error"] = str(e) or type(e).__name__
        out.append(entry)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--encoding-dir", required=True, help="folder with encoding_dsv4.py and tests/")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    sys.path.insert(0, args.encoding_dir)
    import encoding_dsv4 as enc

    encode = []
    for c in encode_cases(args.encoding_dir):
        if c["request"] is not None:
            req = c["request"]
            messages = copy.deepcopy(req["messages"])
            if messages and messages[0]["role"] in ("system", "developer"):
                messages[0]["tools"] = req["tools"]
            else:
                messages.insert(0, {"role": "system", "content": "", "tools": req["tools"]})
            request = req
        else:
            messages = copy.deepcopy(c["messages"])
            request = c["messages"]
        expected = enc.encode_messages(messages, thinking_mode=c["mode"], drop_thinking=c["drop_thinking"],
                                       add_default_bos_token=c["add_bos"], reasoning_effort=c["effort"])
        encode.append({"name": c["name"], "request": request,
                       "options": {"thinking_mode": c["mode"], "drop_thinking": c["drop_thinking"],
                                   "add_bos": c["add_bos"], "reasoning_effort": c["effort"] or ""},
                       "expected": expected})
    # The official gold files must match what the reference produced.
    for i in (1, 2, 3, 4):
        gold = open(os.path.join(args.encoding_dir, "tests", f"test_output_{i}.txt"), encoding="utf-8").read()
        assert encode[i - 1]["expected"] == gold, f"official case {i} differs from its gold file"
    out = {"encode": encode, "parse": parse_cases(enc)}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(encode)} encode and {len(out['parse'])} parse goldens to {args.out}")


if __name__ == "__main__":
    main()
