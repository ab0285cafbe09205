// The --hosts command: an agent on every host (cluster/head.hpp), one summary, one exit code.

#include <signal.h>

#include <filesystem>

#include <spdlog/spdlog.h>

#include "agent/worker_env.hpp"
#include "cluster/cluster_report.hpp"
#include "cluster/head.hpp"
#include "common/limits.hpp"
#include "launcher/modes.hpp"
#include "launcher/signal_forwarder.hpp"

namespace ddprun {

int run_hosts(const LaunchConfig& config, const std::vector<std::string>& notes,
              const std::vector<std::string>& warnings) {
  signal(SIGPIPE, SIG_IGN);
  raise_open_files_limit();
  SignalForwarder signals(handled_signals(config));
  for (const auto& note : notes) spdlog::info("{}", note);
  for (const auto& warning : warnings) spdlog::warn("{}", warning);
  ClusterHead head(config, current_environment(), this_executable(),
                   std::filesystem::current_path().string());
  signals.attach([&head](int signo) { head.on_signal(signo); });
  ClusterResult result = head.run();
  signals.detach();
  report_cluster(result);
  return exit_code_of(result);
}

}  // namespace ddprun
