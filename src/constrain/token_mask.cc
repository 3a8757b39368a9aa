// Token masks over a vocabulary trie (token_mask.h).
#include "constrain/token_mask.h"

#include <algorithm>
#include <numeric>

#include "base/check.h"

namespace dsv4::constrain {

TokenTrie::TokenTrie(std::vector<std::string> texts) : texts_(std::move(texts)) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < texts_.size(); ++i) {
    if (!texts_[i].empty()) order.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return texts_[a] < texts_[b]; });
  std::vector<uint32_t> path;  // path[k]: the node of depth k + 1 on the current text
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& t = texts_[id];
    max_bytes_ = std::max<uint32_t>(max_bytes_, static_cast<uint32_t>(t.size()));
    size_t lcp = 0;
    if (prev != nullptr) {
      while (lcp < prev->size() && lcp < t.size() && (*prev)[lcp] == t[lcp]) ++lcp;
    }
    // Nodes deeper than the shared prefix end their subtree here.
    while (path.size() > lcp) {
      nodes_[path.back()].skip = static_cast<uint32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t k = lcp; k < t.size(); ++k) {
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back(Node{static_cast<uint8_t>(t[k]), static_cast<uint32_t>(k + 1), 0,
                            static_cast<uint32_t>(ids_.size()),
                            static_cast<uint32_t>(ids_.size())});
    }
    Node& end = nodes_[path.back()];
    DCHECK(end.tok_end == ids_.size());  // a node's tokens are consecutive
    ids_.push_back(id);
    end.tok_end = static_cast<uint32_t>(ids_.size());
    prev = &t;
  }
  for (uint32_t i : path) nodes_[i].skip = static_cast<uint32_t>(nodes_.size());
}

void MaskWalker::Compute(const State& state, TokenMask* mask) {
  mask->assign((trie_.vocab_size() + 63) / 64, 0);
  if (depth_states_.size() < trie_.max_token_bytes() + 1) {
    depth_states_.resize(trie_.max_token_bytes() + 1);
  }
  depth_states_[0] = state;
  const std::vector<TokenTrie::Node>& nodes = trie_.nodes();
  const std::vector<int32_t>& ids = trie_.ids();
  int64_t visited = 0;
  for (uint32_t i = 0; i < nodes.size();) {
    const TokenTrie::Node& n = nodes[i];
    State& here = depth_states_[n.depth];
    automaton_.Feed(depth_states_[n.depth - 1], n.byte, &here);
    ++visited;
    if (here.empty()) {
      i = n.skip;
      continue;
    }
    for (uint32_t t = n.tok_begin; t < n.tok_end; ++t) MaskSet(*mask, ids[t]);
    ++i;
  }
  last_visited_ = visited;
}

void ReferenceMask(const JsonAutomaton& automaton, const TokenTrie& trie, const State& state,
                   TokenMask* mask) {
  mask->assign((trie.vocab_size() + 63) / 64, 0);
  for (int32_t id = 0; id < trie.vocab_size(); ++id) {
    if (trie.text(id).empty()) continue;
    State s = state;
    if (automaton.FeedAll(&s, trie.text(id))) MaskSet(*mask, id);
  }
}

void PrefixMask(const TokenTrie& trie, std::string_view text, TokenMask* mask) {
  mask->assign((trie.vocab_size() + 63) / 64, 0);
  const std::vector<TokenTrie::Node>& nodes = trie.nodes();
  const std::vector<int32_t>& ids = trie.ids();
  // Siblings of depth d + 1 start at `i` and follow each other's skip, up to `end`.
  uint32_t i = 0, end = static_cast<uint32_t>(nodes.size());
  for (size_t d = 0; d < text.size(); ++d) {
    const uint8_t b = static_cast<uint8_t>(text[d]);
    while (i < end && nodes[i].byte != b) i = nodes[i].skip;
    if (i >= end) return;
    for (uint32_t t = nodes[i].tok_begin; t < nodes[i].tok_end; ++t) MaskSet(*mask, ids[t]);
    end = nodes[i].skip;
    ++i;  // its first child, if any
  }
}

std::shared_ptr<const TokenMask> MaskCache::Get(const TokenTrie* trie, const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (trie != trie_) {
    ++misses_;
    return nullptr;
  }
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void MaskCache::Put(const TokenTrie* trie, const std::string& key,
                    std::shared_ptr<const TokenMask> mask) {
  std::lock_guard<std::mutex> lock(mu_);
  if (trie != trie_) {
    lru_.clear();
    index_.clear();
    trie_ = trie;
  }
  if (index_.contains(key)) return;
  lru_.emplace_front(key, std::move(mask));
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

int64_t MaskCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

int64_t MaskCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

}  // namespace dsv4::constrain
