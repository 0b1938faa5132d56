// The bad-input corpus: every malformed formula or alias in tests/corpus gives a clear error.
#include <fstream>
#include <sstream>

#include "reduction_helpers.hpp"

using namespace tessel;

namespace {

// \xNN is a byte and \t a tab, so that NULs, broken UTF-8 and control characters fit a text file.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '\\' && k + 3 < s.size() && s[k + 1] == 'x') {
      out += static_cast<char>(std::stoi(s.substr(k + 2, 2), nullptr, 16));
      k += 3;
    } else if (s[k] == '\\' && k + 1 < s.size() && s[k + 1] == 't') {
      out += '\t';
      ++k;
    } else {
      out += s[k];
    }
  }
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string p; std::getline(in, p, sep);) parts.push_back(p);
  return parts;
}

}  // namespace

TEST(BadInputCorpus, EveryEntryIsAClearError) {
  std::ifstream in(TESSEL_SOURCE_DIR "/tests/corpus/bad_formulas.txt");
  ASSERT_TRUE(in) << "tests/corpus/bad_formulas.txt is missing";
  int entries = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    ++entries;
    const auto tab = line.find('\t');
    const std::string formula = unescape(line.substr(0, tab));
    std::vector<std::string> aliases;
    if (tab != std::string::npos)
      for (const std::string& a : split(line.substr(tab + 1), ';')) aliases.push_back(unescape(a));
    const std::string shown = line.substr(0, 120);
    try {
      const Formula f = parse(formula, aliases);
      ADD_FAILURE() << "accepted: " << shown << " -> " << f.str().substr(0, 120);
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_GT(m.size(), std::string("tessel::parse: ").size()) << shown;
      EXPECT_EQ(m.find('\0'), std::string::npos) << shown;
      for (char c : m)
        EXPECT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f)) << shown << ": " << m;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a tessel::Error (" << e.what() << ") for " << shown;
    }
  }
  EXPECT_GE(entries, 200);
}
