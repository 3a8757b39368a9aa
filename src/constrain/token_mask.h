// Token masks: which tokens of the vocabulary a JsonAutomaton state allows.
//
// TokenTrie holds every token's bytes in a byte trie laid out in preorder
// (each node knows where its subtree ends), so MaskWalker computes a mask by
// walking it from a state: one Feed per trie node, and a whole subtree is
// skipped as soon as its prefix is refused. The twin ReferenceMask feeds each
// token's bytes on its own (tests compare the two). MaskCache keeps masks by
// the state's Key (an LRU), so a state seen before costs a lookup.
//
// Used by json_matcher.h; tested by tests/constrain/token_mask_test.cc.
#ifndef DSV4_CONSTRAIN_TOKEN_MASK_H_
#define DSV4_CONSTRAIN_TOKEN_MASK_H_

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "constrain/json_automaton.h"

namespace dsv4::constrain {

// One bit per token id: bit i of word i / 64.
using TokenMask = std::vector<uint64_t>;
inline bool MaskTest(const TokenMask& m, int32_t id) { return (m[id >> 6] >> (id & 63)) & 1; }
inline void MaskSet(TokenMask& m, int32_t id) { m[id >> 6] |= uint64_t{1} << (id & 63); }

class TokenTrie {
 public:
  // texts[id]: the bytes of token id (what the stream decoder emits); "" for a
  // token that is never allowed (control tokens, chat markers).
  explicit TokenTrie(std::vector<std::string> texts);

  int32_t vocab_size() const { return static_cast<int32_t>(texts_.size()); }
  const std::string& text(int32_t id) const { return texts_[id]; }
  uint32_t max_token_bytes() const { return max_bytes_; }
  size_t node_count() const { return nodes_.size(); }

  struct Node {
    uint8_t byte;
    uint32_t depth;      // bytes from the root (>= 1)
    uint32_t skip;       // the first node past this one's subtree
    uint32_t tok_begin;  // this node's tokens (whose bytes end here): ids_[tok_begin, tok_end)
    uint32_t tok_end;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  std::vector<std::string> texts_;
  std::vector<Node> nodes_;  // preorder
  std::vector<int32_t> ids_;
  uint32_t max_bytes_ = 0;
};

// Computes masks by walking the trie (one per sequence: it keeps scratch).
class MaskWalker {
 public:
  MaskWalker(const JsonAutomaton& automaton, const TokenTrie& trie)
      : automaton_(automaton), trie_(trie) {}
  // The tokens `state` allows (EOS and other empty tokens: never).
  void Compute(const State& state, TokenMask* mask);
  // Trie nodes fed by the last Compute.
  int64_t last_nodes_visited() const { return last_visited_; }

 private:
  const JsonAutomaton& automaton_;
  const TokenTrie& trie_;
  std::vector<State> depth_states_;  // [max_token_bytes + 1]
  int64_t last_visited_ = 0;
};

// The scalar twin: every token's bytes fed from `state` on their own.
void ReferenceMask(const JsonAutomaton& automaton, const TokenTrie& trie, const State& state,
                   TokenMask* mask);

// The tokens whose bytes are a non-empty prefix of `text` (a forced
// completion), by walking the trie along it.
void PrefixMask(const TokenTrie& trie, std::string_view text, TokenMask* mask);

// Masks by state key, least recently used dropped first; thread-safe. One
// per (grammar, trie): Get returns nothing for another trie.
class MaskCache {
 public:
  explicit MaskCache(size_t capacity = 128) : capacity_(capacity) {}
  std::shared_ptr<const TokenMask> Get(const TokenTrie* trie, const std::string& key);
  void Put(const TokenTrie* trie, const std::string& key, std::shared_ptr<const TokenMask> mask);
  int64_t hits() const;
  int64_t misses() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const TokenMask>>;
  size_t capacity_;
  mutable std::mutex mu_;
  const TokenTrie* trie_ = nullptr;
  std::list<Entry> lru_;
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace dsv4::constrain

#endif  // DSV4_CONSTRAIN_TOKEN_MASK_H_
