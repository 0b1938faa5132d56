// Error messages that survive any consumer: user text quoted in them is escaped, never raw bytes.
#include <cstdio>
#include <sstream>

#include "tessel/error.hpp"

namespace tessel {

namespace detail {

namespace {

// Length of the well-formed UTF-8 sequence at s[k] (1 to 4) and its code point, or 0 when the
// bytes there are not one (a lone continuation byte, a truncated or overlong sequence, ...).
size_t utf8_sequence(std::string_view s, size_t k, char32_t& cp) {
  const auto b = [&](size_t q) { return static_cast<unsigned char>(s[q]); };
  const unsigned char c = b(k);
  if (c < 0x80) return cp = c, 1;
  size_t n = 0;
  char32_t min = 0;
  if ((c & 0xe0) == 0xc0) n = 2, cp = c & 0x1f, min = 0x80;
  else if ((c & 0xf0) == 0xe0) n = 3, cp = c & 0x0f, min = 0x800;
  else if ((c & 0xf8) == 0xf0) n = 4, cp = c & 0x07, min = 0x10000;
  else return 0;
  if (k + n > s.size()) return 0;
  for (size_t q = 1; q < n; ++q) {
    if ((b(k + q) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(k + q) & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

}  // namespace

std::string escape_text(std::string_view text, bool ascii_only) {
  std::string out;
  out.reserve(text.size());
  char buf[16];
  for (size_t k = 0; k < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[k]);
    char32_t cp = 0;
    const size_t n = utf8_sequence(text, k, cp);
    if (n == 1 && c >= 0x20 && c != 0x7f) {
      out += text[k];
    } else if (n == 1 && !ascii_only && (c == '\n' || c == '\t')) {
      out += text[k];  // the layout of multi-line messages
    } else if (n > 1 && !ascii_only) {
      out.append(text.substr(k, n));
    } else if (n > 1) {
      std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
      out += buf;
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
    k += n > 0 ? n : 1;
  }
  return out;
}

void internal_error(const char* function, const char* file, int line, const std::string& what) {
  // Only the file's name: the build machine's folders mean nothing in a user's bug report.
  std::string_view f(file);
  if (const size_t slash = f.find_last_of('/'); slash != std::string_view::npos)
    f.remove_prefix(slash + 1);
  std::ostringstream os;
  os << "tessel: internal error in " << function << ": " << what << " (" << f << ":" << line
     << "); please report it";
  throw InternalError(os.str());
}

}  // namespace detail

Error::Error(const std::string& what, ErrorKind kind)
    : std::runtime_error(detail::escape_text(what, false)), kind_(kind) {}

InternalError::InternalError(const std::string& what)
    : std::logic_error(detail::escape_text(what, false)) {}

}  // namespace tessel
