// The agent's end of a session with `ddprun --hosts` on another host: the hello (environment,
// working directory) comes first, then the arguments are parsed and checked, "ready" (or why
// not) goes back, and the workers start when the command says "go".

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include <spdlog/spdlog.h>

#include "cluster/head_link.hpp"
#include "cluster/session_protocol.hpp"
#include "cluster/subtree_relay.hpp"
#include "common/env_map.hpp"
#include "common/error.hpp"
#include "common/exit_codes.hpp"
#include "common/logging.hpp"
#include "common/strings.hpp"
#include "common/version.hpp"
#include "launcher/cli.hpp"
#include "launcher/modes.hpp"

namespace ddprun {
namespace {


// After this agent's end, the hosts it relays (tree fan-out) are waited for: their output and
// results still come through here.
void wait_for_subtree(SubtreeRelay& relay, const SessionHello& hello) {
  const auto started = Clock::now();
  while (!relay.wait_all_ended(Deadline::after(std::chrono::minutes(1)))) {
    spdlog::info("waiting for the hosts started from {} to end ({} so far)", hello.host,
                 format_duration(Clock::now() - started));
  }
}

}  // namespace

int run_remote(const std::vector<std::string>& args) {
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
  auto send = [&](Report::Kind kind, nlohmann::json body) {
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
    send(Report::Kind::kRefused, {{"reason", reason}, {"exit_code", code}});
    stand_down();
    return code;
  };
  if (hello.version != ddprun_version()) {
    return refuse(fmt::format("ddprun {} at {} there, {} here", ddprun_version(),
                              this_executable(), hello.version),
                  kExitHosts);
  }
  // The PET_* forms of the command's own flags and of those it sets for each host stay with
  // it, however they reach this process: srun passes the command's whole environment on
  // (PET_HOSTS would have this agent start a cluster of its own).
  for (const auto& [name, value] : current_environment()) {
    if (name.starts_with("PET_") && !forwarded_by_default(name)) unsetenv(name.c_str());
  }
  for (const auto& [name, value] : hello.env) setenv(name.c_str(), value.c_str(), 1);
  if (chdir(hello.cwd.c_str()) != 0) {
    return refuse(fmt::format("cannot enter the working directory {}: {}", hello.cwd,
                              errno_message(errno)),
                  kExitHosts);
  }
  // The arguments come in the hello; on the command line there is only the session flag.
  if (!args.empty()) {
    return refuse(fmt::format("unexpected arguments after {} (the command sends them in the "
                              "session's hello)", kSessionFlag),
                  kExitUsage);
  }
  auto outcome = parse_command_line(hello.args, current_environment());
  if (!outcome.config) return refuse(outcome.message, outcome.exit_code);
  LaunchConfig config = *outcome.config;
  config.console_tags = hello.fold_at_head && !config.raw_output;
  auto check = check_worker_program(config);
  if (check.exit_code != 0) return refuse(check.message, check.exit_code);
  send(Report::Kind::kReady, {{"nproc_per_node", config.nproc_per_node}, {"pid", getpid()}});
  std::string why;
  if (!link.wait_for_go(hello.silence_before_go(), &why)) {
    std::fprintf(stderr, "ddprun@%s: %s: not starting\n", hello.host.c_str(), why.c_str());
    stand_down();
    return kExitHosts;
  }
  setup_logging("ddprun@" + hello.host, config.log_level);
  Session session{&link, hello, relay ? &*relay : nullptr};
  // The link's watcher calls into the session and the relay: it ends before they go, however
  // this function is left.
  struct StopWatcher {
    HeadLink& link;
    ~StopWatcher() { link.stop(); }
  } stop_watcher{link};
  const int code = run_agent(config, outcome.notes, outcome.warnings, &session);
  if (relay) wait_for_subtree(*relay, hello);
  return code;
}

}  // namespace ddprun
