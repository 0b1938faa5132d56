// Shared pieces of the `tessel` command: subcommand entry points, usage errors and small utilities.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "timing.hpp"  // now_s, median, SplitMix: bench/, which this command uses

namespace tessel::cli {

// A mistake on the command line (unknown command, bad option): printed with a hint, exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using Args = std::vector<std::string>;

// Subcommands; `args` excludes the subcommand name. Each returns the process exit code.
int doctor_main(const Args& args);
int cache_main(const Args& args);
int bench_main(const Args& args);
int sass_main(const Args& args);  // `tessel bench sass` (sass_cmd.cpp)
int demo_main(const Args& args);

const char* library_version();

// ---- utilities (cli_util.cpp) -------------------------------------------------------------------
double peak_rss_mib();                      // this process's peak resident memory
std::string format_bytes(double bytes);     // binary units: "1.5 MiB"
std::string format_si_bytes(double bytes);  // decimal units: "40.0 GB", as disk makers count
std::string format_seconds(double s);       // "1.23 s", "4.5 ms", "12 us"
const char* env_or_null(const char* name);  // an empty variable counts as unset
int64_t parse_count(const std::string& option, const std::string& value, int64_t min_value);
std::vector<int64_t> parse_count_list(const std::string& option, const std::string& value,
                                      int64_t min = 1);

// Folder and file helpers; a created temporary folder is removed when the guard goes away.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};
int64_t folder_bytes(const std::string& path);  // 0 when absent
bool file_exists(const std::string& path);

// Runs argv (searching PATH) and waits. Standard output goes to *out when given, else it is
// inherited; standard error is inherited unless quiet, or joins *out with merge_stderr (tools
// such as ptxas report there). Returns the exit code, or -1 when the program could not be started
// or did not exit normally.
int run_process(const std::vector<std::string>& argv, std::string* out, bool quiet,
                bool merge_stderr = false);

// One flat JSON object per line, keys in insertion order (scripts read the bench output).
class JsonLine {
 public:
  JsonLine& add(const std::string& key, const std::string& value);
  JsonLine& add(const std::string& key, const char* value) { return add(key, std::string(value)); }
  JsonLine& add(const std::string& key, double value);
  JsonLine& add(const std::string& key, int64_t value);
  JsonLine& add(const std::string& key, int value) { return add(key, static_cast<int64_t>(value)); }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(const std::string& k);
  std::string body_;
};
std::string json_quote(const std::string& s);
// The number stored under `key` in a flat JSON line; nullopt when absent or not a number.
std::optional<double> json_number_field(const std::string& line, const std::string& key);

}  // namespace tessel::cli
