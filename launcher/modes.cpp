// What the modes share (launcher/modes.hpp).

#include <signal.h>

#include <cstdlib>
#include <filesystem>

#include "launcher/modes.hpp"

namespace ddprun {

// The signals passed on to the workers (--signals-to-handle, else torchrun's four).
std::vector<int> handled_signals(const LaunchConfig& config) {
  return config.signals_to_handle.empty() ? std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT}
                                          : config.signals_to_handle;
}

// Whether the worker program can run here, looked up on this process's PATH.
ProgramCheck check_worker_program(const LaunchConfig& config) {
  const char* path = std::getenv("PATH");
  return check_program(config.argv.at(0), path ? path : "");
}

std::string this_executable() {
  std::error_code ec;
  auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("ddprun") : path.string();
}

}  // namespace ddprun
