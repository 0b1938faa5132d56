// Per-reduction pieces of the generated CUDA kernels: a row's state, folding a term, merging.
//
// The main kernel keeps one state per output row in registers, folds the terms of its inner rows
// into it and either writes the outputs or, when the inner rows are split across block rows,
// stores the state in the workspace; tessel_combine loads those states and merges them in the
// order of their inner rows. Every piece is text for one state whose variables end in a suffix
// ("_0".."_3" for a thread's rows, "_a"/"_b" in the combine kernel), so both kernels run the same
// code and a split reduction gives the same answer as an unsplit one: indices exactly, values up
// to the rounding of the sums.
#pragma once

#include <string>
#include <vector>

#include "reduction/reduction_impl.hpp"
#include "reduction/reduction_info.hpp"

namespace tessel::cuda_gen {

class ReduceCode {
 public:
  // `scheme` and `acc_f64` (float32 data only) choose how Sum adds within a tile: in T (Block,
  // and Direct, which gets Block's better bound), compensated in T (Kahan), or in double.
  explicit ReduceCode(const ReductionImpl& r, SumScheme scheme = SumScheme::Block,
                      bool acc_f64 = false);

  // Device functions the pieces call (the shared merge rules of reduction/fold_rules.inc, the
  // K-best insertion), placed before the kernels.
  std::string helpers() const;
  // 8-byte workspace words one row's state takes: values as double, indices as int64.
  int slots() const;
  // 32-bit registers one row's state occupies (the plan's rows-per-thread heuristic).
  int state_registers(bool f64) const;
  // Whether terms carry their inner index j (ArgMin, KMin, ...).
  bool needs_index() const;

  // The state of suffix s, empty (no term yet). With `acc` (a double* expression), the double
  // totals of Sum and the softmax family are references to acc[0], acc[stride], ...: shared
  // memory the tiles flush into, which keeps them out of the inner loop's registers.
  std::string declare(const std::string& s, const std::string& acc = "",
                      const std::string& stride = "") const;
  // Double totals one row's state holds (what declare() can move to `acc`).
  int totals() const;
  // Folds one term into each of the states `rows` (suffixes): f[q]/w[q] are row q's formula and
  // weight component expressions; the inner index is the variable `j`.
  std::string push(const std::vector<std::string>& rows,
                   const std::vector<std::vector<std::string>>& f,
                   const std::vector<std::vector<std::string>>& w) const;
  // The softmax family's optimistic tile (float32, with an unweighted sum): push_fast folds
  // terms with no test against the running maximum, a[q] being row q's exponent in log2 units
  // minus ml; when redo() holds after the tile, the rows' tile sums are reset() and the tile runs
  // again through push(). See the .cpp.
  bool optimistic() const;
  std::string push_fast(const std::vector<std::string>& rows, const std::vector<std::string>& a,
                        const std::vector<std::vector<std::string>>& w) const;
  std::string redo(const std::vector<std::string>& rows) const;
  std::string reset(const std::vector<std::string>& rows) const;
  // After each tile: moves the tile's float partial sums into the double totals, multiplied by
  // `factor` (a double expression; empty: 1) when the Sum's j-invariant factor was pulled out.
  std::string flush(const std::string& s, const std::string& factor = "") const;
  // After the last tile of inner rows [jb, je): fixes what only the range knows (see .cpp).
  std::string close(const std::string& s, const std::string& jb, const std::string& je) const;
  // Workspace word k of this state is at wv/wi[k * ws + at] (wv: double*, wi: int64*).
  std::string store(const std::string& s, const std::string& at) const;
  std::string load(const std::string& s, const std::string& at) const;
  // a = a (+) b, b holding the terms of later inner rows than a.
  std::string merge(const std::string& a, const std::string& b) const;
  // Writes the outputs of row `row` (out0: values, outi: indices).
  std::string finish(const std::string& s, const std::string& row) const;

 private:
  std::vector<std::string> sums() const;  // softmax family: the running sums' names

  const ReductionImpl& r_;
  int d_, wd_, k_;
  bool kahan_, acc_f64_;
  const ReductionInfo& info_;
  ReductionFamily fam_;
};

}  // namespace tessel::cuda_gen
