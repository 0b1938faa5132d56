// The parser's tokenizer and error reporting: a cursor over KeOps text that reads tokens on demand.
#pragma once

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>
#include <string_view>

#include "ops/op.hpp"

namespace tessel::parse_detail {

// Thrown inside the parser; only parse() knows which text (formula or alias) the column is in.
struct ParseError {
  size_t pos;
  std::string what;
};

[[noreturn]] inline void fail_at(size_t pos, std::string what) {
  throw ParseError{pos, std::move(what)};
}

// Builder errors (dims, ranges) are re-thrown at the column of the call or operator that failed.
template <class F>
Formula build_at(size_t pos, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    std::string w = e.what();
    if (w.rfind("tessel::", 0) == 0) w.erase(0, 8);  // parse()'s own prefix comes back on top
    fail_at(pos, w);
  }
}

[[noreturn]] inline void report(const std::string& context, const std::string& text,
                                const ParseError& e) {
  std::string shown = text;
  for (char& c : shown)
    if (std::isspace(static_cast<unsigned char>(c))) c = ' ';  // keeps the caret under its column
  // Non-ASCII and control characters are shown escaped; the caret moves with them.
  const size_t at = std::min(e.pos, shown.size());
  const size_t caret = detail::escape_text(std::string_view(shown).substr(0, at), true).size();
  detail::fail("parse", context, detail::escape_text(e.what, true), " at column ", e.pos, "\n  ",
               detail::escape_text(shown, true), "\n  ", std::string(caret, ' '), "^");
}

inline bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
inline bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
inline bool digit(char c) { return std::isdigit(static_cast<unsigned char>(c)); }

// Tokens are read on demand: which token comes next depends on the grammar position (an integer
// parameter, a tuple and a formula all start with a digit or '(').
class Cursor {
 public:
  explicit Cursor(const std::string& s) : s_(s) {}

  size_t pos() {
    skip();
    return pos_;
  }
  bool done() { return pos() >= s_.size(); }
  char peek() { return done() ? '\0' : s_[pos_]; }
  bool accept(char c) {
    if (done() || s_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c) {
    if (accept(c)) return;
    const std::string want = std::string("'") + c + "'";
    fail_at(pos(), done() ? "missing " + want : "expected " + want + ", found " + next());
  }
  // The next token quoted for a message, or "the end".
  std::string next() {
    if (done()) return "the end";
    size_t e = pos_;
    while (e < s_.size() && (ident_char(s_[e]) || s_[e] == '.')) ++e;
    if (e == pos_) {  // one character: a whole UTF-8 sequence when it starts one
      e = pos_ + 1;
      if (static_cast<unsigned char>(s_[pos_]) >= 0xc0)
        while (e < s_.size() && e < pos_ + 4 && (static_cast<unsigned char>(s_[e]) & 0xc0) == 0x80)
          ++e;
    }
    return "'" + s_.substr(pos_, e - pos_) + "'";  // report() escapes what is not printable ASCII
  }
  std::string ident() {
    if (done() || !ident_start(s_[pos_])) return {};
    const size_t b = pos_;
    while (pos_ < s_.size() && ident_char(s_[pos_])) ++pos_;
    return s_.substr(b, pos_ - b);
  }
  int64_t integer(const std::string& what) {
    const size_t b = pos();
    size_t p = b;
    const bool neg = p < s_.size() && s_[p] == '-';
    if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) ++p;
    while (p > b && p < s_.size() && std::isspace(static_cast<unsigned char>(s_[p]))) ++p;
    const size_t d = p;  // Python reads "- 2" as -2: spaces may follow the sign
    while (p < s_.size() && digit(s_[p])) ++p;
    if (p == d || (p < s_.size() && (ident_char(s_[p]) || s_[p] == '.')))
      fail_at(b, "expected an integer " + what + ", found " + next());
    const std::string tok = (neg ? "-" : "") + s_.substr(d, p - d);
    int64_t v = 0;
    if (std::from_chars(tok.data(), tok.data() + tok.size(), v).ec != std::errc())
      fail_at(b, "integer " + tok + " is out of range");
    pos_ = p;
    return v;
  }
  // An integer literal is IntCst(n); '.', 'e' or 'E' make it a float constant, as in C++.
  Formula number() {
    const size_t b = pos();
    size_t p = b, nd = 0;
    auto digits = [&] {
      for (; p < s_.size() && digit(s_[p]); ++p) ++nd;
    };
    bool is_float = false;
    digits();
    if (p < s_.size() && s_[p] == '.') ++p, is_float = true, digits();
    if (nd > 0 && p < s_.size() && (s_[p] == 'e' || s_[p] == 'E')) {
      is_float = true, nd = 0, ++p;
      if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
      digits();
    }
    if (nd == 0 || (p < s_.size() && (ident_char(s_[p]) || s_[p] == '.')))
      fail_at(b, "malformed number " + next());
    pos_ = p;
    const std::string tok = s_.substr(b, p - b);
    if (!is_float) {
      int64_t v = 0;
      if (std::from_chars(tok.data(), tok.data() + tok.size(), v).ec != std::errc())
        fail_at(b, "integer " + tok + " is out of range");
      return int_cst(v);
    }
    double v = 0;  // from_chars, not strtod: the text must not depend on the C locale
    if (std::from_chars(tok.data(), tok.data() + tok.size(), v).ec != std::errc())
      fail_at(b, "number " + tok + " is out of range");
    return constant(v);
  }

 private:
  void skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace tessel::parse_detail
