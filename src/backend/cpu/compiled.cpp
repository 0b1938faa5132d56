// Compiled CPU kernels (work in progress in this commit: always declines, so the interpreter runs).
#include "backend/cpu/problem.hpp"

namespace tessel {
bool run_compiled(const Problem&, std::span<const ArrayView>) { return false; }
}  // namespace tessel
