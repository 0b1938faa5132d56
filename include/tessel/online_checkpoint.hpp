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
// Placement (which states to keep): a recursion of pinned states. Phase(r, q, b), from a stored
// state x_b with q slots (its own included), is Phase(r-1, q, b), then a pin (x_k stored, every
// state stored after x_b becoming droppable: they give their slots when one is needed, the latest
// first), then Phase(r, q-1, k); Phase(1, q, b) stores q-1 states and skips one; Phase(r, 1, b)
// skips r. Phase(r, q, b) spans C(q+r, r) steps and leaves its pins where offline Revolve puts
// the first split for that many steps (gap C(q+r-1, r-1)). The top runs Phase(2, s, 0), then
// for r = 3, 4, ...: a pin and Phase(r, s-1, pin), which together make Phase(r, s, 0).
//  - n <= C(s+2, 2) + 1: the cost equals revolve_optimal_recomputations(n, s) exactly. Stumm &
//    Walther (2010, "New algorithms for optimal online checkpointing", SIAM J. Sci. Comput.
//    32(2):836-854) prove such an online placement exists for repetition number 2. With every
//    segment reversed by offline Revolve, a placement is optimal there exactly when all s slots are
//    used, the j-th gap is at most s-j+1 and the last segment at most 2; Phase(2, s, 0) keeps all
//    three. No online placement does better: an exhaustive search over all of them (in the tests,
//    s = 2..6) finds none optimal for every n up to C(s+2, 2) + 2, so past that range every
//    online schedule pays extra for some n.
//  - C(s+2, 2) < n <= C(s+3, 3) (repetition number 3): the optimum is reached exactly when every
//    segment j has a length in [s-j+1, C(s-j+2, 2)]; the excess is the sum of the segments'
//    distances to those intervals. No online placement keeps the excess at 0 there (the same
//    search, s <= 6), and ours keeps it at most 1 for s <= 24 (tested n by n). It writes the range
//    as s-1 regions, q = s-1 down to 1: a region starts with a pin (kept to the end), grows at
//    the bottom, takes the slots of the region above one at a time (that region merging from its
//    bottom up, its lowest segment exactly full) and ends with q segments at their shortest, which
//    the next region builds on. How a region grows is precomputed by a search
//    (scripts/gen_online_rep3_table.py, src/algos/online_rep3_table.cpp). For larger s the
//    recursion of pins runs on, with an excess reaching C(s, 2) in that range.
//  - every n: no step is evaluated (untaped) more often than in offline Revolve, i.e. the
//    repetition number is the offline optimum t = min{t : C(s+t, s) >= n}, the property Wang,
//    Moin & Iaccarino (2009, "Minimal repetition dynamic checkpointing algorithm for unsteady
//    adjoint calculation", SIAM J. Sci. Comput. 31(4):2549-2567) prove for their dynamic
//    placement. So online <= t*n while offline = t*n - C(s+t, t-1). The tests check both
//    statements for every n <= 10000 and s <= 20.
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

  /// The slot to store x_k in (dropping what it held), or -1; k = 1, 2, ... in order, called only
  /// once the loop is known to run past step k+1. Throws tessel::Error on a k out of order.
  int observe(int64_t k);

  /// The backward schedule after the loop stopped at n steps (n >= 1, n >= the last observed
  /// k + 2): FirstReverse of step n-1 (taped during the forward pass), then Restore, Advance,
  /// Snapshot and Reverse actions as in revolve_schedule, ending with Done. Slots are those of
  /// observe; the stored states' slots are reused once their segment is reversed.
  std::vector<CheckpointStep> reversal(int64_t n) const;

  /// Untaped step evaluations of the whole run (forward included): see the header comment.
  int64_t recomputations(int64_t n) const;

  int snapshots() const { return s_; }
  /// The step stored in each slot (-1: empty), slot 0 holding x_0.
  const std::vector<int64_t>& slot_steps() const { return slot_step_; }

 private:
  struct Stored {
    int64_t step;
    int slot;
    bool droppable;  // in a stretch a later pin closed: gives its slot when one is needed
  };
  struct Frame {  // Phase(r, q, base) of the recursion; `done`: its progress
    int r;
    int q;
    int64_t base;
    int64_t done;
  };
  struct Decision {
    enum Kind { Store, Skip, Pin, Replace } kind;
    int64_t base;  // for a pin: the base of the stretch it closes; for Replace: the stored_ index
  };
  void check_n(const char* fn, int64_t n) const;
  Decision next_decision(int64_t k);
  int store(int64_t k);              // stores x_k in a free slot or the latest droppable state's
  int replace(size_t i, int64_t k);  // stores x_k in the slot of stored_[i] (i >= 1), dropping it

  int s_;
  int64_t last_k_ = 0;
  std::vector<Stored> stored_;  // by increasing step; stored_[0] is x_0
  std::vector<int64_t> slot_step_;
  std::vector<Frame> frames_;  // the recursion's stack, frames_[0] the top
  /// The repetition-3 range when the table covers s: per step, 0 to skip or the position p whose
  /// boundary with p-1 takes x_k; script_pos_ the next move.
  std::vector<int> script_;
  size_t script_pos_ = 0;
};

/// online_recomputations for a loop of n steps with s slots (n >= 0: 0 for n <= 1), simulating
/// the placement; compare with revolve_optimal_recomputations(n, s).
int64_t online_recomputations(int64_t n, int s);

/// online_recomputations(n, s) for n = 0 .. max_n in one pass (one placement run, observed step by
/// step): the table compared with offline Revolve in bench/RESULTS.md.
std::vector<int64_t> online_recomputations_table(int64_t max_n, int s);

}  // namespace tessel
