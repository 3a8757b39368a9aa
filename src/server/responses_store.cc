// The stored responses of the Responses API (responses_store.h).
#include "server/responses_store.h"

namespace dsv4::server {

bool ResponseStore::Put(const std::string& id, StoredResponse entry) {
  entry.bytes = entry.response.dump().size() + entry.input_items.dump().size() + id.size();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(id); it != index_.end()) {
    bytes_ -= it->second->value->bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  if (max_count_ == 0 || entry.bytes > max_bytes_) return false;
  bytes_ += entry.bytes;
  lru_.push_front(Entry{id, std::make_shared<const StoredResponse>(std::move(entry))});
  index_[id] = lru_.begin();
  EvictLocked();
  return true;
}

std::shared_ptr<const StoredResponse> ResponseStore::Get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->value;
}

bool ResponseStore::Erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  bytes_ -= it->second->value->bytes;
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

size_t ResponseStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

void ResponseStore::EvictLocked() {
  while (!lru_.empty() && (lru_.size() > max_count_ || bytes_ > max_bytes_)) {
    bytes_ -= lru_.back().value->bytes;
    index_.erase(lru_.back().id);
    lru_.pop_back();
  }
}

}  // namespace dsv4::server
