// The per-family pieces of a CPU kernel's source (accumulators, folds, finishing, state saving),
// for the loop nest that codegen/cpu_codegen.cpp writes around them.
#pragma once

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/cpu_codegen.hpp"
#include "codegen/emitter.hpp"
#include "reduction/reduction_info.hpp"

namespace tessel::cpugen {

using std::string;
using std::to_string;

// From this many components up, an output's accumulators (and a variable's coordinates) are
// arrays walked by loops instead of one unrolled statement per component: see Gen::wide_out().
constexpr int kArrayMinDim = 32;

struct Gen {
  const CpuKernelSpec& spec;
  const ReductionImpl& r;
  const ReductionInfo& info;
  ReductionFamily fam;
  KernelLayout& lay;
  int W, D, WD, R;
  std::unordered_map<int, const KernelLayout::Entry*> by_index;
  Formula f, w;  // the formula and weight as emitted (products regrouped: codegen/hoist.hpp)
  // The formula is emitted as loop nests over arrays (a large contraction). Only then do wide
  // variables and outputs become arrays: elsewhere every component is a statement of the formula
  // anyway, and the unrolled loads and accumulators ran faster (at D = 32: 10% for variables,
  // 2.7x for outputs, whose formula values would be stored to an array and read back).
  bool loops = false;

  bool wide_var(const KernelLayout::Entry& e) const { return loops && e.dim >= kArrayMinDim; }

  string name(const KernelLayout::Entry& e, int row, int c) const {
    const string base = e.cat == Category::I ? "o" + to_string(e.index) + "_" + to_string(row) + "_"
                        : e.cat == Category::J ? "j" + to_string(e.index) + "_"
                                               : "p" + to_string(e.index) + "_";
    return wide_var(e) ? base + "[" + to_string(c) + "]" : base + to_string(c);
  }
  // Declares variable e's components for `row`: one statement each, or, for a wide variable, an
  // array filled by one loop (unrolled, a TensorDot's 100-component operands were the better part
  // of its compile time). `narrow(c)` and `wide("c_")` are component c's value.
  template <class Narrow, class Wide>
  string declare(const KernelLayout::Entry& e, int row, const string& indent, Narrow narrow,
                 Wide wide) const {
    string s;
    if (!wide_var(e)) {
      for (int c = 0; c < e.dim; ++c)
        s += indent + "const V " + name(e, row, c) + " = " + narrow(c) + ";\n";
      return s;
    }
    const string n = name(e, row, 0), base = n.substr(0, n.size() - 3), d = to_string(e.dim);
    return indent + "V " + base + "[" + d + "]; for (int c_ = 0; c_ < " + d + "; ++c_) " + base +
           "[c_] = " + wide(string("c_")) + ";\n";
  }

  // Emits the formula (and weight) for outer row `row`; returns their component expressions.
  void emit_formulas(int row, std::vector<Expr>& fv, std::vector<Expr>& wv) const {
    ExprMemo memo;
    auto var_name = [&](const Node& n, int c) { return name(*by_index.at(n.var_index()), row, c); };
    fv = emit_formula(f, var_name, memo);
    if (w.valid()) wv = emit_formula(w, var_name, memo);
  }

  // Block summation: float runs of kSumBlockLaneTerms terms per lane, each folded into a double
  // accumulator, so the error bound does not depend on the vector width (README, "Accuracy").
  bool block_sum() const {
    return fam == ReductionFamily::Sum && spec.scheme == SumScheme::Block && !spec.acc_f64;
  }

  string acc(const char* what, int row, int c) const {
    return string(what) + "_" + to_string(row) + "_" + to_string(c);
  }

  // A wide Sum or Select output keeps its per-component state in arrays walked by one loop, so
  // that its code does not grow with the output's dim (a TensorDot's gradient has hundreds of
  // components, each unrolled in every tile body, row, save, merge and finish). Narrow outputs
  // keep the straight-line code the compiler schedules best.
  bool wide_out() const {
    return loops && (fam == ReductionFamily::Sum || fam == ReductionFamily::Select) &&
           D >= kArrayMinDim;
  }
  // The state `what` of output component `c` (a number, or the loop's index when wide_out()).
  string oacc(const char* what, int row, const string& c) const {
    return wide_out() ? string(what) + "_" + to_string(row) + "[" + c + "]"
                      : string(what) + "_" + to_string(row) + "_" + c;
  }
  // body(c) for every output component: unrolled, or one loop when wide_out().
  template <class Fn>
  string per_component(Fn body) const {
    string s;
    if (wide_out())
      return "    for (int c_ = 0; c_ < " + to_string(D) + "; ++c_) {\n" + body("c_") + "    }\n";
    for (int c = 0; c < D; ++c) s += body(to_string(c));
    return s;
  }

  // A variable that carries a row's reduction from one inner chunk to the next (see the chunk
  // loop in generate_cpu_kernel): declared per block, saved and restored between chunks.
  struct StateVar {
    string type, name, extent, init;  // extent: "[K]" for arrays, else empty
  };
  std::vector<StateVar> state_vars(int row) const {
    std::vector<StateVar> v;
    const string R_ = to_string(row);
    if (fam == ReductionFamily::Sum) {
      const char* acc_t = spec.acc_f64 || block_sum() ? "VD" : "V";
      if (wide_out()) {
        const string n = "[" + to_string(D) + "]";
        v.push_back({acc_t, "acc_" + R_, n, "{}"});
        if (block_sum()) v.push_back({"V", "blk_" + R_, n, "{}"});
        if (spec.scheme == SumScheme::Kahan && !spec.acc_f64)
          v.push_back({"V", "cmp_" + R_, n, "{}"});
      }
      for (int c = 0; c < D && !wide_out(); ++c) {
        v.push_back({acc_t, acc("acc", row, c), "", "{}"});
        if (block_sum()) v.push_back({"V", acc("blk", row, c), "", "{}"});
        if (spec.scheme == SumScheme::Kahan && !spec.acc_f64)
          v.push_back({"V", acc("cmp", row, c), "", "{}"});
      }
    } else if (fam == ReductionFamily::Select) {
      // Arrays start unset (declarations() fills them): an aggregate would take D initialisers.
      if (wide_out()) {
        v.push_back({"V", "best_" + R_, "[" + to_string(D) + "]", ""});
        v.push_back({"VI", "bidx_" + R_, "[" + to_string(D) + "]", ""});
      }
      for (int c = 0; c < D && !wide_out(); ++c) {
        v.push_back(
            {"V", acc("best", row, c), "", "bc(" + identity_text(info, "__builtin_inf()") + ")"});
        v.push_back({"VI", acc("bidx", row, c), "", "(VI){} - 1"});
      }
    } else if (fam == ReductionFamily::KSelect) {
      // One sorted list per formula component.
      const string K = "[" + to_string(r.k) + "]";
      for (int c = 0; c < D; ++c) {
        v.push_back({"T", acc("kv", row, c), K, ""});
        v.push_back({"i64", acc("ki", row, c), K, ""});
        v.push_back({"int", acc("kf", row, c), "", "0"});
      }
    } else if (fam == ReductionFamily::SoftMax) {
      v.push_back({"V", acc("mv", row, 0), "", "bc(-__builtin_inf())"});
      for (const string& n : softmax_sums(row)) {
        v.push_back({"V", n, "", "{}"});
        v.push_back({"VD", n + "d", "", "{}"});
      }
    }
    return v;
  }

  string declarations() const {
    string s;
    for (int row = 0; row < R; ++row) {
      if (fam == ReductionFamily::SoftMax) {
        // Values of one block of tiles wait in L1 while the block's maximum is found, so the
        // running sum is rescaled once per block instead of testing every tile.
        s += "    V fb_" + to_string(row) + "[BLK]; V bm_" + to_string(row) + ";\n";
        for (int c = 0; c < WD; ++c)
          s += "    V wb_" + to_string(row) + "_" + to_string(c) + "[BLK];\n";
      }
      for (const StateVar& v : state_vars(row))
        s += "    " + v.type + " " + v.name + v.extent + (v.init.empty() ? "" : " = " + v.init) +
             ";\n";
      if (fam == ReductionFamily::Select && wide_out())
        s += per_component([&](const string& c) {
          return "      " + oacc("best", row, c) + " = bc(" +
                 identity_text(info, "__builtin_inf()") + "); " + oacc("bidx", row, c) +
                 " = (VI){} - 1;\n";
        });
    }
    return s;
  }

  // The struct holding one block's state between inner chunks, and the statements that save the
  // state into `st` (a BlockState&) or restore it from there.
  string state_struct() const {
    string s = "struct BlockState {";
    for (int row = 0; row < R; ++row)
      for (const StateVar& v : state_vars(row)) s += " " + v.type + " " + v.name + v.extent + ";";
    return s + " };\n";
  }
  string state_copy(bool save, const string& where = "st") const {
    string s;
    for (int row = 0; row < R; ++row)
      for (const StateVar& v : state_vars(row)) {
        const string mine = v.name, kept = where + "." + v.name;
        s += v.extent.empty()
                 ? "      " + (save ? kept + " = " + mine : mine + " = " + kept) + ";\n"
                 : "      __builtin_memcpy(" + (save ? kept + ", " + mine : mine + ", " + kept) +
                       ", sizeof " + mine + ");\n";
      }
    return s;
  }

  // Folds the state `o_` of the same rows over later inner indices into this block's state (the
  // j ranges were split across threads): the sequential fold's result, up to the order of sums.
  string merge_state(int row) const {
    string s;
    const string o = "o_.";
    if (fam == ReductionFamily::Sum) {
      s += per_component([&](const string& c) {
        const string a = oacc("acc", row, c), k = oacc("cmp", row, c);
        if (spec.scheme == SumScheme::Kahan && !spec.acc_f64)
          return "      { V y_ = (" + o + a + " - " + o + k + ") - " + k + "; V t_ = " + a +
                 " + y_; " + k + " = (t_ - " + a + ") - y_; " + a + " = t_; }\n";
        if (block_sum())
          return "      " + a + " += " + o + a + " + __builtin_convertvector(" + o +
                 oacc("blk", row, c) + ", VD);\n";
        return "      " + a + " += " + o + a + ";\n";
      });
    } else if (fam == ReductionFamily::Select) {
      // The other part's indices are all later: it takes a lane only as a later term would.
      const char* cmp = info.is_max ? ">" : "<";
      s += per_component([&](const string& c) {
        const string b = oacc("best", row, c), bi = oacc("bidx", row, c);
        return "      { const V f_ = " + o + b + "; VI tk_ = (" + o + bi + " >= 0) & ((f_ " + cmp +
               " " + b + ") | ((f_ != f_) & (" + b + " == " + b + ")) | (" + bi + " < 0)); " + b +
               " = tk_ ? f_ : " + b + "; " + bi + " = tk_ ? " + o + bi + " : " + bi + "; }\n";
      });
    } else if (fam == ReductionFamily::KSelect) {
      for (int c = 0; c < D; ++c) {
        const string kv = acc("kv", row, c), ki = acc("ki", row, c), kf = acc("kf", row, c);
        s += "      for (int q = 0; q < " + o + kf + "; ++q) fold_kins(" + kv + ", " + ki + ", &" +
             kf + ", " + to_string(r.k) + ", " + o + kv + "[q], " + o + ki + "[q]);\n";
      }
    } else if (fam == ReductionFamily::SoftMax) {
      const string mv = acc("mv", row, 0);
      s += "      { const V m_ = v_max(" + mv + ", " + o + mv + ");\n";
      s += "        const VD sa_ = __builtin_convertvector(" + shifted_exp(mv, "m_") +
           ", VD), sb_ = __builtin_convertvector(" + shifted_exp(o + mv, "m_") + ", VD);\n";
      for (const string& n : softmax_sums(row))
        s += "        " + n + "d = (" + n + "d + __builtin_convertvector(" + n +
             ", VD)) * sa_ + (" + o + n + "d + __builtin_convertvector(" + o + n +
             ", VD)) * sb_; " + n + " = (V){};\n";
      s += "        " + mv + " = m_; }\n";
    }
    return s;
  }

  // Folds formula values into the accumulators; `tail` masks lanes past n_inner.
  string accumulate(int row, const std::vector<Expr>& f, const std::vector<Expr>& w,
                    bool tail) const {
    string s;
    auto masked = [&](const string& x, const char* neutral) {
      return tail ? "(valid ? " + x + " : " + neutral + ")" : x;
    };
    // Component c of the formula: its expression, or, wide, an element of the array it is in.
    string fa;
    if (wide_out() && fam != ReductionFamily::KSelect)
      fa = Emitter::current().array_of(f.data(), D);
    auto fc = [&](const string& c) { return wide_out() ? fa + "[" + c + "]" : f[std::stoi(c)].s; };
    if (fam == ReductionFamily::Sum) {
      s += per_component([&](const string& c) {
        const string v = masked(fc(c), "bc(0.0)"), a = oacc("acc", row, c);
        if (spec.acc_f64 || (block_sum() && tail))
          return "    " + a + " += __builtin_convertvector(" + v + ", VD);\n";
        if (spec.scheme == SumScheme::Kahan) {
          const string k = oacc("cmp", row, c);
          return "    { V y_ = " + v + " - " + k + "; V t_ = " + a + " + y_; " + k + " = (t_ - " +
                 a + ") - y_; " + a + " = t_; }\n";
        }
        if (block_sum()) return "    " + oacc("blk", row, c) + " += " + v + ";\n";
        return "    " + a + " += " + v + ";\n";
      });
    } else if (fam == ReductionFamily::Select) {
      // Terms come in index order, so fold_select_takes reduces to: better, first NaN, or first.
      const char* cmp = info.is_max ? ">" : "<";
      s += per_component([&](const string& c) {
        const string b = oacc("best", row, c), bi = oacc("bidx", row, c);
        string t = "    { const V f_ = " + fc(c) + "; VI tk_ = (f_ " + cmp + " " + b +
                   ") | ((f_ != f_) & (" + b + " == " + b + ")) | (" + bi + " < 0);";
        if (tail) t += " tk_ &= valid;";
        return t + " " + b + " = tk_ ? f_ : " + b + "; " + bi + " = tk_ ? tv : " + bi + "; }\n";
      });
    } else if (fam == ReductionFamily::KSelect) {
      for (int c = 0; c < D; ++c) s += kselect_fold(row, c, f[c].s, tail);
    } else if (fam == ReductionFamily::SoftMax) {
      const string R_ = to_string(row);
      if (!tail) {
        s += "    fb_" + R_ + "[q0_ + t - tb] = " + f[0].s + "; bm_" + R_ + " = v_max(bm_" + R_ +
             ", " + f[0].s + ");\n";
        for (int c = 0; c < WD; ++c)
          s += "    wb_" + R_ + "_" + to_string(c) + "[q0_ + t - tb] = " + w[c].s + ";\n";
      } else {
        s += "    bm_" + R_ + " = " + acc("mv", row, 0) + ";\n";
        s += "    { const V f_ = " + masked(f[0].s, "bc(-__builtin_inf())") + "; bm_" + R_ +
             " = v_max(bm_" + R_ + ", f_);\n";
        s += rescale(row);
        s += "      const V e_ = " + shifted_exp("f_", acc("mv", row, 0)) + ";\n";
        s += add_terms(row, "e_", [&](int c) { return masked(w[c].s, "bc(0.0)"); });
        s += "    }\n";
      }
    }
    return s;
  }

  // Folds the tile's values `fv` of component c into its K-best list: lane by lane while the
  // list is not full (or its last is NaN), else only the lanes below its last value.
  string kselect_fold(int row, int c, const string& fv, bool tail) const {
    const string kv = acc("kv", row, c), ki = acc("ki", row, c), kf = acc("kf", row, c);
    const string K = to_string(r.k), last = kv + "[" + K + " - 1]";
    const string ins =
        "fold_kins(" + kv + ", " + ki + ", &" + kf + ", " + K + ", f_[l], t * W + l);";
    string s = "    { const V f_ = " + fv + ";\n";
    s += "      if (" + kf + " < " + K + " || " + last + " != " + last + ") {\n";
    s += "        for (int l = 0; l < W; ++l) " + string(tail ? "if (valid[l]) " : "") + ins + "\n";
    s += "      } else { VI c_ = f_ < bc(" + last + ");" + (tail ? " c_ &= valid;" : "") + "\n";
    s += "        if (v_any(c_)) for (int l = 0; l < W; ++l) if (c_[l]) " + ins +
         "\n      }\n    }\n";
    return s;
  }

  // exp(v - m) for a term v under the running maximum m: 0 for v = -inf (also when m = -inf), and
  // exactly 1 for v = m, so that +inf terms under m = +inf count 1 instead of exp(inf - inf).
  static string shifted_exp(const string& v, const string& m) {
    return v + " == bc(-__builtin_inf()) ? bc(0.0) : " + v + " == " + m + " ? bc(1.0) : v_exp(" +
           v + " - " + m + ")";
  }
  // Moves the running max of `row` to bm_row, rescaling its sums.
  string rescale(int row) const {
    const string R_ = to_string(row), mv = acc("mv", row, 0);
    string s = "      { const V sc_ = " + shifted_exp(mv, "bm_" + R_) + ";";
    for (const string& n : softmax_sums(row))
      s += " " + n + " *= sc_; " + n + "d *= __builtin_convertvector(sc_, VD);";
    return s + " " + mv + " = bm_" + R_ + "; }\n";
  }
  template <class WFn>
  string add_terms(int row, const string& e, WFn weight) const {
    string s;
    if (r.op == ReductionOp::SumSoftMaxWeight)
      s += "      " + acc("ss", row, 0) + " += " + e + ";\n";
    for (int c = 0; c < std::max(WD, 1); ++c)
      s += "      " + acc("sv", row, c) + " += " + (WD ? e + " * " + weight(c) : e) + ";\n";
    return s;
  }
  // After a block of nq_ buffered tiles: one rescale, then the exponentials of the stored values.
  string block_end() const {
    string s;
    for (int row = 0; row < R; ++row) {
      const string R_ = to_string(row);
      s += rescale(row);
      // Under a finite maximum, exp(f - m) is already 0 for f = -inf and 1 for f = m: the
      // selections of shifted_exp are only needed when some lane's maximum is infinite or NaN.
      const string mv = acc("mv", row, 0);
      auto weight = [&](int c) { return "wb_" + R_ + "_" + to_string(c) + "[q]"; };
      s += "      if (!v_any((" + mv + " - " + mv + ") != (" + mv + " - " + mv + "))) {\n";
      s += "      for (i64 q = 0; q < nq_; ++q) { const V f_ = fb_" + R_ + "[q];\n";
      s += "      const V e_ = v_exp(f_ - " + mv + ");\n";
      s += add_terms(row, "e_", weight);
      s += "      }\n      } else {\n";
      // (Written apart from the loop above so that `tessel bench --asm` counts only that one.)
      s += "      for (i64 q = 0, qe = nq_; q < qe; ++q) { const V f_ = fb_" + R_ + "[q];\n";
      s += "      const V e_ = " + shifted_exp("f_", mv) + ";\n";
      s += add_terms(row, "e_", weight);
      s += "      }\n      }\n";
      // As block sums: a block's float partials go into float64 (README "Accuracy of sums").
      for (const string& n : softmax_sums(row))
        s += "      " + n + "d += __builtin_convertvector(" + n + ", VD); " + n + " = (V){};\n";
    }
    return s;
  }
  // The running sums of a softmax row: sv_row_c (one per weight component), ss_row_0 (the
  // SoftMax denominator). Each has a float partial `n` and its float64 total `n`d.
  std::vector<string> softmax_sums(int row) const {
    std::vector<string> v;
    for (int c = 0; c < std::max(WD, 1); ++c) v.push_back(acc("sv", row, c));
    if (r.op == ReductionOp::SumSoftMaxWeight) v.push_back(acc("ss", row, 0));
    return v;
  }
  // Lane l of a softmax sum, as a double.
  static string lane_total(const string& n) { return "(" + n + "d[l] + " + n + "[l])"; }

  string finish(int row) const {
    const string R_ = to_string(row), out_row = "(i0 + " + R_ + ")";
    string s = "    if (i0 + " + R_ + " < a->o_end) {\n";
    if (fam == ReductionFamily::Sum) {
      s += per_component([&](const string& c) {
        return "      out0[" + out_row + " * " + to_string(D) + " + " + c + "] = (T)" +
               (spec.acc_f64 || block_sum() ? "hsum_d(" : "hsum(") + oacc("acc", row, c) + ");\n";
      });
    } else if (fam == ReductionFamily::Select) {
      // The lanes' bests hold interleaved indices: merge them with the shared rule.
      const string mx = info.is_max ? "1" : "0";
      s += per_component([&](const string& c) {
        const string b = oacc("best", row, c), bi = oacc("bidx", row, c),
                     at = out_row + " * " + to_string(D) + " + " + c;
        string t = "      { T bv = 0; i64 bj = -1;\n        for (int l = 0; l < W; ++l) { if (" +
                   bi + "[l] < 0) continue; const T v = " + b + "[l]; const i64 j = (i64)" + bi +
                   "[l] * W + l;\n";
        t += "          if (fold_select_takes(v, j, bv, bj, " + mx + ")) { bv = v; bj = j; } }\n";
        t += "        if (bj < 0) bv = " + identity_text(info, "__builtin_inf()") + ";\n";
        for (int o = 0; o < info.num_outputs(); ++o)
          t += string("        ") +
               (info.output_is_index(o) ? "outi[" + at + "] = bj;\n" : "out0[" + at + "] = bv;\n");
        return t + "      }\n";
      });
    } else if (fam == ReductionFamily::KSelect) {
      // KeOps's layout: column q * D + c is the q-th best of component c.
      const string K = to_string(r.k), DS = to_string(D);
      s += "      for (int q = 0; q < " + K + "; ++q) {\n";
      for (int c = 0; c < D; ++c) {
        const string at = out_row + " * " + to_string(r.k * D) + " + q * " + DS + " + " +
                          to_string(c),
                     kf = acc("kf", row, c);
        for (int o = 0; o < info.num_outputs(); ++o)
          s += info.output_is_index(o)
                   ? "        outi[" + at + "] = q < " + kf + " ? " + acc("ki", row, c) +
                         "[q] : -1;\n"
                   : "        out0[" + at + "] = q < " + kf + " ? " + acc("kv", row, c) +
                         "[q] : (T)" + identity_text(info, "__builtin_inf()") + ";\n";
      }
      s += "      }\n";
    } else if (fam == ReductionFamily::SoftMax) {
      // Each lane's sums live under its own maximum: rescale them to the row's maximum M.
      const string mv = acc("mv", row, 0);
      const int nc = std::max(WD, 1);
      s += "      double M = -__builtin_inf(); for (int l = 0; l < W; ++l) if (" + mv +
           "[l] > M) M = " + mv + "[l];\n";
      s += "      double den = 0;\n";
      if (r.op == ReductionOp::SumSoftMaxWeight)
        s += "      for (int l = 0; l < W; ++l) den += " + lane_total(acc("ss", row, 0)) +
             " * fold_shift_scale(" + mv + "[l], M);\n";
      for (int c = 0; c < nc; ++c) {
        s += "      { double sum = 0; for (int l = 0; l < W; ++l) sum += " +
             lane_total(acc("sv", row, c)) + " * fold_shift_scale(" + mv + "[l], M);\n";
        const string at = "out0[" + out_row + " * " + to_string(nc) + " + " + to_string(c) + "]";
        if (r.op == ReductionOp::LogSumExp)
          s += "        " + at +
               " = (T)(sum != sum ? sum : M == -__builtin_inf() ? -__builtin_inf() : M + "
               "__builtin_log(sum)); }\n";
        else
          s += "        " + at +
               " = (T)(sum != sum || M == __builtin_inf() || den == 0 ? __builtin_nan(\"\") "
               ": sum / den); }\n";
      }
    }
    return s + "    }\n";
  }

  // The tile body for all R rows: loads the tile's inner vectors, evaluates, accumulates.
  string tile_body(bool tail) const {
    Emitter em;
    for (const auto& e : lay.vars)
      if (e.cat == Category::J)
        em.raw(declare(
            e, 0, "    ",
            [&](int c) { return "vload(yt + " + to_string((e.offset + c) * W) + ")"; },
            [&](const string& c) {
              return "vload(yt + " + to_string(e.offset * W) + " + " + c + " * W)";
            }));
    string acc_code;
    for (int row = 0; row < R; ++row) {
      std::vector<Expr> f, w;
      emit_formulas(row, f, w);
      acc_code += accumulate(row, f, w, tail);
    }
    return em.code() + acc_code;
  }
};

}  // namespace tessel::cpugen
