#include "launcher/hosts_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string_view>

#include "cluster/host_list.hpp"
#include "cluster/session_protocol.hpp"
#include "common/env_map.hpp"
#include "common/error.hpp"
#include "common/launch_config.hpp"
#include "common/strings.hpp"
#include "launcher/cli.hpp"
#include "launcher/option_reader.hpp"
#include "launcher/slurm.hpp"
#include "launcher/value_parsers.hpp"

namespace ddprun {
namespace {

bool slurm_hosts(const OptionReader& options) {
  const RawValue* hosts = options.find("hosts");
  return hosts != nullptr && trim(hosts->text) == "slurm";
}

std::vector<HostSpec> read_host_list(const OptionReader& options,
                                     const std::map<std::string, std::string>& env) {
  const RawValue* hosts = options.find("hosts");
  const RawValue* file = options.find("hostfile");
  if (hosts != nullptr && file != nullptr) {
    throw ConfigError(fmt::format("{} and {} cannot be used together", hosts->label, file->label));
  }
  if (slurm_hosts(options)) {
    std::vector<HostSpec> specs;
    for (auto& h : slurm_allocation_hosts(env, hosts->label)) specs.push_back({std::move(h), {}});
    return specs;
  }
  return hosts != nullptr ? parse_hosts(hosts->text, hosts->label)
                          : read_hostfile(std::string(trim(file->text)));
}

}  // namespace

void check_no_hosts_flags(const RawOptions& raw, const std::vector<std::string>& forward) {
  for (auto key : flags_with_hosts_role(HostsRole::kNeedsHosts)) {
    auto it = raw.find(std::string(key));
    if (it != raw.end() && it->second.from_command_line) {
      throw ConfigError(fmt::format("{} needs --hosts or --hostfile", it->second.label));
    }
  }
  if (!forward.empty()) throw ConfigError("-x needs --hosts or --hostfile");
}

RawOptions build_hosts_config(const RawOptions& raw, const std::vector<std::string>& forward,
                              const std::map<std::string, std::string>& env, BuiltConfig& out) {
  OptionReader options(raw);
  ClusterConfig cluster;
  cluster.hosts = read_host_list(options, env);
  const int n = static_cast<int>(cluster.hosts.size());
  for (auto key : {"node-rank", "local-addr", "standalone"}) {
    if (const RawValue* v = options.find(key); v != nullptr && v->from_command_line) {
      throw ConfigError(fmt::format("{} cannot be used with {}: {}", v->label,
                                    options.label(options.find("hosts") ? "hosts" : "hostfile"),
                                    std::string_view(key) == "node-rank"
                                        ? "the order of the hosts gives the node ranks"
                                        : "every host is a node of its own"));
    }
  }
  if (slurm_hosts(options)) {
    if (auto* v = options.find("ssh-command")) {
      throw ConfigError(fmt::format("{} does not apply to --hosts=slurm (the nodes are reached "
                                    "with srun)",
                                    v->label));
    }
    // One job step per node, started with Slurm's own launcher: Slurm tracks the agent and
    // everything it starts, and scancel ends them. -u: the session's bytes pass unbuffered.
    cluster.ssh_command = {"srun", "--nodes=1", "--ntasks=1", "--unbuffered", "--nodelist"};
    cluster.via_srun = true;
  }
  if (auto* v = options.find("ssh-command")) {
    cluster.ssh_command = split_words(v->text, v->label);
    if (cluster.ssh_command.empty()) {
      throw ConfigError(fmt::format("{} must not be empty", v->label));
    }
  }
  if (auto* v = options.find("remote-ddprun")) cluster.remote_ddprun = parse_nonempty(*v);
  cluster.stage = !options.flag("no-stage");
  if (auto* v = options.find("connect-timeout")) {
    cluster.connect_timeout = parse_seconds(v->text, v->label, false);
  }
  if (auto* v = options.find("hangup-timeout")) {
    cluster.hangup_timeout = parse_seconds(v->text, v->label, false);
  }
  if (auto* v = options.find("fanout")) cluster.fanout = parse_int_at_least(v->text, v->label, 1);
  if (auto* v = options.find("tree-threshold")) {
    cluster.tree_threshold = parse_int_at_least(v->text, v->label, 1);
  }
  // srun does its own fan-out (slurmctld and the slurmds); agents never start other agents.
  if (cluster.via_srun) cluster.tree_threshold = std::numeric_limits<int>::max();
  // One worker per node unless said, as with any --hosts; an srun ddprun would take the GPUs.
  if (const auto gpus = parse_int(env_value(env, "SLURM_GPUS_ON_NODE"));
      cluster.via_srun && gpus && *gpus > 0 && options.find("nproc-per-node") == nullptr) {
    out.warnings.push_back(fmt::format(
        "{}=slurm: each node runs 1 worker, though the allocation has {} GPU(s) on a node "
        "(SLURM_GPUS_ON_NODE): give --nproc-per-node={} or --nproc-per-node=gpu for one per GPU",
        options.label("hosts"), *gpus, *gpus));
  }
  forwarded_environment(env, forward);  // checks the names
  cluster.forward = forward;

  // The membership the host list implies, unless the flags say otherwise where they may.
  RawOptions implied = raw;
  for (auto key : {"node-rank", "local-addr", "standalone"}) implied.erase(key);
  const auto* backend = options.find("rdzv-backend");
  const bool elastic = backend != nullptr && parse_rdzv_backend(*backend) != RdzvBackend::kStatic;
  if (auto* v = options.find("nnodes")) {
    auto [min_nodes, max_nodes] = parse_nnodes(v->text, v->label);
    if (!elastic && max_nodes != n) {
      throw ConfigError(fmt::format("{}={}: {} lists {} host(s)", v->label, v->text,
                                    options.label(options.find("hosts") ? "hosts" : "hostfile"),
                                    n));
    }
    if (elastic && (n < min_nodes || n > max_nodes)) {
      throw ConfigError(fmt::format("{}={}: {} host(s) listed, outside {}..{}", v->label, v->text,
                                    n, min_nodes, max_nodes));
    }
  } else {
    implied["nnodes"] = RawValue{std::to_string(n), "--hosts", true};
  }
  const std::string& first = cluster.hosts.front().host;
  if (elastic) {
    if (options.find("rdzv-endpoint") == nullptr) {
      implied["rdzv-endpoint"] = RawValue{format_host_port(first, kC10dDefaultPort), "--hosts", true};
    }
  } else if (options.find("master-addr") == nullptr && options.find("rdzv-endpoint") == nullptr) {
    implied["master-addr"] = RawValue{first, "--hosts", true};
  }
  if (options.find("rdzv-id") == nullptr) {
    implied["rdzv-id"] = RawValue{random_run_id(), "--hosts", true};
  }

  // Flags from the command line that mean the same on every host travel as they are; PET_*
  // travel in the forwarded environment.
  for (const auto& [key, value] : raw) {
    if (!value.from_command_line || hosts_role(key) != HostsRole::kTravels) continue;
    cluster.agent_flags.push_back(fmt::format("--{}={}", key, value.text));
  }
  // torchrun's TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, which no forwarded family holds, travels
  // as the flag (a PET_* one travels as it is).
  const auto* prefix_template = options.find("log-line-prefix-template");
  if (prefix_template != nullptr && !prefix_template->from_command_line &&
      !prefix_template->label.starts_with("PET_") &&
      options.find("log-line-prefix") == nullptr) {
    cluster.agent_flags.push_back("--log-line-prefix-template=" + prefix_template->text);
  }
  if (options.find("log-line-prefix") == nullptr && prefix_template == nullptr) {
    cluster.agent_flags.push_back("--log-line-prefix=[{host}:{rank}]:");
  }
  out.config.cluster = std::move(cluster);
  return implied;
}

}  // namespace ddprun
