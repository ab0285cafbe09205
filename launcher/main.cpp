// ddprun: the per-node agent, a native torchrun. main() only wires the parts together: argv to
// LaunchConfig, signals, the rendezvous backend (store and handler), the process runner, the
// agent; then the agent's result to a report and an exit code. With --hosts it is the command
// that starts an agent per host instead (cluster/head.hpp); started that way on a host, it is
// an agent in a session with that command (cluster/head_link.hpp).

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "agent/agent.hpp"
#include "agent/orphan_guard.hpp"
#include "agent/posix_process_runner.hpp"
#include "agent/program_check.hpp"
#include "agent/worker_output.hpp"
#include "cluster/cluster_report.hpp"
#include "cluster/head.hpp"
#include "cluster/head_link.hpp"
#include "cluster/subtree_relay.hpp"
#include "common/error.hpp"
#include "common/exit_codes.hpp"
#include "common/limits.hpp"
#include "common/logging.hpp"
#include "common/random.hpp"
#include "common/remove_tree.hpp"
#include "common/version.hpp"
#include "launcher/cli.hpp"
#include "launcher/config_summary.hpp"
#include "launcher/job_report.hpp"
#include "launcher/plan.hpp"
#include "launcher/signal_forwarder.hpp"
#include "rendezvous/backend.hpp"
#include "rendezvous/store_auth.hpp"

namespace ddprun {
namespace {

namespace fs = std::filesystem;

std::string this_host(const LaunchConfig& config) {
  if (!config.local_addr.empty()) return config.local_addr;
  char name[256] = "";
  gethostname(name, sizeof(name) - 1);
  return name;
}

// The job's log directory: <--log-dir or a new temp dir>/<run id>_<random>, which holds
// attempt_<n>/<local_rank>/ with the workers' error files and, with --redirects or --tee, their
// logs. A temp dir made for a job whose output all goes to the console holds nothing but
// error files, which the agent has read before it reports: it goes with the job (torchrun
// leaves one in /tmp for every run, and a /tmp of tens of thousands makes each new one slow to
// create), and unless TMPDIR says where, it is made in RAM (/dev/shm): making and removing its
// 7 directories on the test machine's ext4 /tmp took ~1.2 ms of every launch. Any other log
// directory stays, in TMPDIR or /tmp.
class LogDir {
 public:
  explicit LogDir(const LaunchConfig& config) {
    fs::path base = config.log_dir;
    if (base.empty()) {
      const bool scratch = !writes_log_files(config);
      std::string tmpl = (temp_base(scratch) / "torchelastic_XXXXXX").string();
      if (!mkdtemp(tmpl.data())) {
        throw Error(fmt::format("cannot create a log directory {}: {}", tmpl,
                                errno_message(errno)));
      }
      base = tmpl;
      if (scratch) temp_ = base;
    }
    const auto dir = base / fmt::format("{}_{}", config.rdzv_id, random_hex(3));
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (!ec && access(dir.c_str(), W_OK | X_OK) != 0) ec.assign(errno, std::generic_category());
    if (ec) {
      remove_temp();
      throw ConfigError(
          fmt::format("--log-dir={}: cannot create a writable directory {} in it: {}",
                      config.log_dir.empty() ? base.string() : config.log_dir, dir.string(),
                      ec.message()));
    }
    path_ = dir.string();
  }
  ~LogDir() { remove_temp(); }
  LogDir(const LogDir&) = delete;
  LogDir& operator=(const LogDir&) = delete;

  const std::string& path() const { return path_; }
  // The scratch directory this run made and removes at its end; empty when it keeps its logs.
  std::string scratch() const { return temp_.string(); }

 private:
  static fs::path temp_base(bool scratch) {
    const char* tmpdir = std::getenv("TMPDIR");
    if (scratch && (tmpdir == nullptr || *tmpdir == '\0') &&
        access("/dev/shm", W_OK | X_OK) == 0) {
      return "/dev/shm";
    }
    return fs::temp_directory_path();
  }

  void remove_temp() {
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

  std::string path_;
  fs::path temp_;  // ours to remove; empty: the directory stays
};

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

// The agent's side of a session with `ddprun --hosts` (nullptr when started by hand).
struct Session {
  HeadLink* link;
  SessionHello hello;
  SubtreeRelay* relay;  // tree fan-out: the hosts this agent starts; nullptr: none
};

int run(const LaunchConfig& config, const std::vector<std::string>& notes,
        const Session* session) {
  // Before any thread: the guardian is forked from a single-threaded process, and every thread
  // inherits the blocked signal mask.
  OrphanGuard guard;
  signal(SIGPIPE, SIG_IGN);
  signal(SIGXFSZ, SIG_IGN);  // a file-size limit fails a log write (reported), not the agent
  raise_open_files_limit();
  SignalForwarder signals(handled_signals(config));
  if (session != nullptr) {
    session->link->watch(session->hello.hangup_timeout, [session](const std::string& why) {
      spdlog::warn("{}: stopping the workers", why);
      if (session->relay != nullptr) session->relay->close_all();
    });
  }

  for (const auto& note : notes) spdlog::info("{}", note);
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

  const auto host = this_host(config);
  // Before the store listens: a node that cannot keep its workers' logs says so at once.
  LogDir log_dir(config);
  if (const auto scratch = log_dir.scratch(); !scratch.empty()) guard.remove_if_abandoned(scratch);
  RendezvousBackend backend(config, host, Deadline::after(config.rdzv_conf.join_timeout));
  spdlog::info("rendezvous: {}", backend.describe());
  EventLog events = config.events_file.empty() ? EventLog() : EventLog(config.events_file);
  RunResult result;
  {
    PosixProcessRunner runner(&guard, config.progress_interval);
    AgentContext ctx;
    ctx.host = host;
    ctx.store = &backend.store();
    ctx.open_store = backend.opener();
    ctx.rendezvous = &backend.handler();
    ctx.runner = &runner;
    ctx.reserve_master_port = reserve_port;
    ctx.hosts_store = backend.serves_store();
    ctx.log_dir = log_dir.path();
    ctx.base_env = current_environment();
    ctx.base_env.erase(store::kTokenEnv);  // the store's secret is the agents', not the workers'
    ctx.events = &events;
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
  // Every worker is reaped and the runner is gone: the guardian may go (it exits while this
  // agent reports; the guard's destructor reaps it).
  guard.finish();
  const int code = exit_code_of(result);
  events.write("job_finished", {{"exit_code", code}, {"restarts", result.restarts},
                                {"reason", result.reason},
                                {"node", std::max(0, result.group_rank)},
                                {"summary", summary_json(result)}});
  if (session != nullptr) {
    // The command prints one summary and one root cause for every host.
    auto body = summary_json(result);
    body["node"] = session->hello.node;
    session->link->report({"result", body}, session->hello.token);
  } else {
    report(result);
  }
  if (const auto lost = lost_output_files(); !lost.empty()) {
    spdlog::warn("output was lost: {} worker log file(s) could not be written in full: {}",
                 lost.size(), fmt::join(lost, "; "));
  }
  return code;
}

std::string this_executable() {
  std::error_code ec;
  auto path = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("ddprun") : path.string();
}

// Cluster mode: an agent on every host, one summary, one exit code.
int run_cluster(const LaunchConfig& config, const std::vector<std::string>& notes) {
  signal(SIGPIPE, SIG_IGN);
  raise_open_files_limit();
  SignalForwarder signals(handled_signals(config));
  for (const auto& note : notes) spdlog::info("{}", note);
  ClusterHead head(config, current_environment(), this_executable(), fs::current_path().string());
  signals.attach([&head](int signo) { head.on_signal(signo); });
  ClusterResult result = head.run();
  signals.detach();
  report_cluster(result);
  return exit_code_of(result);
}

// A remote agent in a session with `ddprun --hosts` on another host: the hello (environment,
// working directory) comes first, then the arguments are parsed and checked, "ready" (or why
// not) goes back, and the workers start when the command says "go".
// After this agent's end, the hosts it relays (tree fan-out) are waited for: their output and
// results still come through here.
void wait_for_subtree(SubtreeRelay& relay, const SessionHello& hello) {
  const auto started = Clock::now();
  while (!relay.wait_all_ended(Deadline::after(std::chrono::minutes(1)))) {
    spdlog::info("waiting for the hosts started from {} to end ({} so far)", hello.host,
                 format_duration(Clock::now() - started));
  }
}

int run_session(const std::vector<std::string>& args) {
  signal(SIGPIPE, SIG_IGN);
  HeadLink link;
  SessionHello hello;
  try {
    hello = link.read_hello(Deadline::after(std::chrono::seconds(60)));
  } catch (const Error& e) {
    std::fprintf(stderr, "ddprun: %s\n", e.what());
    return kExitUsage;
  }
  // Tree fan-out: the subtree's agents start now, while this one checks itself.
  std::optional<SubtreeRelay> relay;
  if (!hello.subtree.empty()) {
    relay.emplace(hello, link);
    link.forward_to([&relay](const std::string& line) { relay->send_all(line); });
  }
  // Every report names this host's node: relays pass reports of many hosts along one stream.
  auto send = [&](const std::string& kind, nlohmann::json body) {
    body["node"] = hello.node;
    link.report({kind, std::move(body)}, hello.token);
  };
  // The command gives up on the whole job when one host cannot start; the hosts this one
  // relays still need to hear it (end of input), and the command to hear of their end.
  auto stand_down = [&] {
    std::string ignored;
    if (relay && link.wait_for_go(hello.silence_before_go(), &ignored)) {
      std::fprintf(stderr, "ddprun@%s: told to start after refusing\n", hello.host.c_str());
    }
    if (relay) {
      relay->close_all();
      relay->wait_all_ended(Deadline::after(std::chrono::seconds(10)));
    }
  };
  auto refuse = [&](const std::string& reason, int code) {
    send("refused", {{"reason", reason}, {"exit_code", code}});
    stand_down();
    return code;
  };
  if (hello.version != ddprun_version()) {
    return refuse(fmt::format("ddprun {} at {} there, {} here", ddprun_version(),
                              this_executable(), hello.version),
                  kExitHosts);
  }
  for (const auto& [name, value] : hello.env) setenv(name.c_str(), value.c_str(), 1);
  if (chdir(hello.cwd.c_str()) != 0) {
    return refuse(fmt::format("cannot enter the working directory {}: {}", hello.cwd,
                              errno_message(errno)),
                  kExitHosts);
  }
  auto outcome = parse_command_line(args, current_environment());
  if (!outcome.config) return refuse(outcome.message, outcome.exit_code);
  const LaunchConfig& config = *outcome.config;
  auto check = check_worker_program(config);
  if (check.exit_code != 0) return refuse(check.message, check.exit_code);
  if (!config.no_python && !config.module && !fs::exists(config.program)) {
    return refuse(fmt::format("{}: no such file in {}", config.program, hello.cwd),
                  kExitNotFound);
  }
  send("ready", {{"nproc_per_node", config.nproc_per_node}, {"pid", getpid()}});
  std::string why;
  if (!link.wait_for_go(hello.silence_before_go(), &why)) {
    std::fprintf(stderr, "ddprun@%s: %s: not starting\n", hello.host.c_str(), why.c_str());
    stand_down();
    return kExitHosts;
  }
  setup_logging("ddprun@" + hello.host, config.log_level);
  Session session{&link, hello, relay ? &*relay : nullptr};
  const int code = run(config, outcome.notes, &session);
  if (relay) wait_for_subtree(*relay, hello);
  return code;
}

// --dry-run: the plan, on stdout; nothing is started and no host is contacted.
int print_plan(const LaunchConfig& config) {
  std::vector<std::vector<std::string>> commands;
  if (config.cluster) {
    ClusterHead head(config, current_environment(), this_executable(),
                     fs::current_path().string());
    for (std::size_t i = 0; i < config.cluster->hosts.size(); ++i) {
      commands.push_back(head.command_for(i));
    }
  }
  auto plan = make_plan(config, current_environment(), commands);
  std::string text = config.dry_run == "json" ? plan.dump() + "\n" : format_plan(plan);
  std::fputs(text.c_str(), stdout);
  return kExitOk;
}

// Runs one of the modes, turning what escapes it into the documented exit codes.
template <typename Fn>
int guarded(Fn&& fn) {
  try {
    int code = fn();
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

}  // namespace
}  // namespace ddprun

int main(int argc, char** argv) {
  using namespace ddprun;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args.front() == kSessionFlag) {
    args.erase(args.begin());
    return guarded([&] { return run_session(args); });
  }
  auto outcome = parse_command_line(args, current_environment());
  if (!outcome.config) {
    std::fprintf(outcome.exit_code == 0 ? stdout : stderr, "%s\n", outcome.message.c_str());
    return outcome.exit_code;
  }
  const LaunchConfig& config = *outcome.config;
  return guarded([&] {
    setup_logging("ddprun", config.log_level);
    if (!config.dry_run.empty()) return print_plan(config);
    return config.cluster ? run_cluster(config, outcome.notes)
                          : run(config, outcome.notes, nullptr);
  });
}
