// Internal: how the library tells the user something without failing (see set_warning_handler).
#pragma once

#include <string>

namespace tessel::detail {

// Gives `message` to the warning handler the first time `key` is seen in this process; later
// calls with the same key are silent, so a loop does not repeat it. Never throws.
void warn_once(const std::string& key, const std::string& message) noexcept;

}  // namespace tessel::detail
