// A node's agent: the rendezvous backend (store and handler), the process runner and the agent
// wired together; then the agent's result becomes a report and an exit code.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "agent/agent.hpp"
#include "agent/status_board.hpp"
#include "agent/worker_launch.hpp"
#include "agent/workers_stores.hpp"
#include "cluster/head_link.hpp"
#include "cluster/subtree_relay.hpp"
#include "common/exit_codes.hpp"
#include "common/limits.hpp"
#include "common/strings.hpp"
#include "common/version.hpp"
#include "launcher/config_summary.hpp"
#include "launcher/job_report.hpp"
#include "launcher/log_dir.hpp"
#include "launcher/modes.hpp"
#include "launcher/placement.hpp"
#include "launcher/signal_forwarder.hpp"
#include "monitor/job_monitor.hpp"
#include "process/orphan_guard.hpp"
#include "process/posix_process_runner.hpp"
#include "process/stack_capture.hpp"
#include "process/worker_output.hpp"
#include "rendezvous/backend.hpp"
#include "store/store_auth.hpp"

namespace ddprun {
namespace {

std::string this_host(const LaunchConfig& config) {
  if (!config.local_addr.empty()) return config.local_addr;
  char name[256] = "";
  gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace

int run_agent(const LaunchConfig& config, const std::vector<std::string>& notes,
              const std::vector<std::string>& warnings,
              const Session* session) {
  // Before any thread: the guardian is forked from a single-threaded process, and every thread
  // inherits the blocked signal mask.
  OrphanGuard guard;
  signal(SIGPIPE, SIG_IGN);
  signal(SIGXFSZ, SIG_IGN);  // a file-size limit fails a log write (reported), not the agent
  raise_open_files_limit();
  SignalForwarder signals(config.signals_to_handle);
  if (session != nullptr) {
    session->link->watch(
        session->hello.hangup_timeout,
        [session](const std::string& why) {
          spdlog::warn("{}: stopping the workers", why);
          if (session->relay != nullptr) session->relay->close_all();
        },
        {Report::Kind::kAlive, {{"node", session->hello.node}}}, session->hello.token);
  }

  for (const auto& note : notes) spdlog::info("{}", note);
  for (const auto& warning : warnings) spdlog::warn("{}", warning);
  // Started by `ddprun --hosts`, which shows the plan for every host once.
  spdlog::log(session != nullptr ? spdlog::level::debug : spdlog::level::info,
              "ddprun configuration:\n{}", describe(config));
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
    auto check = check_worker_program(config);
    if (check.exit_code != 0) {
      std::fprintf(stderr, "ddprun: %s\n", check.message.c_str());
      return check.exit_code;
    }
  }

  // Before anything starts: a binding this machine cannot honour is the user's to change.
  // PlacementError and TopologyError are ConfigErrors: main() prints them and exits 2.
  const NodePlacement placement = plan_node_placement(config);
  if (!placement.this_system && !placement.ranks.empty()) {
    throw PlacementError(fmt::format("{}: the machine described by HWLOC_XMLFILE or "
                                     "HWLOC_SYNTHETIC is not this one: its bindings can be "
                                     "shown (--dry-run), not applied",
                                     to_string(config.binding)));
  }
  if (!placement.ranks.empty()) spdlog::info("{}", describe(placement));

  const auto host = this_host(config);
  // Before the store listens: a node that cannot keep its workers' logs or its events says so
  // at once (a usage error).
  LogDir log_dir(config);
  if (const auto scratch = log_dir.scratch(); !scratch.empty()) guard.remove_if_abandoned(scratch);
  // Logs kept in a directory the user did not name: said at start and in the root cause, or
  // nobody would know where to look.
  const std::string unnamed_log_dir =
      config.log_dir.empty() && log_dir.scratch().empty() ? log_dir.path() : std::string();
  if (!unnamed_log_dir.empty()) {
    spdlog::info("worker logs: {}/attempt_<n>/<local rank>/ (no --log-dir given)",
                 unnamed_log_dir);
  }
  EventLog events = config.events_file.empty() ? EventLog() : EventLog(config.events_file);
  events.write("agent_started", {{"version", ddprun_version()}, {"host", host},
                                 {"pid", static_cast<int>(getpid())}, {"run_id", config.rdzv_id}});
  // Before the store listens: a metrics port that is taken is a usage error, nothing started.
  StatusBoard board(config.rdzv_id, to_string(config.rdzv_backend), host, config.max_restarts);
  const auto make_monitor = [&](bool metrics) {
    JobMonitorOptions options;
    if (metrics) {
      options.metrics_addr = config.metrics_addr;
      options.metrics_port = config.metrics_port;
    }
    options.stacks_dir = log_dir.path();
    // One node keeps its store in its own memory, where nobody else could read its record.
    options.publish = !(config.is_static() && config.max_nodes == 1);
    return std::make_unique<JobMonitor>(&board, options);
  };
  std::unique_ptr<JobMonitor> monitor;
  try {
    monitor = make_monitor(true);
  } catch (const ConnectionError& e) {
    // Under --hosts the command serves the job's metrics itself, possibly on this host's port.
    if (session == nullptr) {
      std::fprintf(stderr, "ddprun: %s\n", e.what());
      return kExitUsage;
    }
    spdlog::warn("{}; this agent serves no metrics", e.what());
    monitor = make_monitor(false);
  }
  guard.unlink_if_abandoned(monitor->control_path());
  RendezvousBackend backend(config, host, Deadline::after(config.rdzv_conf.join_timeout));
  spdlog::info("rendezvous: {}", backend.describe());
  if (config.hang_timeout.count() > 0) {
    if (auto why = stacks_unavailable()) {
      spdlog::warn("--hang-timeout: a hang will name its ranks without their stacks: {}", *why);
    }
  }
  monitor->attach_store(backend.opener(), [&backend] { return backend.store_requests_served(); });
  // The monitor reads and writes through the backend: it stops first, however this returns.
  struct StopFirst {
    JobMonitor& monitor;
    ~StopFirst() { monitor.stop(); }
  } stop_monitor{*monitor};
  if (config.metrics_port >= 0 && monitor->metrics_port() >= 0) {
    spdlog::info("metrics: http://{}/metrics",
                 format_host_port(config.metrics_addr,
                                  static_cast<std::uint16_t>(monitor->metrics_port())));
  }
  RunResult result;
  {
    // Outlives the workers: the runner reaps them first.
    WorkersStores workers_stores(config.is_static() && config.max_nodes == 1 && !config.standalone
                                     ? std::optional<std::uint16_t>(config.master_port)
                                     : std::nullopt);
    std::optional<StandbyOptions> standby;
    if (config.warm_standby) {
      standby.emplace();
      standby->modules = *config.warm_standby;
      standby->attempt_variables = attempt_variables();
      standby->native = config.no_python;  // the program speaks the protocol itself
    }
    PosixProcessRunner runner(&guard, config.progress_interval, std::move(standby));
    AgentContext ctx;
    ctx.host = host;
    ctx.store = &backend.store();
    ctx.open_store = backend.opener();
    ctx.rendezvous = &backend.handler();
    ctx.runner = &runner;
    ctx.open_workers_store = [&workers_stores] { return workers_stores.open(); };
    ctx.hosts_store = backend.serves_store();
    ctx.log_dir = log_dir.path();
    ctx.log_dir_is_scratch = !log_dir.scratch().empty();
    ctx.base_env = current_environment();
    ctx.base_env.erase(store::kTokenEnv);  // the store's secret is the agents', not the workers'
    ctx.events = &events;
    ctx.status = &board;
    if (session != nullptr) {
      ctx.report_node_check = [session](const std::string& table, std::size_t findings) {
        session->link->report(
            {Report::Kind::kNodeCheck,
             {{"node", session->hello.node}, {"table", table}, {"findings", findings}}},
            session->hello.token);
      };
    }
    for (const auto& rank : placement.ranks) ctx.placements.push_back(rank.placement);
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
  if (code != 0) log_dir.job_failed();
  board.finish(result.end == RunResult::End::kSucceeded            ? "succeeded"
               : result.end == RunResult::End::kStopped           ? "stopped"
               : result.end == RunResult::End::kNodeCheckExcluded ? kLeftOut
                                                                  : "failed",
               result.reason, code);
  // The last record goes to the store, and the control socket is gone, before the guardian:
  // after it, a kill of this agent would leave the socket behind.
  monitor->finish();
  monitor->stop();
  // Every worker is reaped and the runner is gone: the guardian may go (it exits while this
  // agent reports; the guard's destructor reaps it).
  guard.finish();
  events.write("job_finished", {{"exit_code", code}, {"restarts", result.restarts},
                                {"reason", result.reason},
                                {"node", std::max(0, result.group_rank)},
                                {"summary", summary_json(result)}});
  if (session != nullptr) {
    // The command prints one summary and one root cause for every host.
    auto body = summary_json(result);
    body["node"] = session->hello.node;
    session->link->report({Report::Kind::kResult, body}, session->hello.token);
  } else {
    report(result, unnamed_log_dir);
  }
  if (const auto lost = lost_output_files(); !lost.empty()) {
    spdlog::warn("output was lost: {} worker log file(s) could not be written in full: {}",
                 lost.size(), fmt::join(lost, "; "));
  }
  return code;
}

}  // namespace ddprun
