// Online checkpointing for loops of unknown length: the placement (a recursion of pins) and the
// reversal by offline Revolve between the stored states (see tessel/online_checkpoint.hpp).
#include "tessel/online_checkpoint.hpp"

#include <algorithm>
#include <limits>

#include "algos/online_rep3_table.hpp"
#include "tessel/error.hpp"

namespace tessel {

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// The moves of the repetition-3 range for s slots (empty where the table stops): per region
// q = s-1 .. 1 a skip and the pin (position 2), then the region's moves: from the shortest
// lengths to Revolve's placement at C(s+3, 3) steps. The first region's skip is Phase(2, s, 0)'s
// last decision.
std::vector<int> rep3_script(int s) {
  std::vector<int> out;
  if (s < 2 || s - 1 > detail::online_rep3_max_region()) return out;
  for (int q = s - 1; q >= 1; --q) {
    if (q < s - 1) out.push_back(0);
    out.push_back(2);
    int b = 1;  // the region's positions so far
    for (const char c : detail::online_rep3_region(q)) {
      if (c == '.') {
        out.push_back(0);
      } else if (c == 'x') {
        out.push_back(b + 2);  // the region above gives its lowest boundary
        ++b;
      } else {
        out.push_back(c - 'B' + 2);
      }
    }
  }
  // Fills the newest segment; then one more skip, as Phase(3, s, 0) ends, before the pin that
  // opens repetition 4.
  out.push_back(0);
  out.push_back(0);
  return out;
}

}  // namespace

OnlineCheckpointer::OnlineCheckpointer(int snapshots) : s_(snapshots) {
  if (snapshots < 1)
    detail::fail("OnlineCheckpointer", "argument snapshots must be >= 1, got ", snapshots);
  slot_step_.assign(static_cast<size_t>(snapshots), -1);
  slot_step_[0] = 0;
  stored_.push_back(Stored{0, 0, false});        // x_0: never droppable
  frames_.push_back(Frame{0, snapshots, 0, 0});  // the top: its r is the next phase to open
}

// The recursion (see the header): Phase(r, q, b) is Phase(r-1, q, b), a pin, then
// Phase(r, q-1, pin); Phase(1, q, b) stores q-1 states and skips one; Phase(r, 1, b) skips r.
// The top runs Phase(2, s, 0), then a pin and Phase(r, s-1, pin) for r = 3, 4, ...: the
// placement Phase(r, s, 0) for whatever r the loop's length turns out to need. Each call gives
// the decision for x_k.
OnlineCheckpointer::Decision OnlineCheckpointer::next_decision(int64_t k) {
  for (;;) {
    Frame& f = frames_.back();
    if (frames_.size() == 1) {  // the top
      if (f.done == 0) {
        f.done = 1;
        frames_.push_back(Frame{2, s_, 0, 0});
        continue;
      }
      if (f.r == 0) {  // Phase(2, s, 0) is over: the repetition-3 range, from the table if it can
        script_ = rep3_script(s_);
        if (!script_.empty()) f.r = 4;
      }
      if (script_pos_ < script_.size()) {
        const int p = script_[script_pos_++];
        if (p == 0) return Decision{Decision::Skip, 0};
        // All s slots hold states: the one between positions p and p-1 starts position p-1.
        return Decision{Decision::Replace, s_ - p + 1};
      }
      const int r = f.r == 0 ? 3 : f.r;
      f.r = r + 1;
      frames_.push_back(Frame{r, s_ - 1, k, 0});
      return Decision{Decision::Pin, 0};
    }
    if (f.q == 1 || f.r == 1) {  // a leaf: q-1 stores and a skip, or r skips
      const int64_t total = f.q == 1 ? f.r : f.q;
      if (f.done < total) {
        ++f.done;
        return Decision{f.q > 1 && f.done < f.q ? Decision::Store : Decision::Skip, 0};
      }
      frames_.pop_back();
      continue;
    }
    if (f.done == 0) {  // open Phase(r-1, q, b)
      f.done = 1;
      const Frame child{f.r - 1, f.q, f.base, 0};
      frames_.push_back(child);
      continue;
    }
    // Phase(r-1, q, b) is over: pin x_k, and this frame becomes Phase(r, q-1, k).
    const int64_t base = f.base;
    f = Frame{f.r, f.q - 1, k, 0};
    return Decision{Decision::Pin, base};
  }
}

int OnlineCheckpointer::store(int64_t k) {
  if (static_cast<int>(stored_.size()) < s_) {
    const int slot = static_cast<int>(std::find(slot_step_.begin(), slot_step_.end(), int64_t{-1}) -
                                      slot_step_.begin());
    stored_.push_back(Stored{k, slot, false});
    slot_step_[static_cast<size_t>(slot)] = k;
    return slot;
  }
  // The latest droppable state gives its slot.
  size_t i = stored_.size();
  while (i-- > 1 && !stored_[i].droppable) {
  }
  return replace(i, k);
}

int OnlineCheckpointer::replace(size_t i, int64_t k) {
  if (i == 0 || i >= stored_.size())
    detail::fail("OnlineCheckpointer::observe", "internal error: no slot for ", k);
  const int slot = stored_[i].slot;
  stored_.erase(stored_.begin() + static_cast<std::ptrdiff_t>(i));
  stored_.push_back(Stored{k, slot, false});
  slot_step_[static_cast<size_t>(slot)] = k;
  return slot;
}

int OnlineCheckpointer::observe(int64_t k) {
  if (k != last_k_ + 1)
    detail::fail("OnlineCheckpointer::observe", "argument k must be ", last_k_ + 1,
                 " (steps are observed in order from 1), got ", k);
  last_k_ = k;
  if (s_ == 1) return -1;  // x_0 holds the only slot
  const Decision d = next_decision(k);
  if (d.kind == Decision::Skip) return -1;
  if (d.kind == Decision::Replace) {
    if (stored_.size() != static_cast<size_t>(s_))
      detail::fail("OnlineCheckpointer::observe", "internal error: a free slot at ", k);
    return replace(static_cast<size_t>(d.base), k);
  }
  if (d.kind == Decision::Pin)
    // The stretch the pin closes (after its base) may now give its slots, latest first.
    for (Stored& st : stored_) st.droppable = st.droppable || st.step > d.base;
  return store(k);
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
