// Revolve checkpointing: the schedule is valid, its cost equals the closed-form optimum, bad input
// throws.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <set>
#include <string>

#include "tessel/checkpoint.hpp"
#include "tessel/error.hpp"

using namespace tessel;

namespace {

struct Simulation {
  int64_t advances = 0;     // step evaluations in Advance actions
  int64_t evaluations = 0;  // all step evaluations (advances and reverses)
  size_t max_stored = 0;
};

// Runs a schedule on a symbolic state (the index of the step it is at) and fails the test on any
// invalid action: a Reverse of step k needs the current state to be x_k, reverses come in the
// order n-1 .. 0, a Restore needs its slot filled, slots stay in [0, s).
Simulation simulate(const std::vector<CheckpointStep>& schedule, int64_t n, int s) {
  Simulation sim;
  std::map<int, int64_t> slots;  // slot -> the step whose state it holds
  int64_t current = 0;           // the initial state x_0 is given
  bool valid = true;             // false after a Reverse, until a Restore or nothing is left
  int64_t next_reverse = n - 1;
  bool done = false;
  for (size_t i = 0; i < schedule.size(); ++i) {
    const CheckpointStep& a = schedule[i];
    SCOPED_TRACE("action " + std::to_string(i) + " " + checkpoint_action_name(a.action));
    EXPECT_FALSE(done) << "actions after Done";
    switch (a.action) {
      case CheckpointAction::Advance:
        EXPECT_TRUE(valid);
        EXPECT_EQ(a.from, current);
        EXPECT_GT(a.to, a.from);
        EXPECT_LE(a.to, n - 1) << "advancing to x_n is never needed";
        sim.advances += a.to - a.from;
        current = a.to;
        break;
      case CheckpointAction::Snapshot:
        EXPECT_TRUE(valid);
        EXPECT_EQ(a.from, current);
        EXPECT_GE(a.slot, 0);
        EXPECT_LT(a.slot, s);
        slots[a.slot] = current;
        break;
      case CheckpointAction::Restore:
        if (!slots.count(a.slot)) {
          ADD_FAILURE() << "restoring an empty slot " << a.slot;
          return sim;
        }
        EXPECT_EQ(slots[a.slot], a.from);
        current = a.from;
        valid = true;
        break;
      case CheckpointAction::FirstReverse:
      case CheckpointAction::Reverse:
        EXPECT_EQ(a.action == CheckpointAction::FirstReverse, next_reverse == n - 1);
        EXPECT_TRUE(valid) << "the state was consumed by an earlier reverse";
        EXPECT_EQ(a.from, next_reverse);
        EXPECT_EQ(current, a.from) << "reversing step " << a.from << " at state " << current;
        EXPECT_EQ(a.to, a.from + 1);
        --next_reverse;
        valid = false;
        break;
      case CheckpointAction::Done:
        done = true;
        break;
    }
    sim.max_stored = std::max(sim.max_stored, slots.size());
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(next_reverse, -1) << "not every step was reversed";
  sim.evaluations = sim.advances + n;
  return sim;
}

TEST(Checkpoint, ScheduleIsValidAndOptimal) {
  for (int s = 1; s <= 12; ++s) {
    for (int64_t n = 1; n <= 300; ++n) {
      SCOPED_TRACE("n=" + std::to_string(n) + " s=" + std::to_string(s));
      const std::vector<CheckpointStep> schedule = revolve_schedule(n, s);
      const Simulation sim = simulate(schedule, n, s);
      ASSERT_FALSE(::testing::Test::HasFailure());
      EXPECT_LE(sim.max_stored, static_cast<size_t>(s));
      EXPECT_EQ(sim.advances, revolve_optimal_recomputations(n, s));
      EXPECT_EQ(sim.evaluations, revolve_forward_steps(n, s));
    }
  }
}

TEST(Checkpoint, KnownValues) {
  // s = 1: x_0 is the only stored state, so step k costs k advances: n(n-1)/2.
  EXPECT_EQ(revolve_optimal_recomputations(10, 1), 45);
  // s >= n: every state is stored during the single forward sweep of n-1 steps.
  EXPECT_EQ(revolve_optimal_recomputations(10, 10), 9);
  EXPECT_EQ(revolve_optimal_recomputations(10, 100), 9);
  // n = C(s+t, s) exactly: t = 2, s = 3 gives n = 10 and 2*10 - C(5, 1) = 15.
  EXPECT_EQ(revolve_optimal_recomputations(10, 3), 15);
  EXPECT_EQ(revolve_optimal_recomputations(0, 3), 0);
  EXPECT_EQ(revolve_optimal_recomputations(1, 3), 0);
  EXPECT_EQ(revolve_forward_steps(10, 3), 25);
}

TEST(Checkpoint, EdgeSchedules) {
  std::vector<CheckpointStep> zero = revolve_schedule(0, 1);
  ASSERT_EQ(zero.size(), 1u);
  EXPECT_EQ(zero[0].action, CheckpointAction::Done);
  std::vector<CheckpointStep> one = revolve_schedule(1, 1);
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(one[0].action, CheckpointAction::FirstReverse);
  EXPECT_EQ(one[0].from, 0);
  // A long loop with few slots stays valid and optimal.
  const std::vector<CheckpointStep> long_loop = revolve_schedule(5000, 3);
  const Simulation sim = simulate(long_loop, 5000, 3);
  EXPECT_EQ(sim.advances, revolve_optimal_recomputations(5000, 3));
}

TEST(Checkpoint, SaturatesInsteadOfOverflowing) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(revolve_optimal_recomputations(big, 1), big);
  EXPECT_EQ(revolve_forward_steps(big, 2), big);
  const int64_t r = revolve_optimal_recomputations(int64_t{1} << 40, 60);
  EXPECT_GT(r, 0);
  EXPECT_LT(r, big);
  // Huge s: C(s+t, s) saturates, t = 1 for any n <= s + 1.
  EXPECT_EQ(revolve_optimal_recomputations(1000, 1 << 30), 999);
}

TEST(Checkpoint, BadInputThrows) {
  auto expect_error = [](auto f, const std::string& fn, const std::string& arg) {
    try {
      f();
      ADD_FAILURE() << "no error for " << fn;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(fn), std::string::npos) << what;
      EXPECT_NE(what.find(arg), std::string::npos) << what;
    }
  };
  expect_error([] { revolve_schedule(10, 0); }, "revolve_schedule", "snapshots");
  expect_error([] { revolve_schedule(-1, 2); }, "revolve_schedule", "n_steps");
  expect_error([] { revolve_forward_steps(10, -3); }, "revolve_forward_steps", "snapshots");
  expect_error([] { revolve_optimal_recomputations(-5, 2); }, "revolve_optimal_recomputations",
               "n_steps");
}

}  // namespace
