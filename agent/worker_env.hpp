#pragma once
// The environment a worker starts with: the agent's own environment plus torchrun's variables.
// A pure function, so every value is unit-tested against the contract.

#include <string>
#include <string_view>
#include <vector>

#include "common/env_map.hpp"
#include "rendezvous/rank_assignment.hpp"

namespace ddprun {

struct WorkerEnvInput {
  NodeRanks ranks;
  int local_rank = 0;
  std::string role = "default";
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;
  int max_restarts = 0;
  std::string run_id = "none";
  std::string error_file;  // TORCHELASTIC_ERROR_FILE
  bool set_omp_threads = false;  // OMP_NUM_THREADS=1 unless the agent's environment has one
  std::string timer_file;  // TORCHELASTIC_TIMER_FILE when the agent serves FileTimer requests
  // Where torch 2.x's NCCL Flight Recorder dumps a rank's last collectives when one times out
  // (the rank is appended); empty: not set.
  std::string flight_recorder_prefix;
  // --virtual-local-rank: LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES naming this worker's device
  // alone, the local_rank-th of the agent's list (or the local rank when the agent has none).
  bool virtual_local_rank = false;
  bool mpi_env = false;  // --mpi-env: OMPI_COMM_WORLD_* too
  // The signals the agent passes on (TORCHELASTIC_SIGNALS_TO_HANDLE, by name); empty: unset.
  std::vector<int> signals_to_handle;
};

// Returns `base` overlaid with the worker variables.
EnvMap build_worker_env(const EnvMap& base, const WorkerEnvInput& in);

// One argument as worker `local_rank` gets it from torchrun: "$local_rank" and "${local_rank}"
// replaced by the local rank, "$$" by "$", any other placeholder left as written (Python's
// string.Template.safe_substitute, common/python_template.hpp).
std::string substitute_local_rank_arg(std::string_view arg, int local_rank);

// The command line with every argument after argv[0] substituted as above. argv[0], the
// interpreter or the --no-python program, is left as given, as torchrun starts its entrypoint.
std::vector<std::string> substitute_local_rank(const std::vector<std::string>& argv,
                                               int local_rank);

}  // namespace ddprun
