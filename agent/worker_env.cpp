#include "agent/worker_env.hpp"

#include <optional>

#include <fmt/format.h>

#include "common/failure_record.hpp"
#include "common/python_template.hpp"
#include "common/strings.hpp"

namespace ddprun {

EnvMap build_worker_env(const EnvMap& base, const WorkerEnvInput& in) {
  EnvMap env = base;
  const auto& r = in.ranks;
  const auto rank = std::to_string(r.global_rank(in.local_rank));
  env["LOCAL_RANK"] = in.virtual_local_rank ? "0" : std::to_string(in.local_rank);
  if (in.virtual_local_rank) {
    // Entries pass through as written: indices, GPU-<uuid> and MIG-<uuid> alike. The launcher
    // refuses a list shorter than the node's workers before any starts.
    auto visible = base.find("CUDA_VISIBLE_DEVICES");
    const auto entries = visible == base.end() ? std::vector<std::string>{}
                                               : split(visible->second, ',');
    env["CUDA_VISIBLE_DEVICES"] =
        visible == base.end() ? std::to_string(in.local_rank)
        : in.local_rank < static_cast<int>(entries.size())
            ? std::string(trim(entries[in.local_rank]))
            : "-1";  // none: the short list is refused earlier; never another rank's device
  }
  env["RANK"] = rank;
  env["GROUP_RANK"] = std::to_string(r.group_rank);
  env["ROLE_RANK"] = rank;  // one role per job: role ranks are the global ranks
  env["ROLE_NAME"] = in.role;
  env["LOCAL_WORLD_SIZE"] = std::to_string(r.local_world_size);
  env["WORLD_SIZE"] = std::to_string(r.world_size);
  env["GROUP_WORLD_SIZE"] = std::to_string(r.group_world_size);
  env["ROLE_WORLD_SIZE"] = std::to_string(r.world_size);
  env["MASTER_ADDR"] = in.master_addr;
  env["MASTER_PORT"] = std::to_string(in.master_port);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(in.restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(in.max_restarts);
  env["TORCHELASTIC_RUN_ID"] = in.run_id;
  // MASTER_ADDR:MASTER_PORT is the workers' store, which speaks torch's TCPStore protocol and
  // listens before any worker starts (agent/workers_stores.hpp): torch's clients join it
  // instead of rank 0 hosting one, and none waits out a retry for rank 0 to listen.
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  env["TORCHELASTIC_ERROR_FILE"] = in.error_file;
  if (!in.signals_to_handle.empty()) {
    // torchrun 2.x puts its --signals-to-handle in its own environment, whatever the user's
    // environment held, and its workers inherit it; the names are Python's signal module's.
    std::vector<std::string> names;
    for (int s : in.signals_to_handle) names.push_back(signal_name(s));
    env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = fmt::format("{}", fmt::join(names, ","));
  }
  if (in.mpi_env) {
    // Open MPI's names, for scripts written for mpirun. OMPI_COMM_WORLD_NODE_RANK is, in Open
    // MPI's words, the rank on this node across all jobs: for one job, the local rank (not the
    // node's index, which is GROUP_RANK).
    env["OMPI_COMM_WORLD_RANK"] = rank;
    env["OMPI_COMM_WORLD_SIZE"] = std::to_string(r.world_size);
    env["OMPI_COMM_WORLD_LOCAL_RANK"] = std::to_string(in.local_rank);
    env["OMPI_COMM_WORLD_LOCAL_SIZE"] = std::to_string(r.local_world_size);
    env["OMPI_COMM_WORLD_NODE_RANK"] = std::to_string(in.local_rank);
  }
  if (!env.count("TORCH_NCCL_ASYNC_ERROR_HANDLING")) env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1";
  if (in.set_omp_threads && !env.count("OMP_NUM_THREADS")) env["OMP_NUM_THREADS"] = "1";
  if (!in.timer_file.empty()) env["TORCHELASTIC_TIMER_FILE"] = in.timer_file;
  // torch 2.x's Flight Recorder, under both the older TORCH_NCCL_* names and the TORCH_FR_*
  // ones that replace them; the user's own setting of either name wins.
  const auto set_pair = [&env](const char* older, const char* newer, const std::string& value) {
    if (env.count(older) || env.count(newer)) return;
    env[older] = value;
    env[newer] = value;
  };
  if (!in.flight_recorder_prefix.empty()) {
    set_pair("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE", "2000");
    set_pair("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE",
             in.flight_recorder_prefix);
    if (!env.count("TORCH_NCCL_DUMP_ON_TIMEOUT")) env["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "1";
  }
  return env;
}

std::string substitute_local_rank_arg(std::string_view arg, int local_rank) {
  const auto value = std::to_string(local_rank);
  return template_substitute(arg, [&value](std::string_view name) -> std::optional<std::string> {
    if (name == "local_rank") return value;
    return std::nullopt;
  });
}

std::vector<std::string> substitute_local_rank(const std::vector<std::string>& argv,
                                               int local_rank) {
  std::vector<std::string> out = argv;
  // From 1: argv[0] is what torchrun calls the entrypoint (the interpreter, or the program under
  // --no-python), which it starts as given.
  for (std::size_t i = 1; i < out.size(); ++i) {
    out[i] = substitute_local_rank_arg(out[i], local_rank);
  }
  return out;
}

}  // namespace ddprun
