"""Seeded generator of JSON Schemas in the subset dsv4's structured output
supports (src/constrain/json_schema.h), for test_structured_output.py's
schema suite. `python3 tests/integration/json_schema_gen.py SEED COUNT` prints
them, one per line.

Lengths are bounded (strings get a maxLength, arrays a maxItems, enums are
short) so that a random-weight model's output has room to finish; when it
still runs out of tokens the automaton forces the shortest completion near
max_tokens (json_matcher.h), so every output is complete either way.
"""
import json
import random
import sys

WORDS = ["id", "name", "age", "tags", "kind", "value", "items", "note", "x", "y", "when",
         "score", "ok", "meta", "list", "a", "b", "c\u00e9", "with space", "q\"uote"]


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.defs = {}

    def string(self):
        r = self.r
        s = {"type": "string"}
        pick = r.random()
        if pick < 0.1:
            s["format"] = r.choice(["date", "uuid", "date-time", "time"])
            return s
        if pick < 0.15:
            s["format"] = "email"  # an annotation: not enforced, not validated
        s["maxLength"] = r.randint(0, 8)
        if r.random() < 0.4:
            s["minLength"] = r.randint(0, s["maxLength"])
        return s

    def scalar(self):
        r = self.r
        pick = r.random()
        if pick < 0.3:
            return self.string()
        if pick < 0.45:
            return {"type": "integer"}
        if pick < 0.6:
            return {"type": "number"}
        if pick < 0.68:
            return {"type": "boolean"}
        if pick < 0.72:
            return {"type": "null"}
        if pick < 0.84:
            values = r.sample(["red", "green", "blue", 1, 12, -3, 2.5, True, None, "x y"],
                              r.randint(1, 4))
            return {"enum": values}
        if pick < 0.9:
            return {"const": r.choice(["fixed", 7, False, {"k": [1, 2]}])}
        return {"type": [r.choice(["string", "integer", "boolean"]), "null"], "maxLength": 5}

    def schema(self, depth):
        r = self.r
        if depth >= 3 or r.random() < 0.35:
            return self.scalar()
        pick = r.random()
        if pick < 0.45:
            return self.obj(depth)
        if pick < 0.7:
            s = {"type": "array", "items": self.schema(depth + 1), "maxItems": r.randint(0, 3)}
            if r.random() < 0.5:
                s["minItems"] = r.randint(0, s["maxItems"])
            return s
        if pick < 0.85:
            kw = r.choice(["anyOf", "oneOf"])
            # oneOf is enforced as anyOf: its alternatives here never overlap.
            if kw == "oneOf":
                alts = [{"type": "integer"}, {"type": "string", "maxLength": 4},
                        {"type": "null"}, {"type": "array", "items": {"type": "boolean"},
                                           "maxItems": 2}]
                return {"oneOf": r.sample(alts, r.randint(2, 3))}
            return {"anyOf": [self.schema(depth + 1) for _ in range(r.randint(2, 3))]}
        name = f"D{len(self.defs)}"
        self.defs[name] = {}  # reserved: a definition nested in it gets another name
        self.defs[name] = self.schema(depth + 1)
        return {"$ref": f"#/$defs/{name}"}

    def obj(self, depth):
        r = self.r
        names = r.sample(WORDS, r.randint(0, 4))
        s = {"type": "object", "properties": {n: self.schema(depth + 1) for n in names}}
        if names:
            s["required"] = r.sample(names, r.randint(0, len(names)))
        pick = r.random()
        if pick < 0.5:
            s["additionalProperties"] = False
        elif pick < 0.6:
            s["additionalProperties"] = {"type": "integer"}
        if r.random() < 0.2:
            s["title"] = "T"
            s["description"] = "an annotation"
        return s

    def root(self):
        s = self.obj(0) if self.r.random() < 0.7 else self.schema(0)
        if self.defs:
            s = {"$defs": self.defs, **s} if "$ref" not in s else {"$defs": self.defs, **s}
        return s


def generate(seed, count):
    """`count` schemas, the i-th from seed * 1000003 + i."""
    return [Gen(seed * 1000003 + i).root() for i in range(count)]


if __name__ == "__main__":
    for s in generate(int(sys.argv[1]), int(sys.argv[2])):
        print(json.dumps(s))
