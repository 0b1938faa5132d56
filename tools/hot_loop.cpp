// Hot-loop analysis of compiler assembly: labels, branches, loops, and per-iteration counts.
#include "hot_loop.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace tessel::cli {

namespace {

struct Insn {
  std::string mnemonic;  // lower case
  std::string operands;
  int line = 0;
  int source_line = 0;  // of the main source file, from the last .loc directive
  int function = 0;  // which function of the text it belongs to
};

struct Parsed {
  std::vector<Insn> insns;
  std::map<std::string, int> labels;  // label -> index of the instruction that follows it
  std::vector<int> label_lines;       // per instruction index with a label before it: its line
  std::vector<bool> frame_pointer;    // per function: rbp / x29 is set up from the stack pointer
};

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Operands split at top-level commas (not inside (...) or [...] or {...}).
std::vector<std::string> split_operands(const std::string& ops) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (const char c : ops) {
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!trim(cur).empty()) out.push_back(trim(cur));
  return out;
}

bool is_label_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '$';
}

Parsed parse(const std::string& text, AsmArch arch) {
  Parsed p;
  int function = 0, source_line = 0;
  bool any_cfi = text.find(".cfi_startproc") != std::string::npos;
  p.frame_pointer.push_back(false);
  size_t start = 0;
  for (int line_no = 1; start <= text.size(); ++line_no) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    // Comments: '#' in AT&T syntax ('$' marks immediates there), '//' on aarch64 ('#' marks them).
    const size_t comment = arch == AsmArch::X86_64 ? line.find('#') : line.find("//");
    if (comment != std::string::npos) line.resize(comment);
    line = trim(line);
    if (line.empty()) continue;
    // Labels, possibly followed by an instruction on the same line.
    size_t k = 0;
    while (k < line.size() && is_label_char(line[k])) ++k;
    if (k > 0 && k < line.size() && line[k] == ':') {
      const std::string name = line.substr(0, k);
      p.labels[name] = static_cast<int>(p.insns.size());
      // A global symbol starts a function where the text has no CFI directives.
      if (!any_cfi && name[0] != '.' && name[0] != 'L') {
        source_line = 0;
        ++function;
        p.frame_pointer.push_back(false);
      }
      line = trim(line.substr(k + 1));
      if (line.empty()) continue;
    }
    if (line[0] == '.') {
      if (line.rfind(".loc", 0) == 0 && line.size() > 4 && std::isspace(static_cast<unsigned char>(line[4]))) {
        // `.loc FILE LINE [COLUMN] ...`: lines of file 1 (the compiled source) only.
        std::istringstream in(line.substr(4));
        int file = -1, src = 0;
        in >> file >> src;
        source_line = file == 1 ? src : 0;
      }
      if (line.rfind(".cfi_startproc", 0) == 0) {
        source_line = 0;
        if (function > 0 || !p.insns.empty()) {
          ++function;
          p.frame_pointer.push_back(false);
        }
      }
      continue;  // other directives
    }
    Insn in;
    const size_t sp = line.find_first_of(" \t");
    in.mnemonic = lower(line.substr(0, sp));
    in.operands = sp == std::string::npos ? "" : trim(line.substr(sp));
    in.line = line_no;
    in.source_line = source_line;
    in.function = function;
    const std::string ops = lower(in.operands);
    if (arch == AsmArch::X86_64 ? (in.mnemonic.rfind("mov", 0) == 0 && ops == "%rsp, %rbp")
                                : ((in.mnemonic == "mov" && ops == "x29, sp") ||
                                   (in.mnemonic == "add" && ops.rfind("x29, sp", 0) == 0)))
      p.frame_pointer[function] = true;
    p.insns.push_back(std::move(in));
  }
  return p;
}

// The label a branch goes to, or "" when the instruction is not a direct branch.
std::string branch_target(const Insn& in, AsmArch arch) {
  const std::string& m = in.mnemonic;
  bool branch = false;
  if (arch == AsmArch::X86_64) {
    branch = m[0] == 'j';
  } else {
    static const std::regex kBranch(
        "b|b\\.[a-z]+|cbn?z|tbn?z|b(eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le)");
    branch = std::regex_match(m, kBranch);
  }
  if (!branch) return "";
  const std::vector<std::string> ops = split_operands(in.operands);
  return ops.empty() ? "" : ops.back();
}

struct Range {
  int head = 0, back = 0;  // instruction indices: first of the body, the back-edge branch
  int size() const { return back - head + 1; }
  bool contains(const Range& o) const { return head <= o.head && o.back <= back; }
};

std::vector<Range> natural_loops(const Parsed& p, AsmArch arch) {
  std::vector<std::pair<int, int>> edges;  // branch index -> target instruction index
  for (int k = 0; k < static_cast<int>(p.insns.size()); ++k) {
    const std::string t = branch_target(p.insns[k], arch);
    auto it = t.empty() ? p.labels.end() : p.labels.find(t);
    if (it != p.labels.end()) edges.emplace_back(k, it->second);
  }
  std::vector<Range> loops;
  for (const auto& [from, to] : edges) {
    if (to > from || p.insns[to].function != p.insns[from].function) continue;
    const Range r{to, from};
    // Entered only through its header: no branch from outside lands strictly inside.
    const bool single_entry = std::none_of(edges.begin(), edges.end(), [&](const auto& e) {
      return (e.first < r.head || e.first > r.back) && e.second > r.head && e.second <= r.back;
    });
    if (single_entry) loops.push_back(r);
  }
  return loops;
}

bool is_fma(const std::string& m) {
  return m.find("madd") != std::string::npos || m.find("msub") != std::string::npos ||
         m.find("mla") != std::string::npos || m.find("mls") != std::string::npos ||
         m == "fmad" || m == "fmsb" || m == "fnmad" || m == "fnmsb";
}

// Counts one instruction into the loop's totals.
void count(const Insn& in, AsmArch arch, bool frame_pointer, HotLoop& h) {
  ++h.instructions;
  const std::string& m = in.mnemonic;
  if (arch == AsmArch::X86_64 ? m.rfind("call", 0) == 0 : (m == "bl" || m == "blr")) ++h.calls;
  const std::string ops = lower(in.operands);
  const std::vector<std::string> operands = split_operands(ops);
  if (arch == AsmArch::X86_64) {
    static const std::regex kFp(
        "v?(add|sub|mul|div|min|max|sqrt|rcp14|rcp28|rcp|rsqrt14|rsqrt28|rsqrt|rndscale|round|"
        "scalef|getexp|getmant|range|reduce|fn?madd[0-9]*|fn?msub[0-9]*|fmaddsub[0-9]*|"
        "fmsubadd[0-9]*)(p|s)(s|d|h)");
    std::smatch mt;
    if (std::regex_match(m, mt, kFp)) {
      (mt[2] == "p" ? h.fp_vector : h.fp_scalar) += 1;
      if (is_fma(m)) ++h.fma;
      if (is_fma(m) || mt[1] == "mul") (mt[2] == "p" ? h.mul_vector : h.mul_scalar) += 1;
    }
    if (m.rfind("lea", 0) == 0 || m.rfind("prefetch", 0) == 0 || m.rfind("nop", 0) == 0) return;
    for (size_t k = 0; k < operands.size(); ++k) {
      const std::string& o = operands[k];
      const bool stack = o.find("(%rsp") != std::string::npos ||
                         (frame_pointer && o.find("(%rbp") != std::string::npos);
      if (!stack) continue;
      // AT&T: the destination is the last operand; compares only read it.
      const bool reads_only = m.rfind("cmp", 0) == 0 || m.rfind("test", 0) == 0 ||
                              m.find("comis") != std::string::npos;
      (k + 1 == operands.size() && operands.size() > 1 && !reads_only ? h.stack_stores
                                                                       : h.stack_loads) += 1;
      break;
    }
  } else {
    static const std::regex kFp(
        "fn?(add|sub|mul|div|max|min|maxnm|minnm|sqrt|mulx|abd|mla|mls|madd|msub|mad|msb|"
        "recpe|recps|rsqrte|rsqrts|scale|rint[a-z])");
    if (std::regex_match(m, kFp)) {
      static const std::regex kVectorReg("(^|[^a-z0-9])(v|z)[0-9]+\\.");
      const bool vec = std::regex_search(ops, kVectorReg);
      (vec ? h.fp_vector : h.fp_scalar) += 1;
      if (is_fma(m)) ++h.fma;
      if (is_fma(m) || m == "fmul" || m == "fmulx") (vec ? h.mul_vector : h.mul_scalar) += 1;
    }
    const bool load = m.rfind("ld", 0) == 0, store = m.rfind("st", 0) == 0;
    if (!load && !store) return;
    const bool stack = ops.find("[sp") != std::string::npos ||
                       (frame_pointer && ops.find("[x29") != std::string::npos);
    if (stack) (store ? h.stack_stores : h.stack_loads) += 1;
  }
}

// The instructions that may run after `k` (same function): a branch's target, and the next one
// unless the branch is unconditional; nothing after a return or an indirect jump.
std::vector<int> successors(const Parsed& p, int k, AsmArch arch) {
  const Insn& in = p.insns[k];
  const std::string& m = in.mnemonic;
  const bool x86 = arch == AsmArch::X86_64;
  if (m == "ret" || m == "retq" || (x86 ? m == "jmp" && in.operands[0] == '*' : m == "br"))
    return {};
  std::vector<int> out;
  const std::string t = branch_target(in, arch);
  auto it = t.empty() ? p.labels.end() : p.labels.find(t);
  if (it != p.labels.end() && p.insns[it->second].function == in.function) out.push_back(it->second);
  const bool always = x86 ? m == "jmp" : m == "b";
  if (!always && k + 1 < static_cast<int>(p.insns.size()) && p.insns[k + 1].function == in.function)
    out.push_back(k + 1);
  return out;
}

// The fewest instructions from `from` to `to` along the control flow, both included (empty when
// `to` cannot be reached).
std::vector<int> shortest_path(const Parsed& p, int from, int to, AsmArch arch) {
  std::vector<int> parent(p.insns.size(), -2);
  std::vector<int> queue{from};
  parent[from] = -1;
  for (size_t q = 0; q < queue.size() && parent[to] == -2; ++q)
    for (const int s : successors(p, queue[q], arch))
      if (parent[s] == -2) {
        parent[s] = queue[q];
        queue.push_back(s);
      }
  std::vector<int> path;
  if (parent[to] == -2) return path;
  for (int k = to; k != -1; k = parent[k]) path.push_back(k);
  std::reverse(path.begin(), path.end());
  return path;
}

}  // namespace

std::vector<HotLoop> branch_cycles(const std::string& text, AsmArch arch,
                                   const std::vector<int>& source_lines) {
  const Parsed p = parse(text, arch);
  std::vector<HotLoop> out;
  for (int k = 0; k < static_cast<int>(p.insns.size()); ++k) {
    const Insn& in = p.insns[k];
    if (std::find(source_lines.begin(), source_lines.end(), in.source_line) == source_lines.end())
      continue;
    const std::string t = branch_target(in, arch);
    auto it = t.empty() ? p.labels.end() : p.labels.find(t);
    // A loop closes backwards; a forward branch of the loop's line leaves it.
    if (it == p.labels.end() || it->second > k || p.insns[it->second].function != in.function)
      continue;
    const std::vector<int> path = shortest_path(p, it->second, k, arch);
    if (path.empty()) continue;
    HotLoop h;
    h.first_line = p.insns[it->second].line;
    h.last_line = in.line;
    h.source_line = in.source_line;
    const bool fp = p.frame_pointer[in.function];
    for (const int i : path) count(p.insns[i], arch, fp, h);
    out.push_back(h);
  }
  return out;
}

AsmArch guess_asm_arch(const std::string& text) {
  static const std::regex kX86Reg("%(r[a-z0-9]+|e[a-z]{2}|[xyz]mm[0-9]+)");
  return std::regex_search(text, kX86Reg) ? AsmArch::X86_64 : AsmArch::AArch64;
}

std::vector<HotLoop> all_loops(const std::string& text, AsmArch arch) {
  const Parsed p = parse(text, arch);
  const std::vector<Range> loops = natural_loops(p, arch);
  std::vector<HotLoop> out;
  for (const Range& r : loops) {
    HotLoop h;
    h.nested = static_cast<int>(std::count_if(loops.begin(), loops.end(), [&](const Range& o) {
      return r.contains(o) && !(o.head == r.head && o.back == r.back);
    }));
    h.first_line = p.insns[r.head].line;
    h.last_line = p.insns[r.back].line;
    h.source_line = p.insns[r.back].source_line;
    const bool fp = p.frame_pointer[p.insns[r.head].function];
    for (int k = r.head; k <= r.back; ++k) count(p.insns[k], arch, fp, h);
    out.push_back(h);
  }
  std::sort(out.begin(), out.end(),
            [](const HotLoop& a, const HotLoop& b) { return a.first_line < b.first_line; });
  return out;
}

std::vector<HotLoop> innermost_loops(const std::string& text, AsmArch arch) {
  std::vector<HotLoop> out = all_loops(text, arch);
  out.erase(std::remove_if(out.begin(), out.end(), [](const HotLoop& h) { return h.nested > 0; }),
            out.end());
  return out;
}

HotLoop find_hot_loop(const std::string& text, AsmArch arch) {
  const std::vector<HotLoop> loops = innermost_loops(text, arch);
  if (loops.empty()) throw std::runtime_error("no loop found in the assembly");
  return *std::max_element(loops.begin(), loops.end(), [](const HotLoop& a, const HotLoop& b) {
    return a.instructions < b.instructions;
  });
}

double bound_pairs_per_s(double fp_ops_per_pair, double mul_ops_per_pair, double fma_peak,
                         double fp_peak, bool has_fma) {
  const double fp_time = fp_ops_per_pair / std::max(fma_peak, fp_peak);
  const double mul_time = has_fma ? mul_ops_per_pair / fma_peak : 0.0;
  return 1.0 / std::max(fp_time, mul_time);
}

}  // namespace tessel::cli
