#!/usr/bin/env python3
"""Makes spm_goldens.txt: SentencePiece's own encoding of varied strings with
the stories260K vocabulary, the reference for tests/tokenizer/spm_tokenizer_test.cc.

The vocabulary (pieces, scores, types) is read from the GGUF file
(models/stories260K/stories260K.gguf) and turned into a SentencePiece BPE
ModelProto: byte_fallback on, identity normalizer, add_dummy_prefix on,
remove_extra_whitespaces off (Llama's tokenizer.model settings). Encoding is
then done by the `sentencepiece` package (PyPI, Apache-2.0; Google's C++
library), not by anything in this repository.

Usage: python3 make_spm_goldens.py <repo root>   (needs: pip install sentencepiece protobuf)
Output line: the ids (no BOS), space-separated, a TAB, then the text's UTF-8
bytes in hex.
"""
import random
import struct
import sys

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb


def read_gguf_vocab(path):
    """The tokenizer.ggml.{tokens,scores,token_type} arrays of a GGUF v3 file."""
    d = open(path, "rb").read()
    o = 0

    def rd(fmt):
        nonlocal o
        v = struct.unpack_from(fmt, d, o)[0]
        o += struct.calcsize(fmt)
        return v

    def rs():
        nonlocal o
        n = rd("<Q")
        s = d[o:o + n]
        o += n
        return s

    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
              10: "<Q", 11: "<q", 12: "<d"}

    def val(t):
        if t == 8:
            return rs()
        if t == 9:
            at = rd("<I")
            return [val(at) for _ in range(rd("<Q"))]
        return rd(scalar[t])

    assert d[:4] == b"GGUF"
    o = 4
    rd("<I")
    rd("<Q")
    kv = {}
    for _ in range(rd("<Q")):
        k = rs().decode()
        kv[k] = val(rd("<I"))
    return (kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.scores"],
            kv["tokenizer.ggml.token_type"])


def build_processor(tokens, scores, types):
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.vocab_size = len(tokens)
    m.trainer_spec.unk_id = 0
    m.trainer_spec.bos_id = 1
    m.trainer_spec.eos_id = 2
    m.trainer_spec.pad_id = -1
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = True
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    for t, s, y in zip(tokens, scores, types):
        p = m.pieces.add()
        p.piece = t.decode("utf-8")
        p.score = s
        p.type = y
    return spm.SentencePieceProcessor(model_proto=m.SerializeToString())


def cases(sample_text):
    out = []
    stories = sample_text.split("<|endoftext|>")
    out += stories
    out += [line for line in sample_text.split("\n") if line]
    out.append(sample_text)  # the whole file: long-range merges
    out += [
        "", " ", "  ", "\n", "\t", "a", "Once upon a time", "once upon a time",
        "   three leading", "trailing three   ", "a  b   c    d", "\n\nnewlines\n\n",
        "tab\tand\tnewline\n", "CRLF line\r\nnext", "\u00a0no-break space",
        "héllo wörld", "naïve café résumé señor", "“quoted” ‘single’ — dash – en …",
        "€100 ™ â", "你好，世界", "日本語のテキスト", "Ünïcödé ßtraße", "emoji 😀🎉 mixed",
        "<s> not a control token </s>", "<unk>", "<0x41>", "\\n literal backslash-n",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "the the the the the the the the the the the the the the the the the the the",
        "".join(chr(c) for c in range(32, 127)),
        "".join(chr(c) for c in range(1, 32)),
    ]
    rng = random.Random(20261129)
    alphabet = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
                + list(" " * 12) + ["\n", "\t", "  "] + list(".,!?'\";:-()")
                + ["é", "ñ", "“", "”", "’", "—", "€", "™", "😀", "中", "ß", "\u00a0", "Ω",
                   "the", " the", "he", "ing", " a", " was"])
    for _ in range(400):
        out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 48))))
    return out


def main():
    root = sys.argv[1]
    tokens, scores, types = read_gguf_vocab(f"{root}/models/stories260K/stories260K.gguf")
    sp = build_processor(tokens, scores, types)
    sample = open(f"{root}/tests/data/text/tinystories_sample.txt", encoding="utf-8").read()
    with open(f"{root}/tests/data/tokenizer/spm/spm_goldens.txt", "w") as f:
        for text in cases(sample):
            assert "\u2581" not in text and "\0" not in text
            ids = sp.encode(text)
            f.write(" ".join(map(str, ids)) + "\t" + text.encode("utf-8").hex() + "\n")


if __name__ == "__main__":
    main()
