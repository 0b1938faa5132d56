// Float64 reference evaluation of a formula at one point: the independent oracle for tests.
#pragma once

#include <map>
#include <vector>

#include "tessel/formula.hpp"

namespace tessel {

// `values` maps a variable index to its value (a vector of the variable's dim).
std::vector<double> eval_point(const Formula& f, const std::map<int, std::vector<double>>& values);

}  // namespace tessel
