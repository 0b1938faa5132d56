// Online checkpointing for loops of unknown length: the placement (pinning, then levels) and the
// reversal by offline Revolve between the stored states (see tessel/online_checkpoint.hpp).
#include "tessel/online_checkpoint.hpp"

#include <algorithm>
#include <limits>

#include "tessel/error.hpp"

namespace tessel {

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

}  // namespace

OnlineCheckpointer::OnlineCheckpointer(int snapshots) : s_(snapshots), quota_(snapshots) {
  if (snapshots < 1)
    detail::fail("OnlineCheckpointer", "argument snapshots must be >= 1, got ", snapshots);
  slot_step_.assign(static_cast<size_t>(snapshots), -1);
  slot_step_[0] = 0;
  stored_.push_back(Stored{0, 0, std::numeric_limits<int>::max()});  // x_0 is never dropped
}

int OnlineCheckpointer::replace(size_t idx, int64_t k, int level) {
  const int slot = stored_[idx].slot;
  stored_.erase(stored_.begin() + static_cast<std::ptrdiff_t>(idx));
  stored_.push_back(Stored{k, slot, level});
  slot_step_[static_cast<size_t>(slot)] = k;
  return slot;
}

// Phase 1. A stretch starts at the pinned state `base_` with `quota_` slots (its own included):
// its states base_+1 .. base_+quota_-1 are stored one a step (taking the free slots, then those
// of the previous stretch's states from the right), base_+quota_ is skipped, and base_+quota_+1
// is pinned as the next stretch's start with one slot fewer. The gaps between pinned states are
// thus s+1, s, ..., 3: the optimal offline placement for C(s+2, 2) steps, and every intermediate
// placement keeps all s slots in use with the j-th gap at most s-j+1 and the last segment at
// most 2, which is what optimality for repetition number <= 2 requires.
int OnlineCheckpointer::observe_pinning(int64_t k, bool& handled) {
  handled = true;
  if (k < base_ + quota_) {
    if (static_cast<int>(stored_.size()) < s_) {
      const int slot = static_cast<int>(
          std::find(slot_step_.begin(), slot_step_.end(), int64_t{-1}) - slot_step_.begin());
      stored_.push_back(Stored{k, slot, 0});
      slot_step_[static_cast<size_t>(slot)] = k;
      return slot;
    }
    const int64_t drop = previous_.back();
    previous_.pop_back();
    for (size_t i = 1; i < stored_.size(); ++i)
      if (stored_[i].step == drop) return replace(i, k, 0);
    detail::fail("OnlineCheckpointer::observe", "internal error: state ", drop, " not stored");
  }
  if (k == base_ + quota_) return -1;
  if (quota_ > 1) {
    // Pin x_k: the stretch's own states become the previous ones; its latest makes room.
    previous_.clear();
    for (const Stored& st : stored_)
      if (st.step > base_) previous_.push_back(st.step);
    previous_.pop_back();  // the stretch's latest (base_ + quota_ - 1) gives its slot to x_k
    base_ = k;
    --quota_;
    return replace(stored_.size() - 1, k, 0);
  }
  // C(s+2, 2) - 1 steps reached: the levels take over, every stored state at the same level.
  pinning_ = false;
  for (size_t i = 1; i < stored_.size(); ++i) stored_[i].level = 1;
  handled = false;
  return -1;
}

// Phase 2 (Wang, Moin & Iaccarino's levels), storing only every other state: a state one step
// after the latest stored one is skipped, as the last segment may have two steps.
int OnlineCheckpointer::observe_levels(int64_t k) {
  if (stored_.back().step == k - 1) return -1;
  int running = -1;
  for (size_t i = stored_.size(); i-- > 1;) {
    if (stored_[i].level < running) return replace(i, k, 0);  // the latest dispensable one
    running = std::max(running, stored_[i].level);
  }
  return replace(stored_.size() - 1, k, stored_.back().level + 1);
}

int OnlineCheckpointer::observe(int64_t k) {
  if (k != last_k_ + 1)
    detail::fail("OnlineCheckpointer::observe", "argument k must be ", last_k_ + 1,
                 " (steps are observed in order from 1), got ", k);
  last_k_ = k;
  if (s_ == 1) return -1;  // x_0 holds the only slot
  if (pinning_) {
    bool handled = false;
    const int slot = observe_pinning(k, handled);
    if (handled) return slot;
  }
  return observe_levels(k);
}

void OnlineCheckpointer::check_n(const char* fn, int64_t n) const {
  const int64_t least = last_k_ == 0 ? 1 : last_k_ + 2;
  if (n < least)
    detail::fail(fn, "argument n must be >= ", least,
                 " (the steps observed so far run past it), got ", n);
}

std::vector<CheckpointStep> OnlineCheckpointer::reversal(int64_t n) const {
  check_n("OnlineCheckpointer::reversal", n);
  std::vector<CheckpointStep> out;
  out.push_back(CheckpointStep{CheckpointAction::FirstReverse, n - 1, n, -1});
  const int m = static_cast<int>(stored_.size());
  std::vector<int> phys(static_cast<size_t>(s_));
  for (int j = m - 1; j >= 0; --j) {
    const int64_t start = stored_[static_cast<size_t>(j)].step;
    const int64_t end = j + 1 < m ? stored_[static_cast<size_t>(j) + 1].step : n - 1;
    // The segment's slots: its start's, then every slot not held by a state left of it.
    phys.clear();
    phys.push_back(stored_[static_cast<size_t>(j)].slot);
    for (int slot = 0; slot < s_; ++slot) {
      bool held = false;
      for (int i = 0; i <= j; ++i) held = held || stored_[static_cast<size_t>(i)].slot == slot;
      if (!held) phys.push_back(slot);
    }
    out.push_back(CheckpointStep{CheckpointAction::Restore, start, start,
                                 stored_[static_cast<size_t>(j)].slot});
    for (const CheckpointStep& a : revolve_schedule(end - start, s_ - j)) {
      CheckpointStep b = a;
      b.from += start;
      b.to += start;
      if (b.slot >= 0) b.slot = phys[static_cast<size_t>(b.slot)];
      switch (a.action) {
        case CheckpointAction::Snapshot:
          if (a.from == 0) continue;  // the segment's start is stored already
          break;
        case CheckpointAction::FirstReverse:
          b.action = CheckpointAction::Reverse;
          break;
        case CheckpointAction::Done:
          continue;
        default:
          break;
      }
      out.push_back(b);
    }
  }
  out.push_back(CheckpointStep{CheckpointAction::Done, 0, 0, -1});
  return out;
}

int64_t OnlineCheckpointer::recomputations(int64_t n) const {
  check_n("OnlineCheckpointer::recomputations", n);
  __int128 total = n - 1;
  const int m = static_cast<int>(stored_.size());
  for (int j = 0; j < m; ++j) {
    const int64_t start = stored_[static_cast<size_t>(j)].step;
    const int64_t end = j + 1 < m ? stored_[static_cast<size_t>(j) + 1].step : n - 1;
    total += revolve_optimal_recomputations(end - start, s_ - j);
    if (total > kMax) return kMax;
  }
  return static_cast<int64_t>(total);
}

int64_t online_recomputations(int64_t n, int s) {
  if (n < 0) detail::fail("online_recomputations", "argument n must be >= 0, got ", n);
  OnlineCheckpointer cp(s);
  if (n <= 1) return 0;
  for (int64_t k = 1; k + 2 <= n; ++k) cp.observe(k);
  return cp.recomputations(n);
}

std::vector<int64_t> online_recomputations_table(int64_t max_n, int s) {
  if (max_n < 0)
    detail::fail("online_recomputations_table", "argument max_n must be >= 0, got ", max_n);
  OnlineCheckpointer cp(s);
  std::vector<int64_t> out(static_cast<size_t>(max_n) + 1, 0);
  for (int64_t n = 2; n <= max_n; ++n) {
    if (n >= 3) cp.observe(n - 2);
    out[static_cast<size_t>(n)] = cp.recomputations(n);
  }
  return out;
}

}  // namespace tessel
