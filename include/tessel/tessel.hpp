// Umbrella header: formulas, reductions, arrays, errors, checkpoint schedules, kernel solves, OT.
#pragma once

#include "tessel/array.hpp"
#include "tessel/checkpoint.hpp"
#include "tessel/error.hpp"
#include "tessel/formula.hpp"
#include "tessel/reduction.hpp"
#include "tessel/runtime.hpp"
#include "tessel/ot.hpp"
#include "tessel/solve.hpp"
