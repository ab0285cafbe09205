#include "launcher/log_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
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

std::string why_not_private(const fs::path& dir) {
  char resolved[PATH_MAX];
  if (realpath(dir.c_str(), resolved) == nullptr) return {};  // reported when it is made
  const uid_t me = geteuid();
  for (fs::path p = resolved;; p = p.parent_path()) {
    struct stat st {};
    if (lstat(p.c_str(), &st) != 0) return {};
    if (st.st_uid != me && st.st_uid != 0) {
      return fmt::format("{} belongs to user {}, who could replace what this job writes there",
                         p.string(), st.st_uid);
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
      return fmt::format("{} can be written by {} and is not sticky (mode {:o}), so they could "
                         "replace what this job writes there",
                         p.string(), (st.st_mode & S_IWOTH) != 0 ? "every user" : "its group",
                         st.st_mode & 07777);
    }
    if (p == p.parent_path()) return {};
  }
}

fs::path make_fresh_dir(const fs::path& base, const std::string& prefix,
                        const std::function<std::string()>& random_suffix) {
  // A name that exists (someone else's directory or link) is never used: mkdir does not follow
  // a link and fails on any existing name, and another name is drawn.
  constexpr int kTries = 16;
  int error = 0;
  for (int i = 0; i < kTries; ++i) {
    fs::path dir = base / (prefix + random_suffix());
    if (::mkdir(dir.c_str(), 0755) == 0) return dir;
    error = errno;
    if (error != EEXIST) break;
  }
  throw ConfigError(fmt::format("cannot create a directory {}<random> in {}: {}", prefix,
                                base.string(), errno_message(error)));
}

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
  const auto label = config.log_dir.empty() ? base.string() : config.log_dir;
  std::error_code ec;
  fs::create_directories(base, ec);
  if (!ec && access(base.c_str(), W_OK | X_OK) != 0) ec.assign(errno, std::generic_category());
  if (ec) {
    remove_temp();
    throw ConfigError(fmt::format("--log-dir={}: cannot create a writable directory there: {}",
                                  label, ec.message()));
  }
  if (auto why = why_not_private(base); !why.empty()) {
    remove_temp();
    throw ConfigError(fmt::format("--log-dir={}: {}; use a directory only you (or root) can "
                                  "write to, or a sticky one such as /tmp",
                                  label, why));
  }
  // The real path: later opens must not go through a link that someone may re-point.
  char resolved[PATH_MAX];
  if (realpath(base.c_str(), resolved) != nullptr) base = resolved;
  try {
    path_ = make_fresh_dir(base, config.rdzv_id + "_", [] { return random_hex(8); }).string();
  } catch (const ConfigError& e) {
    remove_temp();
    throw ConfigError(fmt::format("--log-dir={}: {}", label, e.what()));
  }
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
