#include "launcher/log_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
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

namespace {

// Inside a user namespace (a rootless container) files of users it does not map, the host's
// root among them, show as the overflow uid; that owner is no user of the namespace.
bool unmapped_owner(uid_t uid) {
  std::ifstream map("/proc/self/uid_map");
  long inside = -1, outside = -1, count = -1;
  map >> inside >> outside >> count;
  const bool identity = inside == 0 && outside == 0 && count == 4294967295L;
  if (identity) return false;
  std::ifstream overflow("/proc/sys/kernel/overflowuid");
  long overflow_uid = 65534;
  overflow >> overflow_uid;
  return static_cast<long>(uid) == overflow_uid;
}

}  // namespace

std::string why_not_private(const fs::path& dir) {
  const uid_t me = geteuid();
  for (fs::path p = dir;; p = p.parent_path()) {
    struct stat st {};
    if (lstat(p.c_str(), &st) != 0) return {};
    if (st.st_uid != me && st.st_uid != 0 && !unmapped_owner(st.st_uid)) {
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
  // The real path, resolved once: what is checked is what is used, and later opens do not go
  // through a link that someone may re-point.
  char resolved[PATH_MAX];
  if (realpath(base.c_str(), resolved) != nullptr) base = resolved;
  // A --log-dir is the user's choice to check; a temp directory is new and this job's own.
  if (!config.log_dir.empty()) {
    if (auto why = why_not_private(base); !why.empty()) {
      throw ConfigError(fmt::format("--log-dir={}: {}; use a directory only you (or root) can "
                                    "write to, or a sticky one such as /tmp",
                                    label, why));
    }
  }
  try {
    // A run id is the user's text: a '/' in it must not make a path of it.
    std::string prefix = config.rdzv_id + "_";
    std::replace(prefix.begin(), prefix.end(), '/', '_');
    path_ = make_fresh_dir(base, prefix, [] { return random_hex(8); }).string();
  } catch (const ConfigError& e) {
    remove_temp();
    throw ConfigError(fmt::format("--log-dir={}: {}", label, e.what()));
  }
}

LogDir::~LogDir() { remove_temp(); }

namespace {

// Whether a run's directory holds ranks' stacks (<run>/attempt_<n>/<local rank>/stacks.txt),
// which the root cause names: taken after a collective's timeout even without --hang-timeout.
bool holds_stacks(const fs::path& dir) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it.depth() > 3) it.disable_recursion_pending();
    if (it->path().filename() == "stacks.txt") return true;
  }
  return false;
}

}  // namespace

void LogDir::remove_temp() {
  if (temp_.empty()) return;
  if (job_failed_ && holds_stacks(temp_)) {
    spdlog::info("kept {}: it holds the stacks the root cause names", temp_.string());
    return;
  }
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
