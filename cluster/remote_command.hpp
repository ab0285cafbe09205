#pragma once
// What a one-command job (`--hosts`) runs on each host: the remote shell's command line and the
// arguments the host's agent gets in its session hello. Pure functions of the configuration,
// shared by the head (cluster/head.hpp) and --dry-run, which prints them and contacts nobody.

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster/staging.hpp"
#include "common/launch_config.hpp"

namespace ddprun {

// The ddprun the remote shell runs: --remote-ddprun, else this executable's path (`self`).
std::string remote_ddprun_path(const ClusterConfig& cluster, const std::string& self);

// The agent's arguments for host `index`: its node rank or the rendezvous endpoint, its address,
// its process count, and the program.
std::vector<std::string> agent_args(const LaunchConfig& config, std::size_t index);

// The remote shell's command line for host `index`. With `binary` (staging on) the remote
// command stages it where the host lacks this ddprun; null: it runs `remote_ddprun` as it is.
std::vector<std::string> remote_shell_command(const ClusterConfig& cluster, std::size_t index,
                                              const std::string& remote_ddprun,
                                              const StagedBinary* binary);

// What a host without this ddprun gets: {remote_ddprun, version, sha256, size}.
nlohmann::json staging_summary(const std::string& remote_ddprun, const StagedBinary& binary);

}  // namespace ddprun
