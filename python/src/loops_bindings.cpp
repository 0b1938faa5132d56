// Checkpointing schedules for the loop tools (Revolve and online checkpointing), and what the
// runtime reports about this machine.

#include "bindings.hpp"
#include "tessel/checkpoint.hpp"
#include "tessel/online_checkpoint.hpp"

namespace tessel::py {

namespace {

std::vector<std::tuple<std::string, int64_t, int64_t, int>> steps(
    const std::vector<CheckpointStep>& schedule) {
  std::vector<std::tuple<std::string, int64_t, int64_t, int>> v;
  for (const CheckpointStep& a : schedule)
    v.emplace_back(checkpoint_action_name(a.action), a.from, a.to, a.slot);
  return v;
}

}  // namespace

void bind_loops(nb::module_& m) {
  // Revolve checkpointing schedules, driven by tessel.loops.checkpoint_loop.
  m.def(
      "revolve_schedule", [](int64_t n, int s) { return steps(revolve_schedule(n, s)); },
      nb::arg("n"), nb::arg("s"),
      "The optimal schedule reversing n steps with s stored states: (action, from, to, slot).");
  m.def("revolve_optimal_recomputations", &revolve_optimal_recomputations, nb::arg("n"),
        nb::arg("s"), "t*n - C(s+t, t-1): the step evaluations of the schedule's Advance actions.");
  m.def("revolve_forward_steps", &revolve_forward_steps, nb::arg("n"), nb::arg("s"),
        "All step evaluations of the schedule: the advances plus one per reversed step.");

  // Online checkpointing (loops of unknown length), driven by tessel.loops.checkpoint_while.
  nb::class_<OnlineCheckpointer>(m, "OnlineCheckpointer")
      .def(nb::init<int>(), nb::arg("snapshots"))
      .def("observe", &OnlineCheckpointer::observe, nb::arg("k"),
           "Slot to store x_k in (the loop runs past step k+1), or -1.")
      .def(
          "reversal", [](const OnlineCheckpointer& cp, int64_t n) { return steps(cp.reversal(n)); },
          nb::arg("n"), "The backward schedule once the loop stopped at n steps.")
      .def("recomputations", &OnlineCheckpointer::recomputations, nb::arg("n"))
      .def_prop_ro("slot_steps", &OnlineCheckpointer::slot_steps);
  m.def("online_recomputations", &online_recomputations, nb::arg("n"), nb::arg("s"),
        "Untaped step evaluations of the online schedule for a loop that stops at n steps.");
  m.def("online_recomputations_table", &online_recomputations_table, nb::arg("max_n"), nb::arg("s"),
        "online_recomputations(n, s) for n = 0 .. max_n.");

  m.def("simd_level", &simd_level);
  m.def("cuda_status", &cuda_status);
  m.def("cuda_available", &cuda_available);
  m.def("num_threads", &num_threads);
  m.def("cache_dir", &cache_dir);
  m.def("compiler", [] {
    const CompilerInfo c = compiler_info();
    return std::make_tuple(c.usable, c.path, c.version, c.problem);
  });
}

}  // namespace tessel::py
