// libFuzzer target for the structured-output compiler and automaton
// (src/constrain). The input is a JSON Schema, a NUL byte, then an output text:
//  1. the schema compiles or fails with a Status (never a crash or a hang);
//  2. the text is fed byte by byte; at every live prefix the completion is a
//     text that makes the value complete, and the mask key is computed;
//  3. at the start and where the text ends or is refused, the trie walk's
//     mask over a small vocabulary (every byte and some pieces) equals the
//     per-token reference.
// Seeds: tests/fuzz/corpus/fuzz_json_schema.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/check.h"
#include "constrain/json_automaton.h"
#include "constrain/json_schema.h"
#include "constrain/token_mask.h"

namespace {

const dsv4::constrain::TokenTrie& Vocabulary() {
  static const dsv4::constrain::TokenTrie* trie = [] {
    std::vector<std::string> v;
    for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t : {"{\"", "\":", "\",\"", "\"}", "[\"", "true", "null", "12", "e+", ", ",
                          "\n  ", "\\u00", "\xc3\xa9", "]}", "},{", "-1", "0.5"}) {
      v.push_back(t);
    }
    return new dsv4::constrain::TokenTrie(std::move(v));
  }();
  return *trie;
}

void CheckMask(const dsv4::constrain::JsonAutomaton& a, const dsv4::constrain::State& s) {
  dsv4::constrain::MaskWalker walker(a, Vocabulary());
  dsv4::constrain::TokenMask fast, ref;
  walker.Compute(s, &fast);
  dsv4::constrain::ReferenceMask(a, Vocabulary(), s, &ref);
  CHECK(fast == ref, "the trie walk's mask differs from the reference");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view schema_text = in.substr(0, nul);
  const std::string_view output = nul == std::string_view::npos ? "" : in.substr(nul + 1);
  const auto schema = nlohmann::json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return 0;
  auto grammar = dsv4::constrain::CompileJsonSchema(schema);
  if (!grammar.ok()) {
    CHECK(!grammar.status().message().empty());
    return 0;
  }
  dsv4::constrain::JsonAutomaton a(*grammar);
  dsv4::constrain::State s = a.Start(), next;
  CheckMask(a, s);
  for (size_t i = 0; i <= output.size() && i < 256; ++i) {
    const std::string completion = a.Completion(s);
    dsv4::constrain::State done = s;
    CHECK(a.FeedAll(&done, completion) && a.Complete(done), "completion does not complete");
    (void)a.Key(s, 16);
    if (i == output.size()) break;
    a.Feed(s, static_cast<uint8_t>(output[i]), &next);
    if (next.empty()) break;
    std::swap(s, next);
  }
  CheckMask(a, s);
  return 0;
}
