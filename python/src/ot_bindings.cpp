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

}  // namespace

void bind_ot(nb::module_& m) {
  // Sinkhorn OT (tessel.ot): the loop returns the potentials and history, the vjp their gradient.
  auto sinkhorn_options =
      [](double p, std::optional<Formula> cost, double blur, std::optional<double> reach_x,
         std::optional<double> reach_y, std::optional<double> diameter, double scaling, bool debias,
         bool alternating, double tol, int64_t max_iter, const std::string& backend) {
        SinkhornOptions o;
        o.p = p;
        if (cost) o.cost = *cost;
        o.blur = blur;
        o.reach_x = reach_x;
        o.reach_y = reach_y;
        o.diameter = diameter;
        o.scaling = scaling;
        o.debias = debias;
        o.update = alternating ? SinkhornUpdate::Alternating : SinkhornUpdate::Symmetric;
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
      .def("__str__", &SinkhornResult::str);
  m.def("epsilon_schedule", &epsilon_schedule, nb::arg("p"), nb::arg("diameter"), nb::arg("blur"),
        nb::arg("scaling"), "GeomLoss's eps schedule from diameter^p down to blur^p.");
  m.def(
      "sinkhorn",
      [sinkhorn_options](InArray a, InArray x, InArray b, InArray y, double p,
                         std::optional<Formula> cost, double blur, std::optional<double> reach_x,
                         std::optional<double> reach_y, std::optional<double> diameter,
                         double scaling, bool debias, bool alternating, double tol,
                         int64_t max_iter, const std::string& backend) {
        const SinkhornOptions o =
            sinkhorn_options(p, cost, blur, reach_x, reach_y, diameter, scaling, debias,
                             alternating, tol, max_iter, backend);
        const ArrayView av = view_of(a, "a"), xv = view_of(x, "x"), bv = view_of(b, "b"),
                        yv = view_of(y, "y");
        nb::gil_scoped_release release;
        return sinkhorn(av, xv, bv, yv, o);
      },
      nb::arg("a"), nb::arg("x"), nb::arg("b"), nb::arg("y"), nb::arg("p") = 2.0,
      nb::arg("cost") = nb::none(), nb::arg("blur") = 0.05, nb::arg("reach_x") = nb::none(),
      nb::arg("reach_y") = nb::none(), nb::arg("diameter") = nb::none(), nb::arg("scaling") = 0.5,
      nb::arg("debias") = true, nb::arg("alternating") = false, nb::arg("tol") = 0.0,
      nb::arg("max_iter") = 1000, nb::arg("backend") = "auto",
      "Log-domain Sinkhorn with eps-scaling; returns a SinkhornResult.");
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
