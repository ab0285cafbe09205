// The --hosts command: an agent on every host (cluster/head.hpp), one summary, one exit code.

#include <signal.h>

#include <filesystem>

#include <spdlog/spdlog.h>

#include "cluster/cluster_report.hpp"
#include "cluster/head.hpp"
#include "common/env_map.hpp"
#include "common/exit_codes.hpp"
#include "common/limits.hpp"
#include "common/strings.hpp"
#include "launcher/modes.hpp"
#include "launcher/signal_forwarder.hpp"
#include "monitor/job_monitor.hpp"
#include "rendezvous/backend.hpp"

namespace ddprun {

int run_hosts(const LaunchConfig& config, const std::vector<std::string>& notes,
              const std::vector<std::string>& warnings) {
  signal(SIGPIPE, SIG_IGN);
  raise_open_files_limit();
  SignalForwarder signals(config.signals_to_handle);
  for (const auto& note : notes) spdlog::info("{}", note);
  for (const auto& warning : warnings) spdlog::warn("{}", warning);
  ClusterHead head(config, current_environment(), this_executable(),
                   std::filesystem::current_path().string());
  std::unique_ptr<JobMonitor> monitor;
  try {
    JobMonitorOptions options;
    options.metrics_addr = config.metrics_addr;
    options.metrics_port = config.metrics_port;
    monitor = std::make_unique<JobMonitor>(nullptr, options);
  } catch (const ConnectionError& e) {
    std::fprintf(stderr, "ddprun: %s\n", e.what());
    return kExitUsage;
  }
  if (config.metrics_port >= 0) {
    spdlog::info("metrics of the whole job: http://{}/metrics",
                 format_host_port(config.metrics_addr,
                                  static_cast<std::uint16_t>(monitor->metrics_port())));
  }
  // The job's store, as `ddprun status` and the metrics read it from this command.
  LaunchConfig with_secret = config;
  with_secret.store_secret = head.store_secret();
  monitor->attach_store(job_store_opener(with_secret));
  signals.attach([&head](int signo) { head.on_signal(signo); });
  ClusterResult result = head.run();
  signals.detach();
  report_cluster(result);
  return exit_code_of(result);
}

}  // namespace ddprun
