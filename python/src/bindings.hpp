// What the binding files of tessel._core share: array reading, NumPy results, the bound
// settings of a reduction, and the function each file binds its part of the module with.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
// Every binding file sees the same casters (one missing in one file is an ODR violation that
// breaks the cast in all of them).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "tessel/options.hpp"
#include "tessel/tessel.hpp"

namespace tessel::py {

namespace nb = nanobind;

// Inputs are read-only (broadcast views and read-only NumPy arrays are fine); outputs are written.
// Any device: CUDA arrays (PyTorch CUDA tensors) run on their GPU.
using InArray = nb::ndarray<nb::ro>;
using OutArray = nb::ndarray<>;
using RangesArg = std::optional<std::vector<std::vector<int64_t>>>;
using DevicesArg = std::optional<std::vector<int>>;

// A DLPack array (NumPy, PyTorch, anything nanobind reads) as the core's view; `what` and `k`
// name it in errors ("input 2").
ArrayView view_of(const InArray& a, const char* what, size_t k = 0);
ArrayView view_of(const OutArray& a, const char* what, size_t k = 0);

// Which arrays a front end takes, for the messages of a bound call: "a torch.Tensor" or "a
// numpy.ndarray"; Any takes every array nanobind reads.
enum class ArrayKind : uint8_t { Any, Torch, Numpy };

// One argument of a front end's call as a view, read without a DLPack export where it is a
// PyTorch tensor (a tensor that requires grad exports only after a detach, and the export is
// most of a small call's cost). Errors name `who` and the argument, in the front end's words.
ArrayView read_argument(nb::handle h, const std::string& who, size_t k, ArrayKind kind);

// An Array's storage handed to NumPy without a copy.
nb::object to_numpy(const Array& a);

// KeOps block-sparse ranges (6 integer lists) as the core's BlockRanges.
std::shared_ptr<const BlockRanges> block_ranges(const RangesArg& ranges);

// The options of a reduction, normalised once when a front end builds it: a call hands over this
// object, never keywords to read again.
struct Settings {
  NormalizedOptions given;
  Options eval;
};

// A Python dict of options checked by the core's normaliser for `who`.
NormalizedOptions normalize_dict(const std::string& who, nb::dict options, unsigned scope,
                                 std::optional<std::string> reduction);

void bind_formulas(nb::module_& m);
void bind_options(nb::module_& m);
void bind_reductions(nb::module_& m);
void bind_solve(nb::module_& m);
void bind_gp(nb::module_& m);
void bind_loops(nb::module_& m);
void bind_ot(nb::module_& m);

}  // namespace tessel::py
