#include "launcher/slurm.hpp"

#include <fmt/format.h>

#include "cluster/host_list.hpp"
#include "common/env_map.hpp"
#include "common/error.hpp"
#include "common/strings.hpp"

namespace ddprun {

namespace {

// "2(x3),1" -> 2 2 2 1: Slurm's compressed per-node counts.
std::vector<long long> expand_counts(const std::string& text) {
  std::vector<long long> out;
  for (const auto& part : split(text, ',')) {
    const auto paren = part.find("(x");
    const auto count = parse_int(part.substr(0, paren));
    long long times = 1;
    if (paren != std::string::npos && part.back() == ')') {
      times = parse_int(part.substr(paren + 2, part.size() - paren - 3)).value_or(1);
    }
    if (count) out.insert(out.end(), static_cast<std::size_t>(std::max(1LL, times)), *count);
  }
  return out;
}

}  // namespace

int slurm_port(long long job_id) { return 20000 + static_cast<int>(job_id % 10000); }

std::optional<std::vector<SlurmValue>> slurm_step_values(
    const std::map<std::string, std::string>& env) {
  const auto job = env_value(env, "SLURM_JOB_ID");
  const auto step = env_value(env, "SLURM_STEP_ID");
  if (job.empty() || step.empty()) return std::nullopt;

  const auto tasks = env_value(env, "SLURM_STEP_TASKS_PER_NODE");
  for (auto count : expand_counts(tasks)) {
    if (count > 1) {
      throw ConfigError(fmt::format(
          "this Slurm step runs {} tasks on a node (SLURM_STEP_TASKS_PER_NODE={}): ddprun is one "
          "agent per node that starts the node's workers itself; run it as "
          "`srun --ntasks-per-node=1 ddprun ...` (and give the workers with --nproc-per-node)",
          count, tasks));
    }
  }
  const std::string list_var =
      env.count("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_NODELIST";
  const auto list = env_value(env, list_var);
  const auto nodes = expand_hostlist(list, list_var);
  const std::string count_var =
      env.count("SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES" : "SLURM_NNODES";
  const auto job_id = parse_int(job);
  if (nodes.empty() || !job_id) {
    throw ConfigError(fmt::format("the Slurm environment is incomplete ({}='{}', SLURM_JOB_ID='{}')",
                                  list_var, list, job));
  }

  std::vector<SlurmValue> values;
  const auto count = env_value(env, count_var);
  values.push_back({"nnodes", count.empty() ? std::to_string(nodes.size()) : count, count_var});
  values.push_back({"node-rank", env_value(env, "SLURM_NODEID"), "SLURM_NODEID"});
  values.push_back({"master-addr", nodes.front(), fmt::format("first of {}={}", list_var, list)});
  values.push_back({"master-port", std::to_string(slurm_port(*job_id)),
                    fmt::format("derived from SLURM_JOB_ID={}", job)});
  values.push_back({"rdzv-id", fmt::format("slurm-{}.{}", job, step),
                    "SLURM_JOB_ID.SLURM_STEP_ID"});
  const auto gpus = parse_int(env_value(env, "SLURM_GPUS_ON_NODE"));
  if (gpus && *gpus > 0) {
    values.push_back({"nproc-per-node", std::to_string(*gpus), "SLURM_GPUS_ON_NODE"});
  } else {
    values.push_back({"nproc-per-node", "auto", "no SLURM_GPUS_ON_NODE: GPUs, else CPUs"});
  }
  return values;
}

std::vector<std::string> slurm_allocation_hosts(const std::map<std::string, std::string>& env,
                                                std::string_view label) {
  const auto list = env_value(env, "SLURM_JOB_NODELIST");
  if (env_value(env, "SLURM_JOB_ID").empty() || list.empty()) {
    throw ConfigError(fmt::format(
        "{}=slurm: not inside a Slurm allocation (no SLURM_JOB_ID/SLURM_JOB_NODELIST); run it in "
        "an sbatch script or an salloc shell",
        label));
  }
  return expand_hostlist(list, "SLURM_JOB_NODELIST");
}

}  // namespace ddprun
