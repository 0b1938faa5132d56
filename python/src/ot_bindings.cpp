// Bindings of tessel.ot's core: the Sinkhorn loop, its result and the potentials' gradient.

#include <algorithm>

#include "bindings.hpp"
#include "tessel/ot.hpp"

namespace tessel::py {

namespace {

nb::object float64_numpy(const std::vector<double>& v) {
  return to_numpy(Array::from(v, {static_cast<int64_t>(v.size())}));
}

// A 1-D float array (empty when absent) as float64 values.
std::vector<double> values(const std::optional<InArray>& a, const char* what) {
  if (!a) return {};
  const ArrayView v = view_of(*a, what);
  if (v.device.kind != DeviceKind::CPU || v.shape.size() != 1 ||
      (v.dtype != DType::Float32 && v.dtype != DType::Float64))
    throw nb::value_error(
        (std::string("tessel.ot: ") + what + " must be a 1-D float CPU array").c_str());
  std::vector<double> out(static_cast<size_t>(v.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t at = static_cast<int64_t>(i) * v.stride(0);
    out[i] = v.dtype == DType::Float32 ? static_cast<const float*>(v.data)[at]
                                       : static_cast<const double*>(v.data)[at];
  }
  return out;
}

// The parts of a result the gradient reads, rebuilt from arrays (Python keeps tensors, never a
// core object, in its autograd graph).
SinkhornResult result_of(const std::vector<std::optional<InArray>>& parts, DType dtype) {
  if (parts.size() != 8)
    throw nb::value_error("tessel: the potentials must be (f, g, p, q, f_in, g_in, p_in, q_in)");
  static const char* names[8] = {"f", "g", "p", "q", "f_in", "g_in", "p_in", "q_in"};
  std::vector<std::vector<double>> v;
  for (size_t k = 0; k < 8; ++k) v.push_back(values(parts[k], names[k]));
  auto arr = [dtype](const std::vector<double>& x) {
    Array a(DType::Float64, {static_cast<int64_t>(x.size())});
    std::copy(x.begin(), x.end(), a.as<double>());
    if (dtype == DType::Float64) return a;
    Array b(DType::Float32, {static_cast<int64_t>(x.size())});
    std::copy(x.begin(), x.end(), b.as<float>());
    return b;
  };
  SinkhornResult r;
  r.f = arr(v[0]);
  r.g = arr(v[1]);
  r.p = arr(v[2]);
  r.q = arr(v[3]);
  r.f_in = v[4];
  r.g_in = v[5];
  r.p_in = v[6];
  r.q_in = v[7];
  return r;
}

// The warm start and the clusters of a multiscale solve (tessel.ot.multiscale builds them).
void bind_multiscale_parts(nb::module_& m) {
  nb::class_<SinkhornStart>(m, "SinkhornStart")
      .def(
          "__init__",
          [](SinkhornStart* st, double eps, std::vector<double> schedule, InArray f, InArray g,
             std::optional<InArray> p, std::optional<InArray> q) {
            new (st) SinkhornStart{eps,
                                   values(f, "start.f"),
                                   values(g, "start.g"),
                                   values(p, "start.p"),
                                   values(q, "start.q"),
                                   std::move(schedule)};
          },
          nb::arg("eps"), nb::arg("schedule"), nb::arg("f"), nb::arg("g"),
          nb::arg("p").none() = nb::none(), nb::arg("q").none() = nb::none(),
          "Potentials of a coarser solve at eps and the temperatures still to run.");
  nb::class_<SinkhornClusters>(m, "SinkhornClusters")
      .def(
          "__init__",
          [](SinkhornClusters* c, std::vector<int64_t> bounds_x, std::vector<int64_t> bounds_y,
             InArray cmin_xy, std::optional<InArray> cmin_xx, std::optional<InArray> cmin_yy,
             std::optional<double> tau) {
            new (c) SinkhornClusters{std::move(bounds_x),        std::move(bounds_y),
                                     values(cmin_xy, "cmin_xy"), values(cmin_xx, "cmin_xx"),
                                     values(cmin_yy, "cmin_yy"), tau};
          },
          nb::arg("bounds_x"), nb::arg("bounds_y"), nb::arg("cmin_xy"),
          nb::arg("cmin_xx").none() = nb::none(), nb::arg("cmin_yy").none() = nb::none(),
          nb::arg("tau").none() = nb::none(),
          "Clusters of the sorted clouds (offsets), least costs between them (flat, row-major) "
          "and the truncation's tau.");
}

}  // namespace

void bind_ot(nb::module_& m) {
  // Sinkhorn OT (tessel.ot): the loop returns the potentials and history, the vjp their gradient.
  auto sinkhorn_options =
      [](double p, std::optional<Formula> cost, double blur, std::optional<double> reach_x,
         std::optional<double> reach_y, std::optional<double> diameter, double scaling, bool debias,
         bool alternating, double tol, int64_t max_iter, const std::string& backend,
         bool alternate_after_schedule = false, bool last_extrapolation = true) {
        SinkhornOptions o;
        o.p = p;
        if (cost) o.cost = *cost;
        o.blur = blur;
        o.reach_x = reach_x;
        o.reach_y = reach_y;
        o.diameter = diameter;
        o.scaling = scaling;
        o.debias = debias;
        o.update = alternating                ? SinkhornUpdate::Alternating
                   : alternate_after_schedule ? SinkhornUpdate::SymmetricThenAlternating
                                              : SinkhornUpdate::Symmetric;
        o.last_extrapolation = last_extrapolation;
        o.tol = tol;
        o.max_iter = max_iter;
        o.eval.backend = backend_from_name(backend, "tessel.ot");
        return o;
      };
  nb::class_<SinkhornResult>(m, "SinkhornResult")
      .def_prop_ro("f", [](const SinkhornResult& r) { return to_numpy(r.f); })
      .def_prop_ro("g", [](const SinkhornResult& r) { return to_numpy(r.g); })
      .def_prop_ro("p", [](const SinkhornResult& r) { return to_numpy(r.p); })
      .def_prop_ro("q", [](const SinkhornResult& r) { return to_numpy(r.q); })
      .def_prop_ro("f_in", [](const SinkhornResult& r) { return float64_numpy(r.f_in); })
      .def_prop_ro("g_in", [](const SinkhornResult& r) { return float64_numpy(r.g_in); })
      .def_prop_ro("p_in", [](const SinkhornResult& r) { return float64_numpy(r.p_in); })
      .def_prop_ro("q_in", [](const SinkhornResult& r) { return float64_numpy(r.q_in); })
      .def_ro("eps", &SinkhornResult::eps)
      .def_ro("diameter", &SinkhornResult::diameter)
      .def_ro("converged", &SinkhornResult::converged)
      .def_prop_ro("history",
                   [](const SinkhornResult& r) {
                     std::vector<std::tuple<double, double, double, double>> h;
                     for (const SinkhornIteration& it : r.history)
                       h.emplace_back(it.eps, it.error, it.error_x, it.error_y);
                     return h;
                   })
      .def_prop_ro("keep",
                   [](const SinkhornResult& r) {
                     auto arr = [](const std::vector<uint8_t>& k) -> nb::object {
                       // Bytes (0 or 1 each), row-major: numpy.frombuffer reads them.
                       if (k.empty()) return nb::none();
                       return nb::bytes(reinterpret_cast<const char*>(k.data()), k.size());
                     };
                     return nb::make_tuple(arr(r.keep_xy), arr(r.keep_xx), arr(r.keep_yy));
                   })
      .def("__str__", &SinkhornResult::str);
  bind_multiscale_parts(m);
  m.def("epsilon_schedule", &epsilon_schedule, nb::arg("p"), nb::arg("diameter"), nb::arg("blur"),
        nb::arg("scaling"), "GeomLoss's eps schedule from diameter^p down to blur^p.");
  m.def(
      "sinkhorn",
      [sinkhorn_options](
          InArray a, InArray x, InArray b, InArray y, double p, std::optional<Formula> cost,
          double blur, std::optional<double> reach_x, std::optional<double> reach_y,
          std::optional<double> diameter, double scaling, bool debias, bool alternating, double tol,
          int64_t max_iter, const std::string& backend, bool alternate_after_schedule,
          bool last_extrapolation, std::optional<SinkhornStart> start,
          std::optional<SinkhornClusters> clusters) {
        const SinkhornOptions o = sinkhorn_options(
            p, cost, blur, reach_x, reach_y, diameter, scaling, debias, alternating, tol, max_iter,
            backend, alternate_after_schedule, last_extrapolation);
        const ArrayView av = view_of(a, "a"), xv = view_of(x, "x"), bv = view_of(b, "b"),
                        yv = view_of(y, "y");
        nb::gil_scoped_release release;
        return sinkhorn(av, xv, bv, yv, o, start ? *start : SinkhornStart{},
                        clusters ? *clusters : SinkhornClusters{});
      },
      nb::arg("a"), nb::arg("x"), nb::arg("b"), nb::arg("y"), nb::arg("p") = 2.0,
      nb::arg("cost") = nb::none(), nb::arg("blur") = 0.05, nb::arg("reach_x") = nb::none(),
      nb::arg("reach_y") = nb::none(), nb::arg("diameter") = nb::none(), nb::arg("scaling") = 0.5,
      nb::arg("debias") = true, nb::arg("alternating") = false, nb::arg("tol") = 0.0,
      nb::arg("max_iter") = 1000, nb::arg("backend") = "auto",
      nb::arg("alternate_after_schedule") = false, nb::arg("last_extrapolation") = true,
      nb::arg("start").none() = nb::none(), nb::arg("clusters").none() = nb::none(),
      "Log-domain Sinkhorn with eps-scaling (warm-started and block-sparse for multiscale "
      "solves); returns a SinkhornResult.");
  m.def(
      "sinkhorn_potentials_vjp",
      [sinkhorn_options](
          InArray a, InArray x, InArray b, InArray y,
          const std::vector<std::optional<InArray>>& potentials, std::optional<InArray> cf,
          std::optional<InArray> cg, std::optional<InArray> cp, std::optional<InArray> cq,
          OutArray gx, OutArray gy, double p, std::optional<Formula> cost, double blur,
          std::optional<double> reach_x, std::optional<double> reach_y,
          std::optional<double> diameter, double scaling, bool debias, const std::string& backend) {
        const SinkhornOptions o = sinkhorn_options(p, cost, blur, reach_x, reach_y, diameter,
                                                   scaling, debias, false, 0.0, 1, backend);
        auto opt_view = [](const std::optional<InArray>& c, const char* what) {
          return c ? view_of(*c, what) : ArrayView{};
        };
        const ArrayView av = view_of(a, "a"), xv = view_of(x, "x"), bv = view_of(b, "b"),
                        yv = view_of(y, "y");
        const ArrayView cfv = opt_view(cf, "cot_f"), cgv = opt_view(cg, "cot_g"),
                        cpv = opt_view(cp, "cot_p"), cqv = opt_view(cq, "cot_q");
        const ArrayView gxv = view_of(gx, "grad_x"), gyv = view_of(gy, "grad_y");
        const SinkhornResult r = result_of(potentials, xv.dtype);
        nb::gil_scoped_release release;
        sinkhorn_potentials_vjp(av, xv, bv, yv, o, r, cfv, cgv, cpv, cqv, gxv, gyv);
      },
      nb::arg("a"), nb::arg("x"), nb::arg("b"), nb::arg("y"), nb::arg("potentials"),
      nb::arg("cot_f").none(), nb::arg("cot_g").none(), nb::arg("cot_p").none(),
      nb::arg("cot_q").none(), nb::arg("grad_x"), nb::arg("grad_y"), nb::arg("p") = 2.0,
      nb::arg("cost") = nb::none(), nb::arg("blur") = 0.05, nb::arg("reach_x") = nb::none(),
      nb::arg("reach_y") = nb::none(), nb::arg("diameter") = nb::none(), nb::arg("scaling") = 0.5,
      nb::arg("debias") = true, nb::arg("backend") = "auto",
      "Envelope gradient of Sinkhorn potentials: writes grad_x and grad_y.");
}

}  // namespace tessel::py
