// Online checkpointing: reversing a loop whose length is unknown until it stops, with at most
// `s` stored states (a while loop run until convergence).
//
// Protocol. The driver stores x_0 in slot 0, then runs the loop. When it knows that the loop
// goes on past step k+1 (the state x_{k+1} did not stop it), state x_k is not the input of the
// last step, and the driver asks `observe(k)` (k = 1, 2, ... in order): the answer is the slot to
// store x_k in (what it held is dropped) or -1. x_k is still at hand then: it is the input of
// the step just taken, which a driver keeps anyway to tape the step that turns out to be last.
// When the loop stops after n steps, `reversal(n)` gives the backward schedule.
//
// Placement (which states to keep). Two phases, each with its proof or its measured bound:
//  1. n <= C(s+2, 2): the stored states are those of the optimal offline placement for every n
//     in that range, so the total cost equals revolve_optimal_recomputations(n, s) exactly.
//     Stumm & Walther (2010, "New algorithms for optimal online checkpointing", SIAM J. Sci.
//     Comput. 32(2):836-854) prove that such an online placement exists up to C(s+2, 2) steps
//     (their algorithm for repetition number 2). Ours is derived from the cost identity below:
//     with every segment reversed by offline Revolve, a placement is optimal for repetition
//     number 2 exactly when it uses all s slots and the j-th gap is at most s-j+1 (the last
//     segment at most 2). We pin states at gaps s+1, s, ..., 3 and fill between them.
//  2. Beyond, the levels of Wang, Moin & Iaccarino (2009, "Minimal repetition dynamic
//     checkpointing algorithm for unsteady adjoint calculation", SIAM J. Sci. Comput.
//     31(4):2549-2567): a stored state is dispensable when a later one has a higher level; a new
//     state replaces the latest dispensable one (level 0), or, when none is, the latest state
//     (one level above it). Their theorem bounds the repetition number (the most times one step
//     is evaluated) by the offline optimum; with our reversal (offline Revolve per segment) the
//     tests check, for every n <= 10000 and s <= 20, that it is at most the offline optimum + 1,
//     so the cost is at most (t+1)*n with t the offline repetition number.
//
// Reversal. Between stored states c_0 = 0 < c_1 < ... < c_{m-1} the segments are reversed from
// the right, segment j with the s - j slots not needed by the segments left of it, each by
// offline Revolve (revolve_schedule). Counting as revolve_optimal_recomputations does (every
// untaped evaluation, the first sweep included):
//   online_recomputations(n, s) = (n - 1) + sum_j revolve_optimal_recomputations(L_j, s - j),
// L_j the segment lengths (summing to n - 1: step n-1 is taped during the forward pass). A driver
// that tapes the last step in its forward pass calls the step function
// n + online_recomputations(n, s) times in all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tessel/checkpoint.hpp"

namespace tessel {

class OnlineCheckpointer {
 public:
  explicit OnlineCheckpointer(int snapshots);  // snapshots >= 1; throws tessel::Error

  // The slot to store x_k in (dropping what it held), or -1; k = 1, 2, ... in order, called only
  // once the loop is known to run past step k+1. Throws tessel::Error on a k out of order.
  int observe(int64_t k);

  // The backward schedule after the loop stopped at n steps (n >= 1, n >= the last observed
  // k + 2): FirstReverse of step n-1 (taped during the forward pass), then Restore, Advance,
  // Snapshot and Reverse actions as in revolve_schedule, ending with Done. Slots are those of
  // observe; the stored states' slots are reused once their segment is reversed.
  std::vector<CheckpointStep> reversal(int64_t n) const;

  // Untaped step evaluations of the whole run (forward included): see the header comment.
  int64_t recomputations(int64_t n) const;

  int snapshots() const { return s_; }
  // The step stored in each slot (-1: empty), slot 0 holding x_0.
  const std::vector<int64_t>& slot_steps() const { return slot_step_; }

 private:
  struct Stored {
    int64_t step;
    int slot;
    int level;
  };
  void check_n(const char* fn, int64_t n) const;
  int replace(size_t idx, int64_t k, int level);  // drops stored_[idx], stores x_k at the end
  int observe_pinning(int64_t k, bool& handled);
  int observe_levels(int64_t k);

  int s_;
  int64_t last_k_ = 0;
  std::vector<Stored> stored_;  // by increasing step; stored_[0] is x_0
  std::vector<int64_t> slot_step_;
  // Phase 1: the latest pinned step, the slots it may use (its own included), and the states
  // of the previous stretch still stored, dropped from the right as the new one fills.
  bool pinning_ = true;
  int64_t base_ = 0;
  int quota_;
  std::vector<int64_t> previous_;
};

// online_recomputations for a loop of n steps with s slots (n >= 0: 0 for n <= 1), simulating
// the placement; compare with revolve_optimal_recomputations(n, s).
int64_t online_recomputations(int64_t n, int s);

// online_recomputations(n, s) for n = 0 .. max_n in one pass (one placement run, observed step by
// step): the table compared with offline Revolve in bench/RESULTS.md.
std::vector<int64_t> online_recomputations_table(int64_t max_n, int s);

}  // namespace tessel
