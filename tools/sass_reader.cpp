// SASS listings and ptxas reports read for `tessel bench sass`: functions, loops, the hot loop of a
// generated CUDA kernel and what one of its iterations issues.
#include "sass_reader.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace tessel::cli {

namespace {

constexpr const char* kClassNames[kSassClasses] = {"ffma", "fadd", "fmul",  "fp32_other", "fp64",
                                                   "mufu", "lds",  "local", "other"};

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// The opcode without its modifiers: "MUFU.EX2" -> "MUFU".
std::string base_opcode(const std::string& opcode) { return opcode.substr(0, opcode.find('.')); }

bool is_branch(const SassInsn& in) { return base_opcode(in.opcode) == "BRA" && in.target >= 0; }

// Per function: its instructions, and its labels with the text of each branch target.
struct RawFunction {
  SassFunction f;
  std::map<std::string, int64_t> labels;  // label -> address of the next instruction
  std::vector<std::string> targets;       // per instruction: a branch's label or address text
};

// Fills each branch's target address from its label (nvdisasm) or hexadecimal address (cuobjdump).
void resolve(RawFunction& raw) {
  for (size_t k = 0; k < raw.f.insns.size(); ++k) {
    SassInsn& in = raw.f.insns[k];
    const std::string& t = raw.targets[k];
    if (base_opcode(in.opcode) != "BRA" || t.empty()) continue;
    if (auto it = raw.labels.find(t); it != raw.labels.end())
      in.target = it->second;
    else if (starts_with(t, "0x"))
      in.target = std::stoll(t, nullptr, 16);
  }
}

int index_of_address(const SassFunction& f, int64_t address) {
  const auto it = std::lower_bound(f.insns.begin(), f.insns.end(), address,
                                   [](const SassInsn& in, int64_t a) { return in.address < a; });
  return it != f.insns.end() && it->address == address ? static_cast<int>(it - f.insns.begin())
                                                       : -1;
}

void count_into(const SassInsn& in, SassCounts& c) {
  ++c.by_class[static_cast<size_t>(sass_class(in.opcode))];
  if (starts_with(in.opcode, "MUFU.EX2")) ++c.mufu_ex2;
}

// The instruction's target index when it is a branch, -1 otherwise.
int target_index(const SassFunction& f, int k) {
  return is_branch(f.insns[k]) ? index_of_address(f, f.insns[k].target) : -1;
}

SassCounts count_range(const SassFunction& f, int from, int to) {
  SassCounts c;
  for (int k = from; k <= to; ++k) count_into(f.insns[k], c);
  return c;
}

// One pass from head to back that takes every forward branch landing inside the range.
SassCounts count_path(const SassFunction& f, int head, int back) {
  SassCounts c;
  for (int k = head; k <= back;) {
    count_into(f.insns[k], c);
    const int t = k < back ? target_index(f, k) : -1;
    k = t > k && t <= back ? t : k + 1;
  }
  return c;
}

bool has_opcode(const SassFunction& f, int from, int to, const char* base) {
  for (int k = from; k <= to; ++k)
    if (base_opcode(f.insns[k].opcode) == base) return true;
  return false;
}

}  // namespace

const char* sass_class_name(SassClass c) { return kClassNames[static_cast<size_t>(c)]; }

SassClass sass_class(const std::string& opcode) {
  const std::string b = base_opcode(opcode);
  if (b == "FFMA" || b == "FFMA32I") return SassClass::Ffma;
  if (b == "FADD" || b == "FADD32I") return SassClass::Fadd;
  if (b == "FMUL" || b == "FMUL32I") return SassClass::Fmul;
  if (b == "FSETP" || b == "FSET" || b == "FMNMX" || b == "FSEL" || b == "FCHK" || b == "FSWZADD")
    return SassClass::Fp32Other;
  if (b[0] == 'D' || b == "F2F" || b == "F2I" || b == "I2F" || b == "F2IP" || b == "I2FP" ||
      b == "FRND")
    return b == "DEPBAR" ? SassClass::Other : SassClass::Fp64;
  if (b == "MUFU") return SassClass::Mufu;
  if (b == "LDS" || b == "LDSM") return SassClass::Lds;
  if (b == "LDL" || b == "STL") return SassClass::Local;
  return SassClass::Other;
}

int SassCounts::total() const {
  int t = 0;
  for (const int v : by_class) t += v;
  return t;
}

void SassCounts::add(const SassCounts& o) {
  for (size_t k = 0; k < kSassClasses; ++k) by_class[k] += o.by_class[k];
  mufu_ex2 += o.mufu_ex2;
}

std::vector<SassFunction> parse_sass(const std::string& text) {
  // `/*0d70*/  @!P0 LDS.128 R8, [UR23] ;` (cuobjdump adds the encoding after the semicolon).
  static const std::regex kInsn(
      R"(^\s*/\*([0-9a-fA-F]+)\*/\s*(@!?U?P[0-9T]+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);)");
  static const std::regex kFunction(R"(^\s*(?:Function\s*:\s*(\S+)|\.text\.([A-Za-z_$][\w$]*):))");
  static const std::regex kLabel(R"(^\s*(\.L\w+):)");
  static const std::regex kTarget(R"(`\((\.L\w+)\)|(0x[0-9a-fA-F]+)\s*$)");
  std::vector<RawFunction> raw;
  std::vector<std::string> pending;  // labels seen before their instruction
  std::istringstream in(text);
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_search(line, m, kFunction)) {
      raw.emplace_back();
      raw.back().f.name = m[1].matched ? m[1].str() : m[2].str();
      pending.clear();
    } else if (std::regex_search(line, m, kLabel)) {
      pending.push_back(m[1].str());
    } else if (std::regex_search(line, m, kInsn)) {
      if (raw.empty()) raw.emplace_back();  // a listing without a function header
      SassInsn insn;
      insn.address = std::stoll(m[1].str(), nullptr, 16);
      insn.predicate = m[2].matched ? m[2].str().substr(0, m[2].str().find_first_of(" \t")) : "";
      insn.opcode = m[3].str();
      insn.operands = m[4].str();
      while (!insn.operands.empty() &&
             std::isspace(static_cast<unsigned char>(insn.operands.back())))
        insn.operands.pop_back();
      std::smatch t;
      std::string target;
      if (std::regex_search(insn.operands, t, kTarget))
        target = t[1].matched ? t[1].str() : t[2].str();
      RawFunction& r = raw.back();
      for (const std::string& l : pending) r.labels[l] = insn.address;
      pending.clear();
      r.f.insns.push_back(std::move(insn));
      r.targets.push_back(target);
    }
  }
  std::vector<SassFunction> out;
  for (RawFunction& r : raw) {
    resolve(r);
    if (!r.f.insns.empty()) out.push_back(std::move(r.f));
  }
  return out;
}

const SassFunction& sass_function(const std::vector<SassFunction>& fs, const std::string& name) {
  std::string names;
  for (const SassFunction& f : fs) {
    if (f.name == name) return f;
    names += (names.empty() ? "" : ", ") + (f.name.empty() ? std::string("(unnamed)") : f.name);
  }
  throw std::runtime_error("the SASS listing has no function " + name +
                           " (it has: " + (names.empty() ? std::string("none") : names) + ")");
}

std::vector<SassLoop> sass_loops(const SassFunction& f) {
  std::vector<SassLoop> loops;
  for (int k = 0; k < static_cast<int>(f.insns.size()); ++k) {
    const int t = target_index(f, k);
    if (t < 0 || t > k) continue;
    SassLoop l;
    l.head = t;
    l.back = k;
    l.all = count_range(f, t, k);
    l.path = count_path(f, t, k);
    loops.push_back(l);
  }
  for (SassLoop& l : loops)
    l.nested = static_cast<int>(std::count_if(loops.begin(), loops.end(), [&](const SassLoop& o) {
      return l.head <= o.head && o.back <= l.back && o.size() < l.size();
    }));
  return loops;
}

SassHotLoop find_sass_hot_loop(const SassFunction& f) {
  const std::vector<SassLoop> loops = sass_loops(f);
  auto reads_tile = [&](const SassLoop& l) {
    return l.path[SassClass::Lds] > 0 && !has_opcode(f, l.head, l.back, "BAR");
  };
  auto inside = [](const SassLoop& in, const SassLoop& out) {
    return out.head <= in.head && in.back <= out.back && in.size() < out.size();
  };
  const SassLoop* best = nullptr;
  for (const SassLoop& l : loops) {
    if (!reads_tile(l)) continue;
    const bool innermost = std::none_of(loops.begin(), loops.end(), [&](const SassLoop& o) {
      return reads_tile(o) && inside(o, l);
    });
    if (innermost && (!best || l.path[SassClass::Lds] > best->path[SassClass::Lds])) best = &l;
  }
  if (!best)
    throw std::runtime_error("no loop reading shared memory (LDS) in " +
                             (f.name.empty() ? std::string("the listing") : f.name));
  SassHotLoop h;
  h.loop = *best;
  h.lds_per_iter = best->path[SassClass::Lds];
  const SassLoop* tile = nullptr;
  for (const SassLoop& l : loops)
    if (inside(*best, l) && (!tile || l.size() < tile->size())) tile = &l;
  if (!tile) return h;
  h.has_tile = true;
  // Instructions of the tile loop that belong to a loop inside it, or to a block that a forward
  // branch skips and that reads shared memory without holding the hot loop (the remainder of
  // the unrolled inner loop, which a full tile of an even count does not run).
  std::vector<bool> skip(f.insns.size(), false);
  for (const SassLoop& l : loops)
    if (inside(l, *tile)) {
      for (int k = l.head; k <= l.back; ++k) skip[k] = true;
      int sts = 0;
      for (int k = l.head; k <= l.back; ++k) sts += base_opcode(f.insns[k].opcode) == "STS";
      if (&l != best && sts > h.copy_sts) h.copy = l.all, h.copy_sts = sts;
    }
  for (int k = tile->head; k < tile->back; ++k) {
    const int t = target_index(f, k);
    if (t <= k + 1 || t > tile->back || f.insns[k].predicate.empty()) continue;
    const bool holds_hot = k < best->head && best->back < t;
    if (!holds_hot && best->back < k && has_opcode(f, k + 1, t - 1, "LDS"))
      for (int q = k + 1; q < t; ++q) skip[q] = true;
  }
  for (int k = tile->head; k <= tile->back; ++k)
    if (!skip[k]) count_into(f.insns[k], h.tile);
  return h;
}

PtxasInfo parse_ptxas_info(const std::string& report, const std::string& function) {
  // ptxas -v: "Compiling entry function 'NAME'", then "N bytes stack frame, N bytes spill stores,
  // N bytes spill loads" and "Used N registers" (in that order) until the next function.
  static const std::regex kFrame(
      R"(([0-9]+) bytes stack frame, ([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads)");
  static const std::regex kUsed(R"(Used ([0-9]+) registers)");
  static const std::regex kEntry(R"(Compiling entry function '([^']+)')");
  PtxasInfo info;
  bool in = false;
  std::istringstream s(report);
  std::smatch m;
  for (std::string line; std::getline(s, line);) {
    if (std::regex_search(line, m, kEntry)) in = m[1].str() == function;
    if (!in) continue;
    if (std::regex_search(line, m, kFrame)) {
      info.stack_frame = std::stoll(m[1].str());
      info.spill_stores = std::stoll(m[2].str());
      info.spill_loads = std::stoll(m[3].str());
    } else if (std::regex_search(line, m, kUsed)) {
      info.registers = std::stoi(m[1].str());
    }
  }
  if (info.registers < 0)
    throw std::runtime_error("the ptxas report has no register count for " + function);
  return info;
}

double sm90_occupancy(int registers, int threads, int64_t shared_bytes) {
  constexpr int kRegsPerSm = 65536, kThreadsPerSm = 2048, kBlocksPerSm = 32, kWarpsPerSm = 64;
  constexpr int64_t kSharedPerSm = 228 * 1024, kSharedReserved = 1024;
  if (threads <= 0 || registers <= 0) return 0;
  const int warps = (threads + 31) / 32;
  const int regs_per_warp = (registers * 32 + 255) / 256 * 256;
  const int by_regs = kRegsPerSm / regs_per_warp / warps;
  const int64_t smem = (shared_bytes + 127) / 128 * 128 + kSharedReserved;
  const int64_t by_smem = kSharedPerSm / smem;
  const int blocks = static_cast<int>(std::min<int64_t>(
      {by_regs, by_smem, kBlocksPerSm, static_cast<int64_t>(kThreadsPerSm / (warps * 32))}));
  return static_cast<double>(blocks * warps) / kWarpsPerSm;
}

}  // namespace tessel::cli
