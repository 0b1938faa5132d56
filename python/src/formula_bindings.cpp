// Formulas: the Formula object, the op table and the builders front ends use (no text on a hot
// path), the alias parser, symbolic derivatives of formulas.
#include "bindings.hpp"

namespace tessel::py {

namespace {

// The Formula object: its hash, equality by identity (hash-consing), pickling, variables.
void bind_formula_class(nb::module_& m) {
  // Formulas are built here through the op table (make, var, constant, ...), never from text on
  // a front end's hot path; their printed text is their pickled state, which parses back to the
  // same hash.
  nb::class_<Formula>(m, "Formula", R"doc(An immutable, hash-consed formula of the C++ core.

Made by :func:`tessel.parse` from KeOps's text, and by LazyTensor arithmetic. Equal formulas
are one node: ``==`` is identity and ``hash`` a 128-bit hex digest stable across runs and
machines. ``dim`` is the output dimension; ``variables()`` lists (index, category, dim) of
each variable that occurs (category 0 = i, 1 = j, 2 = parameter). Formulas pickle as their
printed text.

Examples
--------
>>> import tessel
>>> f = tessel.parse("Exp(-SqDist(X,Y)) * B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)"])
>>> f.dim, f.variables()
(1, [(0, 0, 3), (1, 1, 3), (2, 1, 1)])
>>> f == tessel.parse("Exp(-SqDist(X,Y)) * B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)"])
True
)doc")
      .def_prop_ro("dim", &Formula::dim)
      .def_prop_ro("hash", [](const Formula& f) { return f.hash().hex(); })
      .def("__str__", &Formula::str)
      .def("__repr__", [](const Formula& f) { return "tessel.Formula(" + f.str() + ")"; })
      // Hash-consing: equal formulas are one node, so equality is identity and hashing is cheap.
      .def(
          "__eq__", [](const Formula& a, const Formula& b) { return a.same(b); }, nb::is_operator())
      .def(
          "__ne__", [](const Formula& a, const Formula& b) { return !a.same(b); },
          nb::is_operator())
      .def("__hash__", [](const Formula& f) { return static_cast<size_t>(f.hash().lo); })
      .def("__getstate__", [](const Formula& f) { return std::make_tuple(f.str()); })
      .def("__setstate__",
           [](Formula& f, const std::tuple<std::string>& state) {
             new (&f) Formula(parse(std::get<0>(state)));
           })
      .def(
          "variables",
          [](const Formula& f) {
            std::vector<std::tuple<int, int, int>> v;
            for (const AliasInfo& a : variable_info(f))
              v.emplace_back(a.index, static_cast<int>(a.cat), a.dim);
            return v;
          },
          "(index, category, dim) of each variable that occurs, by index: category 0 = i, 1 = j, "
          "2 = parameter.")
      .def("substitute", &substitute, nb::arg("variables"), nb::arg("replacements"),
           "Every variable leaf variables[k] replaced by replacements[k] (same dims).")
      .def("relabel", &relabel, nb::arg("index_map") = std::vector<int>{},
           nb::arg("swap_ij") = false,
           "Variable k renumbered to index_map[k] (empty: unchanged); swap_ij exchanges the i "
           "and j categories (the transpose).");
}

// Building formulas through the op table: the front ends' only way (no text on a hot path).
void bind_builders(nb::module_& m) {
  // Each parameter an integer or a sequence of integers, as op_table() says the op takes them.
  using Param = std::variant<int64_t, std::vector<int64_t>>;
  m.def(
      "make",
      [](const std::string& op, std::vector<Formula> args, const std::vector<Param>& params) {
        std::vector<std::vector<int64_t>> written;
        for (const Param& p : params)
          written.push_back(std::holds_alternative<int64_t>(p)
                                ? std::vector<int64_t>{std::get<int64_t>(p)}
                                : std::get<std::vector<int64_t>>(p));
        return make_op_written(op, std::move(args), written);
      },
      nb::arg("op"), nb::arg("args"), nb::arg("params") = std::vector<Param>{},
      "Op `op` (a name of op_table()) on formulas `args` and its parameters (integers, or "
      "tuples of integers where the table says so), with its dim checks and simplifications.");
  m.def(
      "var",
      [](int index, int dim, int cat) {
        if (cat < 0 || cat > 2)
          throw nb::value_error(("tessel.var: category must be 0 (i), 1 (j) or 2 (parameter), "
                                 "got " +
                                 std::to_string(cat))
                                    .c_str());
        return var(index, dim, static_cast<Category>(cat));
      },
      nb::arg("index"), nb::arg("dim"), nb::arg("cat"),
      "Variable `index` of dim `dim`, "
      "category 0 = i, 1 = j, 2 = parameter.");
  m.def("constant", &constant, nb::arg("value"), "A floating constant (finite).");
  m.def("int_cst", &int_cst, nb::arg("value"), "An integer constant, IntCst(n).");
  m.def("weighted_sqnorm", &weighted_sqnorm, nb::arg("s"), nb::arg("a"),
        "a^T S a with S of dim 1 (isotropic), dim(a) (diagonal) or dim(a)^2 (full, row-major).");
  m.def("weighted_sqdist", &weighted_sqdist, nb::arg("s"), nb::arg("a"), nb::arg("b"));
}

// KeOps text: the parser, the aliases, the op table as front ends read it.
void bind_text(nb::module_& m) {
  m.def(
      "parse_texts",
      [](const std::vector<std::string>& texts, const std::vector<std::string>& aliases) {
        const ParsedTexts p = parse_texts(texts, aliases);
        std::vector<std::tuple<std::string, int, int, int>> declared;
        for (const AliasInfo& a : p.declared)
          declared.emplace_back(a.name, a.index, a.dim, static_cast<int>(a.cat));
        std::vector<std::tuple<int, int, int>> named;
        for (const AliasInfo& a : p.named)
          named.emplace_back(a.index, a.dim, static_cast<int>(a.cat));
        return std::make_tuple(declared, p.formulas, named);
      },
      nb::arg("texts"), nb::arg("aliases"),
      "One pass of the parser over a reduction's texts: (declared aliases as parse_aliases "
      "gives them, each text's Formula, the (index, dim, category) of every variable the texts "
      "name).");
  m.def("_parser_entries", &parser_entries,
        "How many times the core's text parser was entered in this process (for tests).");
  m.def("parse", &parse, nb::arg("text"), nb::arg("aliases") = std::vector<std::string>{},
        "Parse KeOps formula syntax with aliases such as 'X = Vi(3)'.");
  m.def(
      "op_table",
      [] {
        using Params = std::tuple<bool, int, int, std::string>;
        std::vector<
            std::tuple<std::string, int, int, std::string, std::string, std::string, Params>>
            v;
        for (const OpSummary& o : op_table())
          v.emplace_back(o.name, o.arity, o.n_int_params, o.infix, o.dim_rule, o.method,
                         Params{o.tuple_params, o.min_params, o.max_params, o.param_names});
        return v;
      },
      "Every op of the core, then the composites (Kron): (name, arity, integer parameters, infix "
      "symbol or '', dim rule: 'elementwise', 'to_scalar', 'same_to_scalar' or 'custom', "
      "LazyTensor method name or '' for none, parameters as written: (tuples or integers, least "
      "and most count, space-separated names or '')).");
  m.def(
      "parse_aliases",
      [](const std::vector<std::string>& aliases) {
        std::vector<std::tuple<std::string, int, int, int>> v;
        for (const AliasInfo& a : parse_aliases(aliases))
          v.emplace_back(a.name, a.index, a.dim, static_cast<int>(a.cat));
        return v;
      },
      nb::arg("aliases"),
      "The aliases as parse() reads them: (name, index, dim, category) each, name '' when "
      "unnamed, category 0 = i, 1 = j, 2 = parameter.");
  m.def(
      "named_variables",
      [](const std::string& text, const std::vector<std::string>& aliases) {
        std::vector<std::tuple<int, int, int>> v;
        for (const AliasInfo& a : named_variables(text, aliases))
          v.emplace_back(a.index, a.dim, static_cast<int>(a.cat));
        return v;
      },
      nb::arg("text"), nb::arg("aliases") = std::vector<std::string>{},
      "(index, dim, category) of each variable the formula text names, simplified away or not.");
}

}  // namespace

void bind_formulas(nb::module_& m) {
  bind_formula_class(m);
  bind_builders(m);
  bind_text(m);
  m.def("grad_formula",
        [](const Formula& f, const Formula& v, const Formula& e) { return grad(f, v, e); });
  m.def("grad_matrix", &grad_matrix, nb::arg("f"), nb::arg("v"));
  m.def("diff", &diff, nb::arg("f"), nb::arg("v"), nb::arg("u"));
  m.def("divergence", &divergence, nb::arg("f"), nb::arg("v"));
  m.def("laplacian", &laplacian, nb::arg("f"), nb::arg("v"));
  m.def("trace_operator", &trace_operator, nb::arg("f"), nb::arg("v"));
}

}  // namespace tessel::py
