// Per-reduction state code of the CUDA kernels: declare, fold a term, merge, write outputs.
//
// Semantics are the CPU's (backend/cpu/reduce_state.hpp), reached by cheap per-term code:
// - Sum: terms add into a T partial per tile, moved into a double total after every tile (block
//   summation: a term sees at most tile - 1 roundings in T, README "Accuracy of sums"). Kahan
//   compensates the tile partial; float64 accumulation makes the partial a double.
// - Min/Max: the first NaN wins, ties keep the lowest index. `!(v >= best) && best == best`
//   takes a smaller value or the first NaN in one test; the first term is not forced in, so a
//   range whose terms all equal the initial +-inf ends with index -1, which close() turns into
//   the range's first index (the CPU's answer for that case).
// - KMin: per formula component, a list sorted by (value, NaN last, index) held in registers
//   (constant indices after unrolling) up to K = 16, in local memory above; a term costs one
//   comparison with the K-th. Column q * D + c of the outputs is component c's q-th best.
// - LogSumExp/SumSoftMaxWeight: one pass with a running maximum m. Terms are exp(v - m) =
//   ex2(v log2e - m log2e), one fma and one ex2 per term; the rare new maximum, NaN or tie with m
//   (where a +inf term counts 1) takes one branch for all rows, which rescales the sums.
//   In float32 with an unweighted sum (LogSumExp, SumSoftMaxWeight), a tile first runs
//   optimistically: each term is ex2(v log2 e - ml) with no test against m (one fma, the ex2 and
//   the adds). The terms are >= 0, so the tile's unweighted sum bounds each of them: below 2^16,
//   no exponent passed m's by more than 16 (log2 units), and the sums are right with m as it is
//   (m is a shift: m + log(s) and the softmax ratios do not depend on it; each term's error is
//   one rounding of its exponent, ln 2 * 16 * 2^-24 = 7e-7 at most). Otherwise (a new maximum
//   far above m, NaN, +inf, or m still -inf) the tile's sums are reset and the tile runs again
//   with the test above, which moves m.
//   A NaN term makes the sums NaN (so the outputs), as the CPU's NaN flag does.
// Merges treat the second state as terms that come after the first one's, which is what keeps
// ties and first-NaN indices the same across chunk boundaries.
#include "codegen/cuda_reduce.hpp"

#include <algorithm>

#include "reduction/fold_rules.hpp"

namespace tessel::cuda_gen {

namespace {

using std::string;
using std::to_string;

// Up to this K the K-best list lives in registers (every index constant after unrolling).
constexpr int kRegisterK = 16;

string slot(int k, const string& at) { return string("[") + to_string(k) + " * ws + " + at + "]"; }

// Component c's K-best list of state s: its values and indices.
string kv(int c, const string& s) { return "kv" + to_string(c) + s; }
string ki(int c, const string& s) { return "ki" + to_string(c) + s; }

}  // namespace

ReduceCode::ReduceCode(const ReductionImpl& r, SumScheme scheme, bool acc_f64)
    : r_(r),
      d_(r.f.dim()),
      wd_(r.weight.valid() ? r.weight.dim() : 0),
      k_(r.k),
      kahan_(scheme == SumScheme::Kahan && !acc_f64),
      acc_f64_(acc_f64),
      info_(reduction_info(r.op)),
      fam_(info_.family) {}

bool ReduceCode::needs_index() const { return info_.keeps_index(); }

std::vector<string> ReduceCode::sums() const {
  std::vector<string> s;
  if (r_.op == ReductionOp::SumSoftMaxWeight) s.push_back("ss");
  if (wd_ == 0) s.push_back("s");
  for (int c = 0; c < wd_; ++c) s.push_back(string("s") + to_string(c));
  return s;
}

int ReduceCode::slots() const {
  if (fam_ == ReductionFamily::Sum) return d_;
  if (fam_ == ReductionFamily::Select) return 2 * d_;
  if (fam_ == ReductionFamily::KSelect) return 2 * k_ * d_;
  return 1 + static_cast<int>(sums().size());
}

int ReduceCode::state_registers(bool f64) const {
  const int t = f64 ? 2 : 1;  // a T value; doubles and indices take 2
  if (fam_ == ReductionFamily::Sum) return d_ * ((acc_f64_ ? 2 : kahan_ ? 2 * t : t) + 2);
  if (fam_ == ReductionFamily::Select) return d_ * (t + 2);
  if (fam_ == ReductionFamily::KSelect) return k_ * d_ * (t + 2);
  return 2 * t + static_cast<int>(sums().size()) * (t + 2);
}

string ReduceCode::helpers() const {
  // The merge rules shared with the interpreter and the CPU kernels.
  string s =
      string("#define FOLD_QUAL DEV\n#define FOLD_INF ((double)INFINITY)\n#define FOLD_EXP exp\n") +
      fold_rules_source();
  if (fam_ != ReductionFamily::KSelect) return s;
  const string K = to_string(k_);
  // Ranks before slot (w, wi): empty slots (index -1) rank last, then fold_ranks_before (terms
  // and merged lists arrive in increasing index order, so an equal value never ranks before).
  s += "DEV bool kbefore(T v, T w, i64 wi) { return wi < 0 || fold_ranks_before(v, w); }\n"
       "DEV void kpush(T (&kv)[" +
       K + "], i64 (&ki)[" + K +
       "], T v, i64 j) {\n"
       "  if (!kbefore(v, kv[" +
       K + " - 1], ki[" + K + " - 1])) return;\n";
  if (k_ <= kRegisterK)
    s += "  kv[" + K + " - 1] = v; ki[" + K +
         " - 1] = j;\n"
         "#pragma unroll\n"
         "  for (int q = " +
         K +
         " - 1; q > 0; --q)\n"
         "    if (kbefore(v, kv[q - 1], ki[q - 1])) {\n"
         "      kv[q] = kv[q - 1]; ki[q] = ki[q - 1]; kv[q - 1] = v; ki[q - 1] = j;\n"
         "    }\n";
  else
    s += "  int q = " + K +
         " - 1;\n"
         "  for (; q > 0 && kbefore(v, kv[q - 1], ki[q - 1]); --q) {\n"
         "    kv[q] = kv[q - 1]; ki[q] = ki[q - 1];\n"
         "  }\n"
         "  kv[q] = v; ki[q] = j;\n";
  return s + "}\n";
}

int ReduceCode::totals() const {
  if (fam_ == ReductionFamily::Sum) return d_;
  if (fam_ == ReductionFamily::SoftMax) return static_cast<int>(sums().size());
  return 0;
}

string ReduceCode::declare(const string& s, const string& acc, const string& stride) const {
  string o;
  int k = 0;
  // Total `name`: a register, or a reference to this thread's slot k of `acc`.
  auto total = [&](const string& name) {
    if (acc.empty()) return "double " + name + " = 0;";
    return "double& " + name + " = " + acc + "[" + to_string(k++) + " * " + stride + "]; " + name +
           " = 0;";
  };
  if (fam_ == ReductionFamily::Sum) {
    for (int c = 0; c < d_; ++c) {
      const string n = to_string(c) + s;
      o += string("  ") + (acc_f64_ ? "double" : "T") + " st" + n + " = 0; " + total("sd" + n) +
           "\n";
      if (kahan_) o += "  T sc" + n + " = 0;\n";
    }
  } else if (fam_ == ReductionFamily::Select) {
    for (int c = 0; c < d_; ++c)
      o += "  T bv" + to_string(c) + s + " = " + identity_text(info_, "INF") + "; i64 bi" +
           to_string(c) + s + " = -1;\n";
  } else if (fam_ == ReductionFamily::KSelect) {
    const string K = to_string(k_);
    for (int c = 0; c < d_; ++c) {
      o += "  T " + kv(c, s) + "[" + K + "]; i64 " + ki(c, s) + "[" + K + "];\n";
      o += "#pragma unroll\n  for (int q = 0; q < " + K + "; ++q) { " + kv(c, s) + "[q] = INF; " +
           ki(c, s) + "[q] = -1; }\n";
    }
  } else {
    o += "  T m" + s + " = -INF, ml" + s + " = 0; (void)ml" + s + ";\n";
    for (const string& n : sums()) o += "  T " + n + "t" + s + " = 0; " + total(n + "d" + s) + "\n";
  }
  return o;
}

string ReduceCode::push(const std::vector<string>& rows, const std::vector<std::vector<string>>& f,
                        const std::vector<std::vector<string>>& w) const {
  string o;
  if (fam_ == ReductionFamily::Sum) {
    for (size_t q = 0; q < rows.size(); ++q)
      for (int c = 0; c < d_; ++c) {
        const string st = "st" + to_string(c) + rows[q], sc = "sc" + to_string(c) + rows[q];
        if (kahan_)
          o += "      { const T y_ = " + f[q][c] + " - " + sc + "; const T t_ = " + st + " + y_; " +
               sc + " = (t_ - " + st + ") - y_; " + st + " = t_; }\n";
        else
          o += "      " + st + " += " + (acc_f64_ ? "(double)" : "") + f[q][c] + ";\n";
      }
  } else if (fam_ == ReductionFamily::Select) {
    // Terms come in index order: fold_select_takes's rule, with the first term left to close().
    const char* not_better = info_.is_max ? " <= " : " >= ";
    for (size_t q = 0; q < rows.size(); ++q)
      for (int c = 0; c < d_; ++c) {
        const string b = "bv" + to_string(c) + rows[q], bi = "bi" + to_string(c) + rows[q];
        o += "      { const T v_ = " + f[q][c] + "; const bool tk_ = !(v_" + not_better + b +
             ") && " + b + " == " + b + "; " + b + " = tk_ ? v_ : " + b + "; " + bi +
             " = tk_ ? j : " + bi + "; }\n";
      }
  } else if (fam_ == ReductionFamily::KSelect) {
    for (size_t q = 0; q < rows.size(); ++q)
      for (int c = 0; c < d_; ++c)
        o += "      kpush(" + kv(c, rows[q]) + ", " + ki(c, rows[q]) + ", " + f[q][c] + ", j);\n";
  } else {
    // The common case, v < m, is straight-line code; one branch for all rows handles a new
    // maximum, a NaN or a tie with the maximum in any of them, which keeps divergence
    // bookkeeping out of the loop (and the +inf test below out of the common case).
    string any;
    for (size_t q = 0; q < rows.size(); ++q) {
      const string& s = rows[q];
      o += "      const T v" + s + " = " + f[q][0] + "; T e" + s + " = ex2(fma(v" + s +
           ", LOG2E_T, -ml" + s + "));\n";
      any += (q ? " | " : "") + string("!(v") + s + " < m" + s + ")";
    }
    o += "      if (" + any + ") {  // a new maximum, NaN or a tie: rescale the sums\n";
    for (const string& s : rows) {
      // A +inf term under m = +inf counts 1: ex2(inf - inf) would be NaN.
      o += "        if (v" + s + " == m" + s + " && v" + s + " == INF) e" + s + " = (T)1;\n";
      o += "        if (!(v" + s + " <= m" + s + ")) {\n";
      o += "          const T vl_ = v" + s + " * LOG2E_T;\n";
      o += "          const T sc_ = m" + s + " == -INF ? (T)0 : ex2(ml" + s + " - vl_);\n";
      o += "          m" + s + " = v" + s + "; ml" + s + " = vl_; e" + s + " = v" + s + " == v" +
           s + " ? (T)1 : v" + s + ";\n";
      for (const string& n : sums())
        o += "          " + n + "t" + s + " *= sc_; " + n + "d" + s + " *= sc_;\n";
      o += "        }\n";
    }
    o += "      }\n";
    for (size_t q = 0; q < rows.size(); ++q) {
      int c = 0;
      for (const string& n : sums()) {
        const bool weighted = n != "s" && n != "ss";
        o += "      " + n + "t" + rows[q] +
             " += " + (weighted ? "e" + rows[q] + " * " + w[q][c++] : "e" + rows[q]) + ";\n";
      }
    }
  }
  return o;
}

bool ReduceCode::optimistic() const {
  return fam_ == ReductionFamily::SoftMax && (wd_ == 0 || r_.op == ReductionOp::SumSoftMaxWeight);
}

string ReduceCode::push_fast(const std::vector<string>& rows, const std::vector<string>& a,
                             const std::vector<std::vector<string>>& w) const {
  string o;
  for (size_t q = 0; q < rows.size(); ++q) {
    o += "      { const T e_ = ex2(" + a[q] + ");";
    int c = 0;
    for (const string& n : sums()) {
      const bool weighted = n != "s" && n != "ss";
      o += " " + n + "t" + rows[q] + " += " + (weighted ? "e_ * " + w[q][c++] : "e_") + ";";
    }
    o += " }\n";
  }
  return o;
}

string ReduceCode::redo(const std::vector<string>& rows) const {
  // The unweighted tile sum bounds every term of the tile (they are >= 0): below 2^16, no term's
  // exponent exceeded the running maximum's by 16 (log2 units). NaN fails the test.
  // A weighted sum that overflowed (terms up to 2^16 times a weight) runs again as well.
  const string u = r_.op == ReductionOp::SumSoftMaxWeight ? "sst" : "st";
  string o;
  for (size_t q = 0; q < rows.size(); ++q) {
    const string& r = rows[q];
    o += (q ? " | " : "") + string("!(") + u + r + " < (T)65536) | m" + r + " == -INF";
    for (const string& n : sums())
      if (n != "s" && n != "ss") o += " | !(" + n + "t" + r + " - " + n + "t" + r + " == (T)0)";
  }
  return o;
}

string ReduceCode::reset(const std::vector<string>& rows) const {
  string o;
  for (const string& r : rows)
    for (const string& n : sums()) o += "        " + n + "t" + r + " = 0;\n";
  return o;
}

string ReduceCode::flush(const string& s, const string& factor) const {
  string o;
  const string times = factor.empty() ? "" : " * " + factor;
  if (fam_ == ReductionFamily::Sum)
    for (int c = 0; c < d_; ++c) {
      const string n = to_string(c) + s;
      if (kahan_)  // the partial's lost low part, -sc, goes in too
        o += "      sd" + n + " += ((double)st" + n + " - (double)sc" + n + ")" + times + "; st" +
             n + " = 0; sc" + n + " = 0;\n";
      else
        o += "      sd" + n + " += (double)st" + n + times + "; st" + n + " = 0;\n";
    }
  if (fam_ == ReductionFamily::SoftMax)
    for (const string& n : sums())
      o += "      " + n + "d" + s + " += " + n + "t" + s + "; " + n + "t" + s + " = 0;\n";
  return o;
}

string ReduceCode::close(const string& s, const string& jb, const string& je) const {
  string o;
  if (fam_ == ReductionFamily::Select)
    for (int c = 0; c < d_; ++c) {
      const string bi = "bi" + to_string(c) + s;
      o += "  if (" + bi + " < 0 && " + jb + " < " + je + ") " + bi + " = " + jb + ";\n";
    }
  return o;
}

string ReduceCode::store(const string& s, const string& at) const {
  string o;
  if (fam_ == ReductionFamily::Sum) {
    for (int c = 0; c < d_; ++c) o += "    wv" + slot(c, at) + " = sd" + to_string(c) + s + ";\n";
  } else if (fam_ == ReductionFamily::Select) {
    for (int c = 0; c < d_; ++c)
      o += "    wv" + slot(2 * c, at) + " = bv" + to_string(c) + s + "; wi" + slot(2 * c + 1, at) +
           " = bi" + to_string(c) + s + ";\n";
  } else if (fam_ == ReductionFamily::KSelect) {
    for (int c = 0; c < d_; ++c) {
      const string w = "(2 * (" + to_string(c * k_) + " + q)";
      o += "#pragma unroll\n    for (int q = 0; q < " + to_string(k_) + "; ++q) { wv[" + w +
           ") * ws + " + at + "] = " + kv(c, s) + "[q]; wi[" + w + " + 1) * ws + " + at +
           "] = " + ki(c, s) + "[q]; }\n";
    }
  } else {
    o += "    wv" + slot(0, at) + " = m" + s + ";\n";
    int k = 1;
    for (const string& n : sums()) o += "    wv" + slot(k++, at) + " = " + n + "d" + s + ";\n";
  }
  return o;
}

string ReduceCode::load(const string& s, const string& at) const {
  string o;
  if (fam_ == ReductionFamily::Sum) {
    for (int c = 0; c < d_; ++c) o += "    sd" + to_string(c) + s + " = wv" + slot(c, at) + ";\n";
  } else if (fam_ == ReductionFamily::Select) {
    for (int c = 0; c < d_; ++c)
      o += "    bv" + to_string(c) + s + " = (T)wv" + slot(2 * c, at) + "; bi" + to_string(c) + s +
           " = wi" + slot(2 * c + 1, at) + ";\n";
  } else if (fam_ == ReductionFamily::KSelect) {
    for (int c = 0; c < d_; ++c) {
      const string w = "(2 * (" + to_string(c * k_) + " + q)";
      o += "#pragma unroll\n    for (int q = 0; q < " + to_string(k_) + "; ++q) { " + kv(c, s) +
           "[q] = (T)wv[" + w + ") * ws + " + at + "]; " + ki(c, s) + "[q] = wi[" + w +
           " + 1) * ws + " + at + "]; }\n";
    }
  } else {
    // ml (m log2 e) is what push() scales by: resumed with m (0 while there is no term yet).
    o += "    m" + s + " = (T)wv" + slot(0, at) + "; ml" + s + " = m" + s + " == -INF ? (T)0 : m" +
         s + " * LOG2E_T;\n";
    int k = 1;
    for (const string& n : sums()) o += "    " + n + "d" + s + " = wv" + slot(k++, at) + ";\n";
  }
  return o;
}

string ReduceCode::merge(const string& a, const string& b) const {
  string o;
  if (fam_ == ReductionFamily::Sum) {
    for (int c = 0; c < d_; ++c)
      o += "    sd" + to_string(c) + a + " += sd" + to_string(c) + b + ";\n";
  } else if (fam_ == ReductionFamily::Select) {
    for (int c = 0; c < d_; ++c) {
      const string va = "bv" + to_string(c) + a, ia = "bi" + to_string(c) + a;
      const string vb = "bv" + to_string(c) + b, ib = "bi" + to_string(c) + b;
      o += "    if (fold_select_takes(" + vb + ", " + ib + ", " + va + ", " + ia + ", " +
           (info_.is_max ? "1" : "0") + ")) { " + va + " = " + vb + "; " + ia + " = " + ib +
           "; }\n";
    }
  } else if (fam_ == ReductionFamily::KSelect) {
    for (int c = 0; c < d_; ++c)
      o += "#pragma unroll\n    for (int q = 0; q < " + to_string(k_) + "; ++q) if (" + ki(c, b) +
           "[q] >= 0) kpush(" + kv(c, a) + ", " + ki(c, a) + ", " + kv(c, b) + "[q], " + ki(c, b) +
           "[q]);\n";
  } else {
    // b's terms come after a's: the same rescaling as one more term, NaN and +-inf included.
    const string ma = "(double)m" + a, mb = "(double)m" + b;
    o += "    if (!(m" + b + " <= m" + a + ")) {\n";
    o += "      const double sc_ = fold_shift_scale(" + ma + ", " + mb + ");\n";
    for (const string& n : sums())
      o += "      " + n + "d" + a + " = " + n + "d" + a + " * sc_ + " + n + "d" + b + ";\n";
    o += "      m" + a + " = m" + b + ";\n    } else {\n";
    o += "      const double sc_ = fold_shift_scale(" + mb + ", " + ma + ");\n";
    for (const string& n : sums()) o += "      " + n + "d" + a + " += " + n + "d" + b + " * sc_;\n";
    o += "    }\n";
  }
  return o;
}

string ReduceCode::finish(const string& s, const string& row) const {
  string o;
  if (fam_ == ReductionFamily::Sum) {
    for (int c = 0; c < d_; ++c)
      o += "    out0[" + row + " * " + to_string(d_) + " + " + to_string(c) + "] = (T)sd" +
           to_string(c) + s + ";\n";
  } else if (fam_ == ReductionFamily::Select) {
    for (int c = 0; c < d_; ++c) {
      const string at = row + " * " + to_string(d_) + " + " + to_string(c);
      for (int q = 0; q < info_.num_outputs(); ++q)
        o += info_.output_is_index(q) ? "    outi[" + at + "] = bi" + to_string(c) + s + ";\n"
                                      : "    out0[" + at + "] = bv" + to_string(c) + s + ";\n";
    }
  } else if (fam_ == ReductionFamily::KSelect) {
    o += "#pragma unroll\n    for (int q = 0; q < " + to_string(k_) + "; ++q) {";
    for (int c = 0; c < d_; ++c) {
      const string at =
          row + " * " + to_string(k_ * d_) + " + q * " + to_string(d_) + " + " + to_string(c);
      for (int q = 0; q < info_.num_outputs(); ++q)
        o += info_.output_is_index(q) ? " outi[" + at + "] = " + ki(c, s) + "[q];"
                                      : " out0[" + at + "] = " + kv(c, s) + "[q];";
    }
    o += " }\n";
  } else {
    // Empty or all -inf: m = -inf and zero sums give -inf (LogSumExp) and NaN (SoftMax: 0 / 0);
    // NaN terms left NaN sums.
    const int nc = std::max(wd_, 1);
    for (int c = 0; c < nc; ++c) {
      const string sum = (wd_ ? "s" + to_string(c) : string("s")) + "d" + s;
      const string at = "out0[" + row + " * " + to_string(nc) + " + " + to_string(c) + "]";
      if (r_.op == ReductionOp::LogSumExp)
        o += "    " + at + " = (T)((double)m" + s + " + log(" + sum + "));\n";
      else
        o += "    " + at + " = (T)(m" + s + " == INF || ssd" + s + " == 0 ? (T)NAN : " + sum +
             " / ssd" + s + ");\n";
    }
  }
  return o;
}

}  // namespace tessel::cuda_gen
