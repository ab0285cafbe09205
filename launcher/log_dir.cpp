#include "launcher/log_dir.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/random.hpp"
#include "common/remove_tree.hpp"
#include "launcher/config_summary.hpp"

namespace ddprun {
namespace {

namespace fs = std::filesystem;

// A scratch directory goes to RAM unless TMPDIR says where.
fs::path temp_base(bool scratch) {
  const char* tmpdir = std::getenv("TMPDIR");
  if (scratch && (tmpdir == nullptr || *tmpdir == '\0') &&
      access("/dev/shm", W_OK | X_OK) == 0) {
    return "/dev/shm";
  }
  return fs::temp_directory_path();
}

}  // namespace

LogDir::LogDir(const LaunchConfig& config) {
  fs::path base = config.log_dir;
  if (base.empty()) {
    // A job that serves FileTimer requests may write stacks when a timer expires.
    const char* file_timer = std::getenv("TORCHELASTIC_ENABLE_FILE_TIMER");
    const bool scratch =
        !writes_log_files(config) && !(file_timer != nullptr && std::string(file_timer) == "1");
    std::string tmpl = (temp_base(scratch) / "torchelastic_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) {
      throw Error(fmt::format("cannot create a log directory {}: {}", tmpl,
                              errno_message(errno)));
    }
    base = tmpl;
    if (scratch) temp_ = base;
  }
  const auto dir = base / fmt::format("{}_{}", config.rdzv_id, random_hex(3));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!ec && access(dir.c_str(), W_OK | X_OK) != 0) ec.assign(errno, std::generic_category());
  if (ec) {
    remove_temp();
    throw ConfigError(
        fmt::format("--log-dir={}: cannot create a writable directory {} in it: {}",
                    config.log_dir.empty() ? base.string() : config.log_dir, dir.string(),
                    ec.message()));
  }
  path_ = dir.string();
}

LogDir::~LogDir() { remove_temp(); }

void LogDir::remove_temp() {
  if (temp_.empty()) return;
  // The run's, the attempts' and the workers' directories and their error files; anything
  // deeper (a worker's own files) goes through remove_all.
  if (remove_tree(AT_FDCWD, temp_.c_str(), 6)) return;
  std::error_code ec;
  fs::remove_all(temp_, ec);
  if (ec) {
    spdlog::warn("could not remove the temp directory {}: {}", temp_.string(), ec.message());
  }
}

}  // namespace ddprun
