#pragma once
// --dry-run: everything resolved (hosts and slots, nproc per node, ranks where they are fixed
// before the rendezvous, master address and port, the command and the environment each worker
// gets) and shown without starting anything, as a table or as one JSON object for tools.

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/launch_config.hpp"

namespace ddprun {

// `env`: this process's environment (what is forwarded to hosts, PYTHON_EXEC); `commands`:
// with --hosts, the remote shell's command line for each host (ClusterHead::command_for).
nlohmann::json make_plan(const LaunchConfig& config, const std::map<std::string, std::string>& env,
                         const std::vector<std::vector<std::string>>& commands);

// The plan as a person reads it.
std::string format_plan(const nlohmann::json& plan);

}  // namespace ddprun
