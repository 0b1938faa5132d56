// Hash-consing: structurally equal nodes are one object, and each carries a stable 128-bit hash.
#include <bit>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "ir/node.hpp"

namespace tessel {

namespace {

// splitmix64 finaliser: cheap, well-mixed and identical on every platform.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

struct Hasher {
  uint64_t a = 0x243f6a8885a308d3ULL, b = 0x13198a2e03707344ULL;
  void add(uint64_t v) {
    a = mix(a ^ v);
    b = mix(b + (v * 0xff51afd7ed558ccdULL) + 0x2545f4914f6cdd1dULL);
  }
};

struct KeyHash {
  size_t operator()(const Hash128& h) const { return static_cast<size_t>(h.lo ^ (h.hi << 1)); }
};

// Bounded by the live nodes: it holds weak references only (a node dies with its last Formula),
// and the sweep in intern() drops the expired ones whenever the map doubles past them.
struct Table {
  std::mutex mu;
  std::unordered_multimap<Hash128, std::weak_ptr<const Node>, KeyHash> map;
  size_t sweep_at = 4096;
};

Table& table() {
  static Table* t = new Table;  // never destroyed: nodes may outlive static destruction order
  return *t;
}

bool same_structure(const Node& n, OpCode op, int dim, const std::vector<NodePtr>& args,
                    const std::vector<int64_t>& ip, double value) {
  if (n.op != op || n.dim != dim || n.ip != ip || n.args.size() != args.size()) return false;
  if (std::bit_cast<uint64_t>(n.value) != std::bit_cast<uint64_t>(value)) return false;
  for (size_t k = 0; k < args.size(); ++k)
    if (n.args[k] != args[k]) return false;
  return true;
}

}  // namespace

std::string Hash128::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

Hash128 hash_words(const std::vector<int64_t>& words) {
  Hasher h;
  h.add(words.size());
  for (int64_t w : words) h.add(static_cast<uint64_t>(w));
  return Hash128{h.a, h.b};
}

Hash128 hash_bytes(std::string_view bytes) {
  Hasher h;
  h.add(bytes.size());
  for (size_t k = 0; k < bytes.size(); k += 8) {
    uint64_t w = 0;
    std::memcpy(&w, bytes.data() + k, std::min<size_t>(8, bytes.size() - k));
    h.add(w);
  }
  return Hash128{h.a, h.b};
}

Formula intern(OpCode op, int dim, std::vector<NodePtr> args, std::vector<int64_t> ip,
               double value) {
  Hasher h;
  h.add(static_cast<uint64_t>(op));
  h.add(static_cast<uint64_t>(dim));
  h.add(ip.size());
  for (int64_t v : ip) h.add(static_cast<uint64_t>(v));
  h.add(std::bit_cast<uint64_t>(value));
  h.add(args.size());
  for (const auto& a : args) {
    h.add(a->hash.lo);
    h.add(a->hash.hi);
  }
  Hash128 key{h.a, h.b};

  Table& t = table();
  std::lock_guard lock(t.mu);
  // Dead entries under this key are dropped as they are met: a formula rebuilt again and again
  // (front ends build one per call) would otherwise pile its dead copies under one key until
  // the next sweep, and each lookup would walk them all.
  auto range = t.map.equal_range(key);
  for (auto it = range.first; it != range.second;) {
    auto sp = it->second.lock();
    if (!sp) {
      it = t.map.erase(it);
      continue;
    }
    if (same_structure(*sp, op, dim, args, ip, value)) return Formula(sp);
    ++it;
  }
  if (t.map.size() >= t.sweep_at) {
    for (auto it = t.map.begin(); it != t.map.end();)
      it = it->second.expired() ? t.map.erase(it) : std::next(it);
    t.sweep_at = std::max<size_t>(4096, 2 * t.map.size());
  }
  bool varies =
      op == OpCode::Var && ip.size() > 1 && ip[1] != static_cast<int64_t>(Category::Param);
  for (const auto& a : args) varies |= a->varies;
  auto node =
      std::make_shared<Node>(Node{op, dim, std::move(args), std::move(ip), value, key, varies});
  t.map.emplace(key, node);
  return Formula(std::move(node));
}

Node::~Node() {
  // The outermost destructor on a thread owns the queue of released arguments and empties it in
  // a loop; destructors run from that loop only append to it. A plain pointer, not a thread_local
  // vector: formulas held in statics are freed after the main thread's thread_locals.
  thread_local std::vector<NodePtr>* pending = nullptr;
  if (pending) {
    for (NodePtr& a : args) pending->push_back(std::move(a));
    return;
  }
  std::vector<NodePtr> queue(std::make_move_iterator(args.begin()),
                             std::make_move_iterator(args.end()));
  pending = &queue;
  while (!queue.empty()) {
    NodePtr last = std::move(queue.back());
    queue.pop_back();
    last.reset();  // may run ~Node again, which only appends to the queue
  }
  pending = nullptr;
}

std::vector<NodePtr> topo_order(const NodePtr& root) {
  std::vector<NodePtr> order;
  std::unordered_set<const Node*> seen;
  // Iterative DFS: deep formulas (long sums from a parser) must not overflow the stack.
  std::vector<std::pair<const NodePtr*, size_t>> stack{{&root, 0}};
  seen.insert(root.get());
  while (!stack.empty()) {
    const NodePtr* n = stack.back().first;
    size_t& k = stack.back().second;
    if (k < (*n)->args.size()) {
      const NodePtr* c = &(*n)->args[k++];
      if (seen.insert(c->get()).second) stack.push_back({c, 0});
    } else {
      order.push_back(*n);
      stack.pop_back();
    }
  }
  return order;
}

}  // namespace tessel
