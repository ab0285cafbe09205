#include "process/program_check.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/exit_codes.hpp"
#include "common/strings.hpp"

namespace ddprun {

namespace {

// Why `path` cannot be executed, or "" when it can.
std::string not_executable_reason(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::strerror(errno);
  if (S_ISDIR(st.st_mode)) return "it is a directory";
  if (!S_ISREG(st.st_mode)) return "it is not a regular file";
  if (::access(path.c_str(), X_OK) != 0) {
    return errno == EACCES ? "permission denied (no execute permission for this user)"
                           : std::strerror(errno);
  }
  return "";
}

}  // namespace

ProgramCheck check_program(const std::string& program, const std::string& path_env) {
  ProgramCheck check;
  if (program.find('/') != std::string::npos) {
    struct stat st {};
    if (::stat(program.c_str(), &st) != 0) {
      check.exit_code = kExitNotFound;
      check.message = fmt::format("cannot run {}: {}", program, std::strerror(errno));
      return check;
    }
    if (auto reason = not_executable_reason(program); !reason.empty()) {
      check.exit_code = kExitCannotStart;
      check.message = fmt::format("cannot run {}: {}", program, reason);
      return check;
    }
    check.path = program;
    return check;
  }
  // A bare name: the first executable match on PATH, as execvp would take it. A match that
  // exists but cannot be executed is remembered for the message.
  std::string unusable;
  for (const auto& dir : split(path_env, ':')) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (::access(candidate.c_str(), F_OK) != 0) continue;
    auto reason = not_executable_reason(candidate);
    if (reason.empty()) {
      check.path = candidate;
      return check;
    }
    if (unusable.empty()) unusable = fmt::format("{} ({})", candidate, reason);
  }
  if (!unusable.empty()) {
    check.exit_code = kExitCannotStart;
    check.message = fmt::format("cannot run {}: found {}, and nothing executable on PATH={}",
                                program, unusable, path_env);
  } else {
    check.exit_code = kExitNotFound;
    check.message = fmt::format("cannot run {}: command not found on PATH={}", program,
                                path_env.empty() ? "(empty)" : path_env);
  }
  return check;
}

}  // namespace ddprun
