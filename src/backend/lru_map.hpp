// A map with a bound: at most `capacity` entries, the least recently used one dropped first. The
// backends' in-memory kernel and plan tables use it so that no process grows them without end.
#pragma once

#include <algorithm>
#include <cstddef>
#include <list>
#include <map>
#include <utility>

namespace tessel {

// Not synchronised: its owner holds a lock around each use.
template <class K, class V>
class LruMap {
 public:
  explicit LruMap(size_t capacity) : capacity_(std::max<size_t>(1, capacity)) {}

  // The value of k, now the most recently used; nullptr when absent.
  V* find(const K& k) {
    auto it = map_.find(k);
    if (it == map_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second.age);
    return &it->second.value;
  }

  // The value of k: the one there already, else v, inserted after dropping the least recently
  // used entries beyond the capacity.
  V& insert(const K& k, V v) {
    if (V* have = find(k)) return *have;
    while (map_.size() >= capacity_) {
      map_.erase(order_.back());
      order_.pop_back();
    }
    order_.push_front(k);
    return map_.emplace(k, Entry{std::move(v), order_.begin()}).first->second.value;
  }

  size_t size() const { return map_.size(); }
  size_t capacity() const { return capacity_; }
  void clear() {
    map_.clear();
    order_.clear();
  }

 private:
  struct Entry {
    V value;
    typename std::list<K>::iterator age;  // position in order_, most recent first
  };
  size_t capacity_;
  std::map<K, Entry> map_;
  std::list<K> order_;
};

}  // namespace tessel
