// EchoModel: the test-only scripted model (echo_model.h).
#include "engine/echo_model.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "tokenizer/chat_dsv4.h"

namespace dsv4 {
namespace {

namespace tok = dsv4_tokens;
constexpr float kOtherLogit = -30.0f;

class EchoCache : public SequenceCache {
 public:
  explicit EchoCache(int64_t max_tokens) : max_tokens_(max_tokens) { tokens_.reserve(max_tokens); }
  int64_t length() const override { return static_cast<int64_t>(tokens_.size()); }
  void Truncate(int64_t n) override {
    CHECK(n >= 0 && n <= length());
    tokens_.resize(n);
    if (script_at_ >= n) script_at_ = -1;
  }
  // The script is made from the tokens after the assistant token too.
  bool ExactTruncate() const override { return false; }

  int64_t max_tokens_;
  std::vector<int32_t> tokens_;
  int64_t script_at_ = -1;  // the assistant token the script was made for
  std::vector<int32_t> script_;
};

class EchoModel : public Model {
 public:
  EchoModel(const Tokenizer& tokenizer, int32_t assistant_id, int64_t max_context,
            const std::string& architecture)
      : tokenizer_(tokenizer), assistant_id_(assistant_id) {
    info_.architecture = architecture;
    info_.vocab_size = tokenizer.vocab_size();
    info_.max_context = max_context;
    info_.bos_id = tokenizer.bos_id();
    info_.eos_id = tokenizer.eos_id();
  }
  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceCache> NewCache(int64_t max_tokens) const override {
    if (max_tokens <= 0 || max_tokens > info_.max_context) max_tokens = info_.max_context;
    return std::make_unique<EchoCache>(max_tokens);
  }
  void SetThreads(int) override {}

  Status Forward(std::span<const int32_t> tokens, SequenceCache& seq, std::span<float> logits,
                 bool all_logits) override {
    auto& cache = static_cast<EchoCache&>(seq);
    const int64_t T = static_cast<int64_t>(tokens.size());
    const int64_t V = info_.vocab_size;
    if (cache.length() + T > cache.max_tokens_) {
      return OutOfRange("echo model: context full (" + std::to_string(cache.max_tokens_) + ")");
    }
    for (int32_t id : tokens) {
      if (id < 0 || id >= V)
        return InvalidArgument("echo model: bad token id " + std::to_string(id));
    }
    CHECK(static_cast<int64_t>(logits.size()) >= (all_logits ? T * V : V));
    const int64_t pos0 = cache.length();
    cache.tokens_.insert(cache.tokens_.end(), tokens.begin(), tokens.end());
    for (int64_t t = all_logits ? 0 : T - 1; t < T; ++t) {
      std::span<float> row = logits.subspan(all_logits ? t * V : 0, V);
      std::fill(row.begin(), row.end(), kOtherLogit);
      row[Next(cache, pos0 + t + 1)] = 0.0f;
    }
    return Status::Ok();
  }

 private:
  // The token after the first `n` tokens of the cache.
  int32_t Next(EchoCache& cache, int64_t n) {
    const int32_t eos = std::max(info_.eos_id, 0);
    int64_t a = n - 1;
    while (a >= 0 && cache.tokens_[a] != assistant_id_) --a;
    if (a < 0) return eos;
    const int64_t k = n - (a + 2);  // tokens after <｜Assistant｜> and <think> / </think>
    if (k < 0) return eos;
    if (cache.script_at_ != a) {
      const std::span<const int32_t> prompt(cache.tokens_.data(), a + 2);
      cache.script_ = tokenizer_.Encode(
          EchoModelReply(DecodeTokens(tokenizer_, prompt), info_.architecture == "deepseek_v41"),
          false);
      cache.script_at_ = a;
    }
    return k < static_cast<int64_t>(cache.script_.size()) ? cache.script_[k] : eos;
  }

  const Tokenizer& tokenizer_;
  int32_t assistant_id_;
  ModelInfo info_;
};

std::string Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

std::string EchoModelReply(std::string_view prompt, bool v41_dsml) {
  std::string reply;
  if (prompt.ends_with(tok::kThinkStart))
    reply = "Thinking about it." + std::string(tok::kThinkEnd);
  const size_t user = prompt.rfind(tok::kUser);
  std::string_view turn;
  if (user != std::string_view::npos) {
    turn = prompt.substr(user + tok::kUser.size());
    turn = turn.substr(0, turn.find(tok::kAssistant));
  }
  // Tool results.
  std::string results;
  for (size_t at = turn.find("<tool_result>"); at != std::string_view::npos;
       at = turn.find("<tool_result>", at + 1)) {
    const size_t begin = at + std::string_view("<tool_result>").size();
    const size_t end = turn.find("</tool_result>", begin);
    if (end == std::string_view::npos) break;
    if (!results.empty()) results += "; ";
    results += turn.substr(begin, end - begin);
  }
  if (!results.empty()) return reply + "Tool results: " + results;
  // EFFORT?: the V4.1 reasoning-effort line's number.
  if (Trim(turn) == "EFFORT?") {
    constexpr std::string_view kEffort = "Reasoning Effort: ";
    const size_t at = prompt.find(kEffort);
    if (at == std::string_view::npos) return reply + "Effort: none";
    std::string_view n = prompt.substr(at + kEffort.size());
    return reply + "Effort: " + std::string(n.substr(0, n.find(' ')));
  }
  // REPLY TEXT: TEXT verbatim.
  if (const std::string t = Trim(turn); t.starts_with("REPLY ")) return reply + t.substr(6);
  // CALL NAME {json}
  if (const size_t call = turn.find("CALL "); call != std::string_view::npos) {
    std::string_view rest = turn.substr(call + 5);
    const size_t space = rest.find(' ');
    const std::string name(rest.substr(0, space));
    const std::string args =
        space == std::string_view::npos ? std::string("{}") : Trim(rest.substr(space + 1));
    const auto obj = nlohmann::ordered_json::parse(args, nullptr, /*allow_exceptions=*/false);
    if (!name.empty() && obj.is_object()) {
      const std::string dsml(tok::kDsml);
      const std::string calls = v41_dsml ? " calls" : "tool_calls";
      const std::string invoke = v41_dsml ? " invoke" : "invoke";
      const std::string param = v41_dsml ? " parameter" : "parameter";
      std::string params;
      for (auto it = obj.begin(); it != obj.end(); ++it) {
        const bool is_string = it.value().is_string();
        params += "<" + dsml + param + " name=\"" + it.key() + "\" string=\"" +
                  (is_string ? "true" : "false") + "\">" +
                  (is_string ? it.value().get<std::string>() : PythonJsonDumps(it.value())) + "</" +
                  dsml + param + ">\n";
      }
      return reply + "\n\n<" + dsml + calls + ">\n<" + dsml + invoke + " name=\"" + name + "\">\n" +
             params + "</" + dsml + invoke + ">\n</" + dsml + calls + ">";
    }
  }
  return reply + "Echo: " + Trim(turn);
}

Result<LoadedModel> LoadEchoModel(const std::string& tokenizer_path, int64_t max_context,
                                  const std::string& architecture) {
  if (tokenizer_path.empty()) {
    return InvalidArgument("--test-echo-model needs --tokenizer",
                           "pass a DeepSeek-V4 tokenizer.json(.gz)");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, LoadTokenizer(tokenizer_path));
  const std::vector<int32_t> ids = tokenizer->Encode(tok::kAssistant, false);
  if (ids.size() != 1 || tokenizer->eos_id() < 0) {
    return InvalidArgument(tokenizer_path + ": not a DeepSeek-V4 tokenizer (no single " +
                               std::string(tok::kAssistant) + " token or no EOS)",
                           "the echo model needs the V4 special tokens");
  }
  LoadedModel m;
  m.stop_ids = {tokenizer->eos_id()};
  m.model = std::make_unique<EchoModel>(*tokenizer, ids[0], max_context, architecture);
  m.tokenizer = std::move(tokenizer);
  m.path = "test-echo-model";
  m.format = "test-echo";
  return m;
}

}  // namespace dsv4
