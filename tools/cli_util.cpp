// Small utilities of the `tessel` command: sizes, option values, processes and JSON lines.
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "cli.hpp"

extern char** environ;

namespace tessel::cli {

double peak_rss_mib() {
  struct rusage ru;
  if (::getrusage(RUSAGE_SELF, &ru) != 0) return NAN;
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux reports KiB
}

namespace {

std::string format_scaled(double v, double base, const char* const* units, int n_units) {
  int u = 0;
  while (std::fabs(v) >= base && u + 1 < n_units) v /= base, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace

std::string format_bytes(double bytes) {
  static const char* const kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  return format_scaled(bytes, 1024.0, kUnits, 5);
}

std::string format_si_bytes(double bytes) {
  static const char* const kUnits[] = {"bytes", "kB", "MB", "GB", "TB", "PB"};
  return format_scaled(bytes, 1000.0, kUnits, 6);
}

std::string format_seconds(double s) {
  char buf[64];
  if (s >= 1.0)
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  else if (s >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f us", s * 1e6);
  return buf;
}

const char* env_or_null(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int64_t parse_count(const std::string& option, const std::string& value, int64_t min_value) {
  int64_t n = 0;
  // Accept 1e5-style values too: sizes are usually written that way.
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || end != value.data() + value.size()) {
    char* e = nullptr;
    const double d = std::strtod(value.c_str(), &e);
    if (value.empty() || *e != '\0' || !(d >= 0) || d > 9e15 || d != std::floor(d))
      throw UsageError(option + " expects a whole number, got '" + value + "'");
    n = static_cast<int64_t>(d);
  }
  if (n < min_value)
    throw UsageError(option + " must be at least " + std::to_string(min_value) + ", got " + value);
  return n;
}

std::vector<int64_t> parse_count_list(const std::string& option, const std::string& value,
                                      int64_t min) {
  std::vector<int64_t> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = value.find(',', start);
    out.push_back(parse_count(option, value.substr(start, comma - start), min));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

TempDir::TempDir(const std::string& prefix) {
  const char* tmp = env_or_null("TMPDIR");
  std::string tmpl = std::string(tmp ? tmp : "/tmp") + "/" + prefix + "XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data()))
    throw std::runtime_error("cannot create a temporary folder from " + tmpl + ": " +
                             std::strerror(errno) + " (set TMPDIR to a writable folder)");
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;  // best effort: a leftover temporary folder is not worth a crash
  std::filesystem::remove_all(path_, ec);
}

int64_t folder_bytes(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int64_t total = 0;
  fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code ec2;
    if (it->is_regular_file(ec2)) total += static_cast<int64_t>(it->file_size(ec2));
  }
  return total;
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

int run_process(const std::vector<std::string>& argv, std::string* out, bool quiet,
                bool merge_stderr) {
  std::vector<char*> cargs;
  for (const std::string& a : argv) cargs.push_back(const_cast<char*>(a.c_str()));
  cargs.push_back(nullptr);
  int pipe_fd[2] = {-1, -1};
  if (out && ::pipe2(pipe_fd, O_CLOEXEC) != 0) return -1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (out) posix_spawn_file_actions_adddup2(&actions, pipe_fd[1], STDOUT_FILENO);
  if (out && merge_stderr) {
    posix_spawn_file_actions_adddup2(&actions, pipe_fd[1], STDERR_FILENO);
  } else if (quiet) {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    if (!out) posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  }
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, cargs[0], &actions, nullptr, cargs.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (out) ::close(pipe_fd[1]);
  if (rc != 0) {
    if (out) ::close(pipe_fd[0]);
    return -1;
  }
  if (out) {
    char buf[4096];
    for (;;) {
      const ssize_t got = ::read(pipe_fd[0], buf, sizeof buf);
      if (got > 0)
        out->append(buf, static_cast<size_t>(got));
      else if (got == 0 || errno != EINTR)
        break;
    }
    ::close(pipe_fd[0]);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  // posix_spawnp reports a missing program as exit code 127 from the child.
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void JsonLine::key(const std::string& k) {
  if (!body_.empty()) body_ += ", ";
  body_ += json_quote(k) + ": ";
}

JsonLine& JsonLine::add(const std::string& k, const std::string& value) {
  key(k);
  body_ += json_quote(value);
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, double value) {
  key(k);
  if (!std::isfinite(value)) {
    body_ += "null";  // JSON has no NaN or infinity
  } else {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", value);
    body_ += buf;
  }
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, int64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}

std::optional<double> json_number_field(const std::string& line, const std::string& key) {
  // Enough for the flat lines bench/pykeops_case.py prints; not a general JSON parser.
  const std::string quoted = json_quote(key);
  size_t pos = line.find(quoted);
  if (pos == std::string::npos) return std::nullopt;
  pos = line.find(':', pos + quoted.size());
  if (pos == std::string::npos) return std::nullopt;
  const char* start = line.c_str() + pos + 1;
  char* end = nullptr;
  const double v = std::strtod(start, &end);
  if (end == start) return std::nullopt;
  return v;
}

}  // namespace tessel::cli
