// A persistent worker pool: parallel loops over blocks of output rows.
#pragma once

#include <cstdint>
#include <functional>

namespace tessel {

// Runs fn(begin, end) over [0, n) split into chunks of about `grain` rows, on up to `threads`
// threads (the caller's thread included). Exceptions from fn are rethrown in the caller.
void parallel_for(int64_t n, int64_t grain, int threads,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace tessel
