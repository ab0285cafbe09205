// --dry-run: the plan, on stdout; nothing is started and no host is contacted.

#include <cstdio>
#include <memory>

#include <spdlog/spdlog.h>

#include "cluster/remote_command.hpp"
#include "cluster/staging.hpp"
#include "common/env_map.hpp"
#include "common/error.hpp"
#include "common/exit_codes.hpp"
#include "launcher/modes.hpp"
#include "launcher/placement.hpp"
#include "launcher/plan.hpp"

namespace ddprun {

namespace {

// This executable as the hosts that lack it would get it; null with --no-stage, or when it
// cannot be read (said, and the plan then says nothing of staging: the job would stage nothing).
std::shared_ptr<const StagedBinary> staged_binary(const ClusterConfig& cluster) {
  if (!cluster.stage) return nullptr;
  try {
    return read_own_binary();
  } catch (const Error& e) {
    spdlog::warn("ddprun cannot be staged on hosts that lack it: {}", e.what());
    return nullptr;
  }
}

}  // namespace

int run_dry_run(const LaunchConfig& config) {
  std::vector<std::vector<std::string>> commands;
  std::shared_ptr<const StagedBinary> binary;
  std::string remote_ddprun;
  if (config.cluster) {
    binary = staged_binary(*config.cluster);
    remote_ddprun = remote_ddprun_path(*config.cluster, this_executable());
    for (std::size_t i = 0; i < config.cluster->hosts.size(); ++i) {
      commands.push_back(remote_shell_command(*config.cluster, i, remote_ddprun, binary.get()));
    }
  }
  auto plan = make_plan(config, current_environment(), commands);
  for (std::size_t i = 0; config.cluster && i < config.cluster->hosts.size(); ++i) {
    plan["nodes"][i]["args"] = agent_args(config, i);
  }
  if (binary) plan["staging"] = staging_summary(remote_ddprun, *binary);
  // This node's bindings; with --hosts each host plans its own when its agent starts. One
  // this machine cannot honour is a ConfigError: main() prints it and exits 2.
  if (!config.cluster && config.binding != Binding::kNone) {
    plan["placement"] = to_json(plan_node_placement(config));
  }
  std::string text = config.dry_run == DryRun::kJson ? plan.dump() + "\n" : format_plan(plan);
  std::fputs(text.c_str(), stdout);
  return kExitOk;
}

}  // namespace ddprun
