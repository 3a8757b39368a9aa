// ResponseStore: the responses `dsv4 serve` keeps for the OpenAI Responses
// API (`store: true`), in memory, so that `previous_response_id` can continue
// a conversation and `GET/DELETE /v1/responses/{id}` can find them.
//
// Each entry holds the response object and the conversation's input items
// (the whole history it ran on, oldest first). Bounded by a count and by bytes
// (the entries' JSON text); the least recently used (stored or read) go first,
// and an entry larger than the byte cap alone is not kept. Thread-safe. Used
// by responses_api.cc; tested by tests/server/responses_test.cc.
#ifndef DSV4_SERVER_RESPONSES_STORE_H_
#define DSV4_SERVER_RESPONSES_STORE_H_

#include <nlohmann/json.hpp>

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace dsv4::server {

struct StoredResponse {
  nlohmann::ordered_json response;     // the response object (GET /v1/responses/{id})
  nlohmann::ordered_json input_items;  // the input it ran on: history + its own input, with ids
  size_t bytes = 0;                    // set by Put: both as JSON text
};

class ResponseStore {
 public:
  // max_count 0: nothing is stored.
  ResponseStore(size_t max_count, size_t max_bytes)
      : max_count_(max_count), max_bytes_(max_bytes) {}

  // Stores (or replaces) `id`, evicting the least recently used entries until
  // both caps hold. False when the entry alone is over the byte cap (or the
  // store holds nothing): it is not kept.
  bool Put(const std::string& id, StoredResponse entry);
  // The entry, now the most recently used; null when unknown or evicted.
  std::shared_ptr<const StoredResponse> Get(const std::string& id);
  // False when unknown.
  bool Erase(const std::string& id);

  size_t size() const;
  size_t bytes() const;
  size_t max_count() const { return max_count_; }
  size_t max_bytes() const { return max_bytes_; }

 private:
  struct Entry {
    std::string id;
    std::shared_ptr<const StoredResponse> value;
  };
  void EvictLocked();

  const size_t max_count_;
  const size_t max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace dsv4::server

#endif  // DSV4_SERVER_RESPONSES_STORE_H_
