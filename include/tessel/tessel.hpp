// Umbrella header: formulas, reductions, arrays, errors, checkpoint schedules, kernel solves, GP
// linear algebra, OT, and the argument lists of KeOps reduction texts for language bindings.
#pragma once

#include "tessel/array.hpp"
#include "tessel/checkpoint.hpp"
#include "tessel/error.hpp"
#include "tessel/formula.hpp"
#include "tessel/gp.hpp"
#include "tessel/ot.hpp"
#include "tessel/reduction.hpp"
#include "tessel/runtime.hpp"
#include "tessel/solve.hpp"
#include "tessel/text_kernel.hpp"
