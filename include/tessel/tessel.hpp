// Umbrella header: formulas, reductions, arrays and errors.
#pragma once

#include "tessel/array.hpp"
#include "tessel/checkpoint.hpp"
#include "tessel/error.hpp"
#include "tessel/formula.hpp"
#include "tessel/reduction.hpp"
#include "tessel/runtime.hpp"
