// --dry-run: the plan, on stdout; nothing is started and no host is contacted.

#include <cstdio>
#include <filesystem>
#include <optional>

#include "agent/worker_env.hpp"
#include "cluster/head.hpp"
#include "common/exit_codes.hpp"
#include "launcher/modes.hpp"
#include "launcher/placement.hpp"
#include "launcher/plan.hpp"

namespace ddprun {

int run_dry_run(const LaunchConfig& config) {
  std::vector<std::vector<std::string>> commands;
  std::optional<ClusterHead> head;
  if (config.cluster) {
    head.emplace(config, current_environment(), this_executable(),
                 std::filesystem::current_path().string());
    for (std::size_t i = 0; i < config.cluster->hosts.size(); ++i) {
      commands.push_back(head->command_for(i));
    }
  }
  auto plan = make_plan(config, current_environment(), commands);
  for (std::size_t i = 0; head && i < config.cluster->hosts.size(); ++i) {
    plan["nodes"][i]["args"] = head->agent_args(i);
  }
  if (head && !head->staging().empty()) plan["staging"] = head->staging();
  // This node's bindings; with --hosts each host plans its own when its agent starts.
  if (!config.cluster && config.binding != Binding::kNone) {
    try {
      plan["placement"] = to_json(plan_node_placement(config));
    } catch (const Error& e) {
      std::fprintf(stderr, "ddprun: %s\n", e.what());
      return kExitUsage;
    }
  }
  std::string text = config.dry_run == DryRun::kJson ? plan.dump() + "\n" : format_plan(plan);
  std::fputs(text.c_str(), stdout);
  return kExitOk;
}

}  // namespace ddprun
