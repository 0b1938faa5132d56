// Revolve: the optimal binomial checkpointing schedule (Griewank 1992, Griewank & Walther 2000).
#include "tessel/checkpoint.hpp"

#include <algorithm>
#include <iterator>
#include <limits>

#include "tessel/error.hpp"

namespace tessel {

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

int64_t saturate(__int128 v) { return v > kMax ? kMax : static_cast<int64_t>(v); }

// C(n, k), saturated at INT64_MAX: the counts grow fast and callers only compare them with n.
int64_t binomial(int64_t n, int64_t k) {
  if (k < 0 || n < 0 || k > n) return 0;
  k = std::min(k, n - k);
  __int128 r = 1;
  for (int64_t i = 1; i <= k; ++i) {
    // r = C(n-k+i, i) after this line: the division is exact, and r only grows with i, so once
    // it passes INT64_MAX the final value does too.
    r = r * (n - k + i) / i;
    if (r > kMax) return kMax;
  }
  return static_cast<int64_t>(r);
}

// The repetition number: the smallest t >= 0 with C(s+t, s) >= n. C(s+t, s) grows with t, so a
// doubling then binary search finds it in O(log n) binomials even when t is huge (small s).
int64_t repetitions(int64_t n, int s) {
  if (n <= 1) return 0;
  if (s == 1) return n - 1;  // C(1+t, 1) = t+1
  int64_t hi = 1;
  while (binomial(s + hi, s) < n) hi *= 2;  // C(s+t, s) >= t+1, so hi stays below 2n
  int64_t lo = hi / 2 + 1;                  // C(s+hi/2, s) < n (or hi == 1 and lo == hi)
  if (hi == 1) lo = 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (binomial(s + mid, s) >= n) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return hi;
}

void check_args(const char* fn, int64_t n, int s) {
  if (n < 0) detail::fail(fn, "argument n_steps must be >= 0, got ", n);
  if (s < 1) detail::fail(fn, "argument snapshots must be >= 1, got ", s);
}

// Minimal Advance evaluations to reverse n steps with s slots (x_start in one of them); s == 0 is
// allowed for the recursion's sake: only a single step can be reversed without a slot.
int64_t cost(int64_t n, int s) {
  if (n <= 1) return 0;
  if (s <= 0) return kMax;
  return revolve_optimal_recomputations(n, s);
}

// The optimal split for n >= 2 steps with s slots: advance m steps, snapshot, reverse the right
// part (n - m steps) with s - 1 slots, then the left part (m steps) with s. The total
// g(m) = m + cost(m, s) + cost(n - m, s - 1) is convex in m (the increments of cost are the
// repetition numbers, which do not decrease), so the first m whose increment g(m+1) - g(m) is
// >= 0 is a minimiser: a binary search, O(log n) closed-form evaluations.
int64_t split(int64_t n, int s) {
  if (s == 1) return n - 1;  // no slot for the right part: it must be a single step
  auto g = [&](int64_t m) -> __int128 {
    return static_cast<__int128>(m) + cost(m, s) + cost(n - m, s - 1);
  };
  int64_t lo = 1, hi = n - 1;  // the answer is in [lo, hi]
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (g(mid + 1) - g(mid) >= 0) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

class Builder {
 public:
  explicit Builder(std::vector<CheckpointStep>& out) : out_(out) {}

  // Reverses steps start .. start+n-1; the current state is x_start, and `slot` .. s-1 are free.
  void reverse(int64_t start, int64_t n, int s, int slot) {
    if (n > 1) emit(CheckpointAction::Snapshot, start, start, slot);
    while (n > 1) {
      const int64_t m = split(n, s);
      emit(CheckpointAction::Advance, start, start + m, -1);
      // The right part keeps x_start's slot and gets the next ones; a single step needs no slot.
      reverse(start + m, n - m, s - 1, slot + 1);
      emit(CheckpointAction::Restore, start, start, slot);
      n = m;  // the left part, with the same slots: a loop rather than a recursion
    }
    emit(first_ ? CheckpointAction::FirstReverse : CheckpointAction::Reverse, start, start + 1, -1);
    first_ = false;
  }

 private:
  void emit(CheckpointAction a, int64_t from, int64_t to, int slot) {
    out_.push_back(CheckpointStep{a, from, to, slot});
  }

  std::vector<CheckpointStep>& out_;
  bool first_ = true;
};

}  // namespace

// In CheckpointAction order; Python's drivers match on these names.
constexpr const char* kActionNames[] = {"advance",       "snapshot", "restore",
                                        "first_reverse", "reverse",  "done"};
static_assert(std::size(kActionNames) == static_cast<size_t>(CheckpointAction::Done) + 1,
              "every CheckpointAction needs a name");

const char* checkpoint_action_name(CheckpointAction a) {
  const auto q = static_cast<size_t>(a);
  return q < std::size(kActionNames) ? kActionNames[q] : "unknown";
}

std::vector<CheckpointStep> revolve_schedule(int64_t n_steps, int snapshots) {
  check_args("revolve_schedule", n_steps, snapshots);
  std::vector<CheckpointStep> out;
  if (n_steps > 0) Builder(out).reverse(0, n_steps, snapshots, 0);
  out.push_back(CheckpointStep{CheckpointAction::Done, 0, 0, -1});
  return out;
}

int64_t revolve_forward_steps(int64_t n_steps, int snapshots) {
  check_args("revolve_forward_steps", n_steps, snapshots);
  return saturate(static_cast<__int128>(revolve_optimal_recomputations(n_steps, snapshots)) +
                  n_steps);
}

int64_t revolve_optimal_recomputations(int64_t n, int s) {
  check_args("revolve_optimal_recomputations", n, s);
  const int64_t t = repetitions(n, s);
  const __int128 tn = static_cast<__int128>(t) * n;
  if (tn > kMax) return kMax;
  return static_cast<int64_t>(tn - binomial(s + t, t - 1));
}

}  // namespace tessel
