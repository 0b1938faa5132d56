// Binding and validation: each input checked against its slot, each output against the
// reduction, extents and block-sparse ranges checked, all before a backend sees the problem.
#include "engine/engine_impl.hpp"

namespace tessel::engine {

const char* cat_word(Category c) {
  return c == Category::I ? "Vi" : c == Category::J ? "Vj" : "Pm";
}

bool extent_fits(const ArrayView& a) {
  for (int64_t s : a.shape)
    if (s <= 0) return true;
  int64_t last = 0, t = 0;
  for (size_t k = 0; k < a.shape.size(); ++k) {
    const int64_t st = a.stride(static_cast<int>(k));
    if (st == INT64_MIN || __builtin_mul_overflow(a.shape[k] - 1, st < 0 ? -st : st, &t) ||
        __builtin_add_overflow(last, t, &last))
      return false;
  }
  return !__builtin_add_overflow(last, 1, &last) &&
         !__builtin_mul_overflow(last, static_cast<int64_t>(dtype_size(a.dtype)), &t);
}

void check_extent(const char* fn, const std::string& who, const ArrayView& a) {
  if (extent_fits(a)) return;
  for (int64_t s : a.shape)
    if (s <= 0) return;  // nothing is read or written (negative sizes are reported elsewhere)
  const std::string what = who + "'s extent";
  int64_t last = 0;
  for (size_t k = 0; k < a.shape.size(); ++k) {
    const int64_t st = a.stride(static_cast<int>(k));
    if (st == INT64_MIN) detail::fail(fn, who, " has stride ", st, "; its magnitude is too large");
    last = detail::checked_add(
        last, detail::checked_mul(a.shape[k] - 1, st < 0 ? -st : st, fn, what.c_str()), fn,
        what.c_str());
  }
  detail::checked_mul(detail::checked_add(last, 1, fn, what.c_str()),
                      static_cast<int64_t>(dtype_size(a.dtype)), fn, what.c_str());
}

// Checks one input against its slot and returns its rows × dim view.
Bound bind(const VarSlot& v, const ArrayView& a, bool cuda) {
  const char* fn = "evaluate";
  Bound b;
  b.index = v.index;
  b.cat = v.cat;
  b.dim = v.dim;
  b.dtype = a.dtype;
  b.data = a.data;
  const std::string who = std::string("input ") + std::to_string(v.index) + " (" + cat_word(v.cat) +
                          "(" + std::to_string(v.index) + "," + std::to_string(v.dim) + "))";
  if (a.device.kind != DeviceKind::CPU && !cuda)
    detail::fail(fn, who, " is on a CUDA device but the CPU backend was requested");
  if (a.dtype != DType::Float32 && a.dtype != DType::Float64)
    detail::fail_type(fn, who, " has dtype ", dtype_name(a.dtype), "; expected float32 or float64");
  if (!a.strides.empty() && a.strides.size() != a.shape.size())
    detail::fail(fn, who, " has ", a.strides.size(), " strides for ", a.shape.size(), " dims");
  for (int64_t s : a.shape)
    if (s < 0) detail::fail(fn, who, " has a negative size in its shape");
  if (v.cat == Category::Param) {
    const bool ok = (a.shape.size() == 1 && a.shape[0] == v.dim) ||
                    (a.shape.size() == 2 && a.shape[0] == 1 && a.shape[1] == v.dim);
    if (!ok) detail::fail(fn, who, " must have shape (", v.dim, ") or (1, ", v.dim, ")");
    b.rows = 1;
    b.s_row = 0;
    b.s_col = a.stride(static_cast<int>(a.shape.size()) - 1);
  } else if (a.shape.size() == 2 && a.shape[1] == v.dim) {
    b.rows = a.shape[0];
    b.s_row = a.stride(0);
    b.s_col = a.stride(1);
  } else if (a.shape.size() == 1 && v.dim == 1) {
    b.rows = a.shape[0];
    b.s_row = a.stride(0);
    b.s_col = 1;
  } else {
    std::string got = "(";
    for (size_t k = 0; k < a.shape.size(); ++k) got += (k ? ", " : "") + std::to_string(a.shape[k]);
    detail::fail(fn, who, " has shape ", got, "); expected (n, ", v.dim, ")",
                 v.dim == 1 ? " or (n)" : "");
  }
  if (a.data == nullptr && b.rows > 0) detail::fail(fn, who, " has a null data pointer");
  check_extent(fn, who, a);
  return b;
}

void check_output(const ReductionImpl& r, int k, const ArrayView& o, int64_t rows, DType dtype,
                  bool cuda) {
  const char* fn = "evaluate";
  const int dim = r.output_dim(k);
  const DType want = r.output_is_index(k) ? DType::Int64 : dtype;
  const std::string who = "output " + std::to_string(k);
  if (o.device.kind != DeviceKind::CPU && !cuda)
    detail::fail(fn, who, " is on a CUDA device but the CPU backend was requested");
  if (o.dtype != want)
    detail::fail_type(fn, who, " has dtype ", dtype_name(o.dtype), "; expected ", dtype_name(want));
  const bool ok = (o.shape.size() == 2 && o.shape[0] == rows && o.shape[1] == dim) ||
                  (o.shape.size() == 1 &&
                   ((dim == 1 && o.shape[0] == rows) || (rows == 1 && o.shape[0] == dim)));
  if (!ok) detail::fail(fn, who, " must have shape (", rows, ", ", dim, ")");
  if (o.data == nullptr && rows > 0 && dim > 0) detail::fail(fn, who, " has a null data pointer");
  check_extent(fn, who, o);
}

// The row blocks of a reduction: all rows over [0, n_inner), or the block-sparse ranges checked
// and completed with empty blocks for the rows they leave out.
std::vector<RowBlock> row_blocks(const ReductionImpl& r, const Options& opt, int64_t n_outer,
                                 int64_t n_inner) {
  const char* fn = "evaluate";
  if (!opt.ranges || reduction_info(r.op).is_indexed())
    return {RowBlock{0, n_outer, {0, n_inner}}};
  const BlockRanges& br = *opt.ranges;
  const bool over_j = r.axis == 1;
  const auto& ranges = over_j ? br.ranges_i : br.ranges_j;
  const auto& slices = over_j ? br.slices_i : br.slices_j;
  const auto& red = over_j ? br.redranges_j : br.redranges_i;
  const char* rn = over_j ? "ranges_i" : "ranges_j";
  const char* sn = over_j ? "slices_i" : "slices_j";
  const char* dn = over_j ? "redranges_j" : "redranges_i";
  if (ranges.size() % 2 || red.size() % 2)
    detail::fail(fn, rn, " and ", dn, " must hold (start, end) pairs");
  if (slices.size() * 2 != ranges.size())
    detail::fail(fn, sn, " has ", slices.size(), " entries; expected one per block of ", rn, " (",
                 ranges.size() / 2, ")");
  std::vector<RowBlock> blocks;
  int64_t prev_slice = 0, covered = 0;
  for (size_t c = 0; c < slices.size(); ++c) {
    const int64_t b = ranges[2 * c], e = ranges[2 * c + 1], s = slices[c];
    if (b < covered || e < b || e > n_outer)
      detail::fail(fn, rn, " block ", c, " = [", b, ", ", e, ") is not increasing and within [0, ",
                   n_outer, ")");
    if (s < prev_slice || s > static_cast<int64_t>(red.size() / 2))
      detail::fail(fn, sn, "[", c, "] = ", s, " is not non-decreasing and within the ",
                   red.size() / 2, " intervals of ", dn);
    if (b > covered) blocks.push_back(RowBlock{covered, b, {}});
    RowBlock blk{b, e, {}};
    for (int64_t q = prev_slice; q < s; ++q) {
      const int64_t js = red[2 * q], je = red[2 * q + 1];
      if (js < 0 || je < js || je > n_inner)
        detail::fail(fn, dn, " interval ", q, " = [", js, ", ", je, ") is not within [0, ", n_inner,
                     ")");
      blk.iv.insert(blk.iv.end(), {js, je});
    }
    blocks.push_back(std::move(blk));
    prev_slice = s;
    covered = e;
  }
  if (covered < n_outer) blocks.push_back(RowBlock{covered, n_outer, {}});
  return blocks;
}

}  // namespace tessel::engine
