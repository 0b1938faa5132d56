// CUDA source for the gather/scatter reductions differentiation makes (gradients through Min, Max,
// KMin and their arg forms): a few listed partners per row, so that such gradients of device
// arrays stay on the device.
#pragma once

#include <string>
#include <vector>

#include "reduction/reduction_impl.hpp"

namespace tessel {

// The variables the kernel reads, in the order of its table: every variable of r that is not
// filled per slot (the index variable included).
std::vector<int> cuda_indexed_vars(const ReductionImpl& r);

// `tessel_indexed(const unsigned long long* vt, i64 n_anchor, i64 n_partner, T* out,
// double* acc)`, one thread per anchor row a (grid of ceil(n_anchor / block) blocks). vt holds,
// for the q-th variable of cuda_indexed_vars, its device pointer, row stride and column stride
// (elements) at vt[3q], vt[3q + 1], vt[3q + 2]. Slots whose partner index is outside
// [0, n_partner) are skipped, as the interpreter skips them.
// GatherSum: out[a, c] = sum over slots k of G(a, idx[a, k], k), added in double, written as T.
// ScatterSum: acc[idx[a, k], c] += G(...) with double atomics: acc (n_partner rows, zeroed by the
// caller) holds the sums, which the caller rounds into the output. The order of those atomic adds
// varies between runs: results may differ in the last bits of a double, not more.
// Empty when r is not a gather/scatter reduction.
std::string cuda_indexed_source(const ReductionImpl& r, bool f64);

}  // namespace tessel
