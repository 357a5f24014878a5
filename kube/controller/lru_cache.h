// A map of bounded size that evicts its least recently used entry (groupcache's lru.Cache, which
// client-go's event correlator uses). Not thread-safe: its owner locks.
#pragma once

#include <cstddef>
#include <list>
#include <string>
#include <unordered_map>
#include <utility>

namespace c4::kube {

template <typename V>
class LruCache {
 public:
  // `capacity` >= 1.
  explicit LruCache(std::size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // The entry of `key`, now the most recently used; null when absent. Valid until the next put().
  V* get(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }

  // Inserts or replaces the entry of `key`, as the most recently used, and returns it (valid
  // until the next put()); evicts the least recently used entry when over capacity.
  V& put(const std::string& key, V value) {
    if (V* existing = get(key); existing != nullptr) {
      *existing = std::move(value);
      return *existing;
    }
    order_.emplace_front(key, std::move(value));
    index_.emplace(key, order_.begin());
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return order_.front().second;
  }

  // Removes the entry of `key`; whether there was one.
  bool erase(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    order_.erase(it->second);
    index_.erase(it);
    return true;
  }

  [[nodiscard]] std::size_t size() const { return order_.size(); }
  [[nodiscard]] std::size_t capacity() const { return capacity_; }

 private:
  using Entries = std::list<std::pair<std::string, V>>;  // front: most recently used
  std::size_t capacity_;
  Entries order_;
  std::unordered_map<std::string, typename Entries::iterator> index_;
};

}  // namespace c4::kube
