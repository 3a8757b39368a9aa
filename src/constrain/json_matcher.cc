// One sequence's JSON constraint (json_matcher.h).
#include "constrain/json_matcher.h"

#include <algorithm>
#include <limits>

#include "base/check.h"

namespace dsv4::constrain {

JsonMatcher::JsonMatcher(std::shared_ptr<const Grammar> grammar,
                         std::shared_ptr<const TokenTrie> trie, std::vector<int32_t> stop_ids)
    : automaton_(std::move(grammar)),
      trie_(std::move(trie)),
      stop_ids_(std::move(stop_ids)),
      walker_(automaton_, *trie_),
      state_(automaton_.Start()) {}

bool JsonMatcher::IsStop(int32_t token) const {
  return std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end();
}

void JsonMatcher::Prepare(int64_t tokens_left) {
  completion_ = automaton_.Completion(state_);
  // Each byte of the completion may take a token of its own.
  forced_ = !completion_.empty() && tokens_left <= static_cast<int64_t>(completion_.size());
}

bool JsonMatcher::Allows(int32_t token) const {
  if (IsStop(token)) return Complete();
  if (token < 0 || token >= trie_->vocab_size()) return false;
  const std::string& bytes = trie_->text(token);
  if (bytes.empty()) return false;
  if (forced_) return completion_.starts_with(bytes);
  scratch_ = state_;
  return automaton_.FeedAll(&scratch_, bytes);
}

bool JsonMatcher::AllowsBytes(std::string_view bytes) const {
  scratch_ = state_;
  return automaton_.FeedAll(&scratch_, bytes);
}

void JsonMatcher::Mask(std::span<float> logits) {
  const TokenMask* mask = &mask_;
  std::shared_ptr<const TokenMask> cached;
  if (forced_) {
    PrefixMask(*trie_, completion_, &mask_);
  } else {
    MaskCache* cache = automaton_.grammar().masks.get();
    const std::string key =
        cache != nullptr ? automaton_.Key(state_, trie_->max_token_bytes()) : std::string();
    if (cache != nullptr) cached = cache->Get(trie_.get(), key);
    if (cached != nullptr) {
      mask = cached.get();
    } else {
      walker_.Compute(state_, &mask_);
      if (cache != nullptr) cache->Put(trie_.get(), key, std::make_shared<TokenMask>(mask_));
    }
  }
  const float ninf = -std::numeric_limits<float>::infinity();
  // End-of-sequence ids are not in the trie (no bytes): allowed where complete.
  const bool complete = Complete();
  stop_logits_.clear();
  for (int32_t id : stop_ids_) {
    const bool in = id >= 0 && static_cast<size_t>(id) < logits.size();
    stop_logits_.push_back(in && complete ? logits[id] : ninf);
  }
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(logits.size()), trie_->vocab_size());
  for (int64_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = (*mask)[w];
    if (bits == ~uint64_t{0}) continue;
    const int64_t end = std::min<int64_t>(n, (w + 1) * 64);
    for (int64_t i = w * 64; i < end; ++i) {
      if (!((bits >> (i & 63)) & 1)) logits[i] = ninf;
    }
  }
  for (int64_t i = n; i < static_cast<int64_t>(logits.size()); ++i) logits[i] = ninf;
  for (size_t k = 0; k < stop_ids_.size(); ++k) {
    const int32_t id = stop_ids_[k];
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[id] = stop_logits_[k];
  }
}

bool JsonMatcher::AcceptBytes(std::string_view bytes) {
  scratch_ = state_;
  if (!automaton_.FeedAll(&scratch_, bytes)) return false;
  std::swap(state_, scratch_);
  text_.append(bytes);
  return true;
}

bool JsonMatcher::Accept(int32_t token) {
  if (token < 0 || token >= trie_->vocab_size()) return false;
  return AcceptBytes(trie_->text(token));
}

std::string JsonMatcher::Close() {
  if (Complete()) {
    state_.clear();  // done
    return {};
  }
  std::string c = automaton_.Completion(state_);
  AcceptBytes(c);
  state_.clear();
  return c;
}

}  // namespace dsv4::constrain
