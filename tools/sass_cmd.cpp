// `tessel bench sass`: the CUDA kernels of the bench cases compiled for sm_90 as the CUDA backend
// builds them (NVRTC to PTX, then ptxas) and disassembled, with no GPU: registers, spills,
// occupancy, and the instructions per (i, j) pair of the hot loop by class.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/nvrtc.hpp"
#include "cli.hpp"
#include "codegen/cuda_codegen.hpp"
#include "kernel_probe.hpp"
#include "sass_reader.hpp"
#include "tessel/tessel.hpp"

#ifndef TESSEL_SOURCE_DIR
#define TESSEL_SOURCE_DIR ""
#endif

namespace tessel::cli {

namespace {

constexpr const char* kSassUsage = R"(usage: tessel bench sass [CASE...] [options]

Compiles the CUDA kernels of the cases (default: gauss-sum gauss-grad lse argkmin) for sm_90 as
the CUDA backend does (its source and plan for N = M = n, NVRTC to PTX for compute_90, then
ptxas -arch=sm_90 -v, as the driver's JIT would), disassembles them (nvdisasm, else
cuobjdump -sass) and prints one JSON line per kernel: registers, spill bytes, theoretical
occupancy on sm_90, and instructions per (i, j) pair by class. No GPU is needed.

The count. The hot loop is the innermost loop that reads the shared-memory tile (LDS) with no
barrier in it; one iteration runs rows_per_thread outer rows against j_unroll inner rows
(j_unroll = its LDS / the 16-byte vectors of one inner row), taking every forward branch inside
it (a K-best insertion is skipped, as at large M, where it almost never runs). The tile loop
around it adds its own instructions and the copy into shared memory once per tile of
block x rows_per_thread pairs. instructions_per_pair is what ncu reports as executed warp
instructions / (pairs / 32) when the hot loop dominates (n = 1e6). predicted_h200_s =
instructions_per_pair x 0.0299 s (full issue on 132 SMs at 1.98 GHz for 1e12 pairs) / 0.775 (the
issue rate ncu measured) x n^2 / 1e12.

options:
  --n N          the size the plan is made for (default 1000000; only the grid depends on it)
  --tools DIR    the folder holding ptxas and nvdisasm or cuobjdump (default: $TESSEL_CUDA_TOOLS,
                 the wheels scripts/setup.sh --cuda-tools installs in .cuda-tools, PATH,
                 $CUDA_HOME/bin, /usr/local/cuda/bin); NVRTC: $TESSEL_NVRTC, else the wheels'
  --keep DIR     write each kernel's .cu, .ptx, .cubin, .sass and ptxas report into DIR

Without ptxas, a disassembler or NVRTC it prints why on stderr and exits 0 with no line.
)";

constexpr double kFullIssueSeconds = 0.0299;  // per instruction per pair at 1e12 pairs, H200
constexpr double kIssueRate = 0.775;          // ncu's issue-slot use of the Gaussian sum

struct SassOptions {
  std::vector<std::string> cases;
  int64_t n = 1000000;
  std::string tools, keep;
};

SassOptions parse_sass_options(const Args& args) {
  SassOptions o;
  for (size_t k = 0; k < args.size(); ++k) {
    const std::string& a = args[k];
    auto take = [&]() -> std::string {
      if (k + 1 >= args.size()) throw UsageError("bench sass: " + a + " needs a value");
      return args[++k];
    };
    if (a == "--n")
      o.n = parse_count(a, take(), 1);
    else if (a == "--tools")
      o.tools = take();
    else if (a == "--keep")
      o.keep = take();
    else if (a.rfind("-", 0) == 0)
      throw UsageError("bench sass: unknown option '" + a + "'");
    else if (bench::is_case(a))
      o.cases.push_back(a);
    else
      throw UsageError("bench sass: unknown case '" + a + "'");
  }
  if (o.cases.empty()) o.cases = {"gauss-sum", "gauss-grad", "lse", "argkmin"};
  return o;
}

// The folders searched for the NVIDIA tools, in order of preference.
std::vector<std::string> tool_dirs(const SassOptions& o) {
  std::vector<std::string> dirs;
  if (!o.tools.empty()) return {o.tools};
  if (const char* v = env_or_null("TESSEL_CUDA_TOOLS")) dirs.push_back(v);
  const std::string wheels = std::string(TESSEL_SOURCE_DIR) + "/.cuda-tools/nvidia/";
  dirs.push_back(wheels + "cu13/bin");
  dirs.push_back(wheels + "cu12/bin");
  if (const char* path = env_or_null("PATH")) {
    std::istringstream s(path);
    for (std::string d; std::getline(s, d, ':');)
      if (!d.empty()) dirs.push_back(d);
  }
  for (const char* v : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* d = env_or_null(v)) dirs.push_back(std::string(d) + "/bin");
  dirs.push_back("/usr/local/cuda/bin");
  return dirs;
}

std::string find_tool(const std::vector<std::string>& dirs, const char* name) {
  for (const std::string& d : dirs) {
    const std::string p = d + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

struct Tools {
  std::string ptxas, disasm;
  bool nvdisasm = true;
};

// The tools, or "" after saying on stderr what is missing and how to get it.
std::optional<Tools> locate_tools(const SassOptions& o) {
  const std::vector<std::string> dirs = tool_dirs(o);
  Tools t;
  t.ptxas = find_tool(dirs, "ptxas");
  t.disasm = find_tool(dirs, "nvdisasm");
  if (t.disasm.empty()) {
    t.disasm = find_tool(dirs, "cuobjdump");
    t.nvdisasm = false;
  }
  // NVRTC from the wheels beside the tools, unless TESSEL_NVRTC names one.
  if (!env_or_null("TESSEL_NVRTC") && !t.ptxas.empty()) {
    const std::string bin = t.ptxas.substr(0, t.ptxas.rfind('/'));
    const std::string lib = bin + "/../lib/libnvrtc.so.13";
    if (file_exists(lib)) ::setenv("TESSEL_NVRTC", lib.c_str(), 1);
  }
  std::string missing;
  if (t.ptxas.empty()) missing += ", no ptxas";
  if (t.disasm.empty()) missing += ", no nvdisasm or cuobjdump";
  if (!nvrtc_info().usable) missing += ", no NVRTC (" + nvrtc_info().problem + ")";
  if (missing.empty()) return t;
  std::fprintf(stderr,
               "note: tessel bench sass skipped%s. scripts/setup.sh --cuda-tools installs "
               "NVIDIA's wheels (nvidia-cuda-nvcc, nvidia-cuda-nvrtc, nvidia-cuda-nvdisasm; no GPU "
               "needed) into .cuda-tools; or install the CUDA toolkit, or pass --tools DIR\n",
               missing.c_str());
  return std::nullopt;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out.flush()) detail::fail("bench sass", "cannot write ", path);
}

// One kernel of a case as the CUDA backend would launch it at n x n.
struct CudaBuild {
  std::string reduction;
  CudaKernelPlan plan;
  bool f64 = false;
};

std::vector<CudaBuild> cuda_builds(const std::string& name, int64_t n) {
  std::vector<CudaBuild> out;
  record_problems(bench::make_problem(name, 256, 256, DType::Float32), [&](const Problem& p) {
    CudaBuild b;
    b.f64 = p.dtype == DType::Float64;
    b.plan = plan_cuda_kernel(*p.r, b.f64, n, n, CudaDeviceCaps{});
    if (b.plan.source.empty()) return;
    b.reduction =
        Reduction(std::shared_ptr<const ReductionImpl>(p.r, [](const ReductionImpl*) {})).str();
    out.push_back(std::move(b));
  });
  return out;
}

// Compiles one kernel down to SASS in `stem`.* and returns the listing and ptxas's report.
std::pair<std::string, std::string> compile_to_sass(const CudaBuild& b, const Tools& t,
                                                    const std::string& stem) {
  write_file(stem + ".cu", b.plan.source);
  write_file(stem + ".ptx", nvrtc_compile(b.plan.source, "tessel_kernel.cu", "compute_90"));
  std::string report;
  if (run_process({t.ptxas, "-arch=sm_90", "-v", "-o", stem + ".cubin", stem + ".ptx"}, &report,
                  false, true) != 0)
    detail::fail("bench sass", "ptxas failed on ", stem, ".ptx:\n", report);
  write_file(stem + ".ptxas.txt", report);
  std::string listing;
  const std::vector<std::string> argv =
      t.nvdisasm ? std::vector<std::string>{t.disasm, "-c", stem + ".cubin"}
                 : std::vector<std::string>{t.disasm, "-sass", stem + ".cubin"};
  if (run_process(argv, &listing, false) != 0)
    detail::fail("bench sass", t.disasm, " failed on ", stem, ".cubin");
  write_file(stem + ".sass", listing);
  return {listing, report};
}

// The kernel's JSON line: the hot loop per pair, the tile's share, by class, and the model.
std::string kernel_line(const std::string& name, size_t index, const CudaBuild& b, int64_t n,
                        const PtxasInfo& info, const SassHotLoop& h) {
  const int R = b.plan.rows_per_thread, block = b.plan.block;
  const int inner_dim = b.plan.layout.inner_dim;
  const int width = b.f64 ? 2 : 4;
  const int vectors_per_j = std::max(1, (inner_dim + width - 1) / width);
  if (h.lds_per_iter % vectors_per_j != 0)
    detail::fail("bench sass", name, ": the hot loop has ", h.lds_per_iter,
                 " shared loads, not a multiple of the ", vectors_per_j,
                 " of one inner row (update tools/sass_cmd.cpp)");
  const int unroll = h.lds_per_iter / vectors_per_j;
  const double pairs_per_iter = static_cast<double>(R) * unroll;
  const double pairs_per_tile = static_cast<double>(R) * block;
  // Per full tile each thread copies inner_dim values, copy_sts of them per copy-loop iteration.
  const double copy_iters =
      h.copy_sts > 0 ? std::ceil(static_cast<double>(inner_dim) / h.copy_sts) : 0;
  JsonLine j;
  j.add("case", name).add("kernel", static_cast<int64_t>(index)).add("reduction", b.reduction);
  j.add("arch", "sm_90").add("registers", info.registers);
  j.add("spill_stores_bytes", info.spill_stores).add("spill_loads_bytes", info.spill_loads);
  j.add("stack_frame_bytes", info.stack_frame);
  j.add("block", block).add("rows_per_thread", R);
  j.add("shared_bytes", static_cast<int64_t>(b.plan.shared_bytes));
  j.add("occupancy", sm90_occupancy(info.registers, block, b.plan.shared_bytes));
  j.add("j_unroll", unroll).add("hot_loop_instructions", h.loop.path.total());
  j.add("hot_loop_static_instructions", h.loop.all.total());
  double total = 0;
  std::vector<std::pair<std::string, double>> classes;
  for (size_t c = 0; c < kSassClasses; ++c) {
    const SassClass k = static_cast<SassClass>(c);
    const double v =
        h.loop.path[k] / pairs_per_iter + (h.tile[k] + h.copy[k] * copy_iters) / pairs_per_tile;
    classes.emplace_back(std::string(sass_class_name(k)) + "_per_pair", v);
    total += v;
  }
  const double hot = h.loop.path.total() / pairs_per_iter;
  j.add("instructions_per_pair", total).add("hot_loop_per_pair", hot);
  j.add("tile_per_pair", total - hot);
  for (const auto& [key, v] : classes) j.add(key, v);
  j.add("exp2_per_pair", h.loop.path.mufu_ex2 / pairs_per_iter);
  const double pairs = static_cast<double>(n) * static_cast<double>(n);
  j.add("n", n).add("predicted_h200_s", total * kFullIssueSeconds / kIssueRate * pairs / 1e12);
  return j.str();
}

}  // namespace

int sass_main(const Args& args) {
  for (const std::string& a : args)
    if (a == "-h" || a == "--help") {
      std::fputs(kSassUsage, stdout);
      return 0;
    }
  const SassOptions o = parse_sass_options(args);
  const std::optional<Tools> tools = locate_tools(o);
  if (!tools) return 0;
  std::unique_ptr<TempDir> tmp;
  std::string dir = o.keep;
  if (dir.empty()) {
    tmp = std::make_unique<TempDir>("tessel-sass-");
    dir = tmp->path();
  } else {
    std::filesystem::create_directories(dir);
  }
  std::fprintf(stderr, "note: %s; %s; %s\n", nvrtc_info().path.c_str(), tools->ptxas.c_str(),
               tools->disasm.c_str());
  for (const std::string& name : o.cases) {
    const std::vector<CudaBuild> builds = cuda_builds(name, o.n);
    if (builds.empty())
      std::fprintf(stderr, "note: %s runs no generated CUDA kernel\n", name.c_str());
    for (size_t k = 0; k < builds.size(); ++k) {
      const std::string stem = dir + "/" + name + "-" + std::to_string(k);
      const auto [listing, report] = compile_to_sass(builds[k], *tools, stem);
      try {
        const PtxasInfo info = parse_ptxas_info(report, "tessel_kernel");
        const SassHotLoop h =
            find_sass_hot_loop(sass_function(parse_sass(listing), "tessel_kernel"));
        std::printf("%s\n", kernel_line(name, k, builds[k], o.n, info, h).c_str());
        std::fflush(stdout);
      } catch (const std::runtime_error& e) {
        detail::fail("bench sass", name, " kernel ", k, ": ", e.what(), " (files in ", stem, ".*)");
      }
    }
  }
  return 0;
}

}  // namespace tessel::cli
