#include "cluster/remote_command.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "cluster/session_protocol.hpp"

namespace ddprun {

namespace {

// An address as a flag value: IPv6 literals in brackets.
std::string address_arg(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

}  // namespace

std::string remote_ddprun_path(const ClusterConfig& cluster, const std::string& self) {
  return cluster.remote_ddprun.empty() ? self : cluster.remote_ddprun;
}

std::vector<std::string> agent_args(const LaunchConfig& config, std::size_t index) {
  const auto& cluster = *config.cluster;
  const auto& host = cluster.hosts.at(index);
  std::vector<std::string> args(cluster.agent_flags);
  args.push_back(config.min_nodes == config.max_nodes
                     ? fmt::format("--nnodes={}", config.max_nodes)
                     : fmt::format("--nnodes={}:{}", config.min_nodes, config.max_nodes));
  if (config.is_static()) {
    args.push_back(fmt::format("--node-rank={}", index));
    args.push_back("--master-addr=" + address_arg(config.master_addr));
    args.push_back(fmt::format("--master-port={}", config.master_port));
  } else {
    args.push_back("--rdzv-endpoint=" + config.rdzv_endpoint);
  }
  args.push_back("--rdzv-id=" + config.rdzv_id);
  args.push_back("--local-addr=" + address_arg(host.host));
  args.push_back("--nproc-per-node=" +
                 (host.slots ? std::to_string(*host.slots) : cluster.nproc_per_node));
  args.push_back("--");
  args.insert(args.end(), cluster.program_and_args.begin(), cluster.program_and_args.end());
  return args;
}

std::vector<std::string> remote_shell_command(const ClusterConfig& cluster, std::size_t index,
                                              const std::string& remote_ddprun,
                                              const StagedBinary* binary) {
  std::vector<std::string> argv(cluster.ssh_command);
  // OpenSSH's own keep-alive, so that the head learns of a host that went silent (a cut cable
  // sends no end of connection) within about the hangup timeout, as the host's agent does.
  // Last among the options: ssh takes the first value given, so the user's own wins.
  if (std::filesystem::path(argv.front()).filename() == "ssh") {
    // An --ssh-command of its own ("ssh -p 2222") keeps BatchMode: a host that asks for a
    // password or a new host key's confirmation fails at once, instead of prompting on a
    // terminal the command does not read.
    const bool batch_mode_given = std::any_of(argv.begin(), argv.end(), [](const auto& a) {
      return a.find("BatchMode") != std::string::npos;
    });
    if (!batch_mode_given) argv.insert(argv.end(), {"-o", "BatchMode=yes"});
    const auto interval = std::max<long long>(
        1, std::chrono::duration_cast<std::chrono::seconds>(cluster.hangup_timeout).count() / 3);
    argv.insert(argv.end(), {"-o", fmt::format("ServerAliveInterval={}", interval), "-o",
                             "ServerAliveCountMax=3"});
  }
  argv.push_back(cluster.hosts.at(index).host);
  // The agent's arguments go in its hello (agent_args): bytes of any kind and any length, and
  // nothing a `ps` on the host shows.
  const std::vector<std::string> args{std::string(kSessionFlag)};
  if (cluster.via_srun) {
    // srun runs a program: the same command line, through a shell as ssh's would be.
    argv.insert(argv.end(), {"/bin/sh", "-c"});
  }
  argv.push_back(binary != nullptr ? staging_command(remote_ddprun, *binary)
                                   : remote_command(remote_ddprun, args));
  return argv;
}

nlohmann::json staging_summary(const std::string& remote_ddprun, const StagedBinary& binary) {
  return {{"remote_ddprun", remote_ddprun},
          {"version", binary.version},
          {"sha256", binary.sha256},
          {"size", binary.bytes->size()}};
}

}  // namespace ddprun
