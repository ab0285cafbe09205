// What the modes share (launcher/modes.hpp).

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "agent/worker_env.hpp"
#include "common/exit_codes.hpp"
#include "launcher/modes.hpp"

namespace ddprun {

// Whether the worker program can run here, looked up on this process's PATH, and the script a
// Python worker runs exists: a missing script fails before anything starts, with the shell's
// 127, instead of as the interpreter's exit 2 in every worker (which reads as a usage error).
ProgramCheck check_worker_program(const LaunchConfig& config) {
  const char* path = std::getenv("PATH");
  auto check = check_program(config.argv.at(0), path ? path : "");
  if (check.exit_code != 0 || config.no_python || config.module) return check;
  // torchrun substitutes the local rank in the script's name as in every argument: a name that
  // differs between two local ranks is each worker's own file, not checked here; any other is
  // checked as the workers will get it ("a$$b.py" runs a$b.py).
  const auto script = substitute_local_rank_arg(config.program, 0);
  if (script != substitute_local_rank_arg(config.program, 1)) return check;
  if (!std::filesystem::exists(script)) {
    std::error_code ec;
    const auto cwd = std::filesystem::current_path(ec);
    check.exit_code = kExitNotFound;
    check.message = fmt::format("{}: no such file in {}", script, cwd.string());
  }
  return check;
}

std::string this_executable() {
  std::error_code ec;
  auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("ddprun") : path.string();
}

}  // namespace ddprun
