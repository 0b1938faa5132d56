// libFuzzer target for the KeOps text parser: any bytes give a formula or a tessel::Error.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tessel/tessel.hpp"

// Input layout: the formula, then optionally a NUL and aliases separated by NULs, so the fuzzer
// reaches both grammars. Anything but tessel::Error escaping parse() is a bug (so is a crash).
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  size_t b = 0;
  for (size_t e; (e = in.find('\0', b)) != std::string::npos; b = e + 1)
    parts.push_back(in.substr(b, e - b));
  parts.push_back(in.substr(b));
  const std::string formula = parts[0];
  std::vector<std::string> aliases(parts.begin() + 1, parts.end());
  if (aliases.empty()) aliases = {"X = Vi(3)", "Y = Vj(3)", "B = Vj(1)", "G = Pm(1)"};
  try {
    const tessel::Formula f = tessel::parse(formula, aliases);
    // What parses must print and parse back to itself.
    if (!tessel::parse(f.str()).same(f)) __builtin_trap();
  } catch (const tessel::Error& e) {
    if (std::string(e.what()).empty()) __builtin_trap();
  }
  return 0;
}
