// ddprun: a native torchrun. main() reads the command line and runs one of the modes
// (launcher/modes.hpp), turning what escapes it into the documented exit codes.

#include <cstdio>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "cluster/session_protocol.hpp"
#include "common/env_map.hpp"
#include "common/exit_codes.hpp"
#include "common/logging.hpp"
#include "launcher/cli.hpp"
#include "launcher/modes.hpp"
#include "launcher/status_command.hpp"

namespace ddprun {
namespace {

template <typename Fn>
int guarded(Fn&& fn) {
  try {
    int code = fn();
    spdlog::shutdown();
    return code;
  } catch (const std::exception& e) {
    const ErrorClass c = classify(e);
    switch (c) {
      case ErrorClass::kUsage:
        std::fprintf(stderr, "ddprun: %s\n", e.what());
        break;
      case ErrorClass::kRendezvous:
        spdlog::error("{}", e.what());
        break;
      case ErrorClass::kInternal:
        spdlog::error("internal error: {}", e.what());
        break;
    }
    return exit_code_for(c);
  }
}

}  // namespace
}  // namespace ddprun

int main(int argc, char** argv) {
  using namespace ddprun;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args.front() == kSessionFlag) {
    args.erase(args.begin());
    return guarded([&] { return run_remote(args); });
  }
  // `ddprun status` watches a job; a program named status runs as ./status.
  if (!args.empty() && args.front() == "status") {
    return guarded([&] { return run_status({args.begin() + 1, args.end()}); });
  }
  auto outcome = parse_command_line(args, current_environment());
  if (!outcome.config) {
    std::fprintf(outcome.exit_code == 0 ? stdout : stderr, "%s\n", outcome.message.c_str());
    return outcome.exit_code;
  }
  const LaunchConfig& config = *outcome.config;
  return guarded([&] {
    setup_logging("ddprun", config.log_level);
    if (config.dry_run != DryRun::kOff) return run_dry_run(config);
    return config.cluster ? run_hosts(config, outcome.notes, outcome.warnings)
                          : run_agent(config, outcome.notes, outcome.warnings, nullptr);
  });
}
