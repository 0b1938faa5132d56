// Optimal binomial checkpointing (Griewank's Revolve): the schedule that reverses a long loop of
// steps with at most `s` stored states and the fewest forward recomputations.
//
// Model. A loop computes x_{k+1} = step_k(x_k) for k = 0 .. n-1. Reversing it (backpropagating
// from x_n to x_0) needs, for each k from n-1 down to 0, the state x_k. Storing all n states costs
// too much memory, so at most `s` states are kept in "slots" (the initial state x_0 occupies one
// of them) and the others are recomputed from the nearest stored state.
//
// What is counted. An Advance from `from` to `to` evaluates step_k (without taping) for
// k = from .. to-1: `to - from` evaluations. A Reverse (or FirstReverse) of step k evaluates step_k
// once more, taped, and backpropagates through it: one evaluation, n in total. The first forward
// sweep (from x_0 up to x_{n-1}, storing snapshots on the way) is made of Advance actions and is
// counted with them. So:
//   revolve_optimal_recomputations(n, s) = sum of `to - from` over all Advance actions
//                                        = t*n - C(s+t, t-1), t the smallest with C(s+t, s) >= n;
//   revolve_forward_steps(n, s)          = that + n (every step evaluation the schedule makes).
// A driver that tapes the last step during its forward pass (FirstReverse) therefore calls the
// step function exactly revolve_forward_steps(n, s) times, the plain forward pass included.
#pragma once

#include <cstdint>
#include <vector>

namespace tessel {

enum class CheckpointAction : uint8_t {
  Advance,       // evaluate steps from .. to-1 without taping: the current state becomes x_to
  Snapshot,      // store the current state x_from (from == to) into `slot`
  Restore,       // the current state becomes the one stored in `slot` (x_from, from == to)
  FirstReverse,  // tape step `from` (to == from + 1) from the current state x_from and reverse it;
                 /// the first reverse, which a driver may do while still in its forward pass
  Reverse,       // same for every later step
  Done,          // the last action: x_0's adjoint is complete
};

/// One action; `slot` is -1 where the action uses none. Slots are in [0, snapshots).
struct CheckpointStep {
  CheckpointAction action;
  int64_t from;
  int64_t to;
  int slot;
};

/// Name of an action ("advance", "snapshot", "restore", "first_reverse", "reverse", "done").
const char* checkpoint_action_name(CheckpointAction a);

/// The optimal offline schedule for reversing n_steps steps with at most `snapshots` stored states
/// (snapshots >= 1, n_steps >= 0). Steps are reversed in the order n-1, ..., 0; the list ends with
/// Done (n_steps == 0 gives just Done). Throws tessel::Error on bad input.
std::vector<CheckpointStep> revolve_schedule(int64_t n_steps, int snapshots);

/// Total step evaluations of revolve_schedule(n, s): the Advance evaluations plus one per reversed
/// step (see the header comment). Saturates at INT64_MAX.
int64_t revolve_forward_steps(int64_t n_steps, int snapshots);

/// Closed form of the Advance evaluations of the optimal schedule: t*n - C(s+t, t-1) with t the
/// smallest integer such that C(s+t, s) >= n. Saturates at INT64_MAX.
int64_t revolve_optimal_recomputations(int64_t n, int s);

}  // namespace tessel
