// ddprun: the per-node agent, a native torchrun. main() only wires the parts together: argv to
// LaunchConfig, signals, the rendezvous backend (store and handler), the process runner, the
// agent; then the agent's result to a report and an exit code.

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include <spdlog/spdlog.h>

#include "agent/agent.hpp"
#include "agent/orphan_guard.hpp"
#include "agent/posix_process_runner.hpp"
#include "agent/program_check.hpp"
#include "common/error.hpp"
#include "common/exit_codes.hpp"
#include "common/limits.hpp"
#include "common/logging.hpp"
#include "launcher/cli.hpp"
#include "launcher/config_summary.hpp"
#include "launcher/job_report.hpp"
#include "launcher/signal_forwarder.hpp"
#include "rendezvous/backend.hpp"

namespace ddprun {
namespace {

namespace fs = std::filesystem;

std::string this_host(const LaunchConfig& config) {
  if (!config.local_addr.empty()) return config.local_addr;
  char name[256] = "";
  gethostname(name, sizeof(name) - 1);
  return name;
}

std::string make_log_dir(const LaunchConfig& config) {
  fs::path base = config.log_dir;
  if (base.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "torchelastic_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) {
      throw Error(fmt::format("cannot create a log directory {}: {}", tmpl,
                              errno_message(errno)));
    }
    base = tmpl;
  }
  std::random_device rd;
  auto dir = base / fmt::format("{}_{:06x}", config.rdzv_id, rd() & 0xffffff);
  fs::create_directories(dir);
  return dir.string();
}

int run(const LaunchConfig& config, const std::vector<std::string>& notes) {
  // Before any thread: the guardian is forked from a single-threaded process, and every thread
  // inherits the blocked signal mask.
  OrphanGuard guard;
  signal(SIGPIPE, SIG_IGN);
  raise_open_files_limit();
  SignalForwarder signals(config.signals_to_handle.empty()
                              ? std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT}
                              : config.signals_to_handle);

  for (const auto& note : notes) spdlog::info("{}", note);
  spdlog::info("ddprun configuration:\n{}", describe(config));
  if (!config.is_static() && config.node_rank != 0) {
    spdlog::info("--node-rank is ignored with --rdzv-backend=c10d: the rendezvous assigns ranks");
  }
  if (config.nproc_per_node > 1 && !std::getenv("OMP_NUM_THREADS")) {
    spdlog::info("OMP_NUM_THREADS is not set: setting it to 1 for each worker to avoid "
                 "overloading the node; tune it for best performance");
  }

  // One node: nobody else waits for this agent, so a program that cannot run is reported
  // before a store is served or anything starts. (With several nodes the failure goes through
  // the rendezvous, so that the other nodes learn of it at once instead of waiting for a node
  // that left.)
  if (config.is_static() && config.max_nodes == 1) {
    const char* path = std::getenv("PATH");
    auto check = check_program(config.argv.at(0), path ? path : "");
    if (check.exit_code != 0) {
      std::fprintf(stderr, "ddprun: %s\n", check.message.c_str());
      return check.exit_code;
    }
  }

  const auto host = this_host(config);
  RendezvousBackend backend(config, host, Deadline::after(config.rdzv_conf.join_timeout));
  spdlog::info("rendezvous: {}", backend.describe());
  PosixProcessRunner runner(&guard, config.progress_interval);
  AgentContext ctx;
  ctx.host = host;
  ctx.store = &backend.store();
  ctx.open_store = backend.opener();
  ctx.rendezvous = &backend.handler();
  ctx.runner = &runner;
  ctx.reserve_master_port = reserve_port;
  ctx.hosts_store = backend.serves_store();
  ctx.log_dir = make_log_dir(config);
  ctx.base_env = current_environment();
  EventLog events = config.events_file.empty() ? EventLog() : EventLog(config.events_file);
  ctx.events = &events;

  RunResult result;
  {
    Agent agent(config, std::move(ctx));
    signals.attach([&agent](int signo) { agent.on_signal(signo); });
    try {
      result = agent.run();
    } catch (...) {
      signals.detach();
      throw;
    }
    signals.detach();
  }
  const int code = exit_code_of(result);
  events.write("job_finished", {{"exit_code", code}, {"restarts", result.restarts},
                                {"reason", result.reason},
                                {"node", std::max(0, result.group_rank)},
                                {"summary", summary_json(result)}});
  report(result);
  return code;
}

}  // namespace
}  // namespace ddprun

int main(int argc, char** argv) {
  using namespace ddprun;
  std::vector<std::string> args(argv + 1, argv + argc);
  auto outcome = parse_command_line(args, current_environment());
  if (!outcome.config) {
    std::fprintf(outcome.exit_code == 0 ? stdout : stderr, "%s\n", outcome.message.c_str());
    return outcome.exit_code;
  }
  try {
    setup_logging("ddprun", outcome.config->log_level);
    int code = run(*outcome.config, outcome.notes);
    spdlog::shutdown();
    return code;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "ddprun: %s\n", e.what());
    return kExitUsage;
  } catch (const ConnectionError& e) {
    spdlog::error("{}", e.what());
    return kExitRendezvous;
  } catch (const TimeoutError& e) {
    spdlog::error("{}", e.what());
    return kExitRendezvous;
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", e.what());
    return kExitInternal;
  }
}
