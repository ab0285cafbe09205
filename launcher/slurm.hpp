#pragma once
// Slurm without glue: what ddprun takes from Slurm's environment.
//
// Under srun (a task of a job step: SLURM_JOB_ID and SLURM_STEP_ID set), an agent needs no
// rendezvous flags: the step says how many nodes there are, which one this is, and which is
// first. Inside an allocation (an sbatch script, an salloc shell), `--hosts=slurm` means every
// node of the allocation, reached with srun instead of ssh.

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

// One value ddprun takes from Slurm, and where it comes from (for the startup log).
struct SlurmValue {
  std::string flag;    // "nnodes", "node-rank", ...
  std::string value;
  std::string source;  // "SLURM_NODEID", "first of SLURM_STEP_NODELIST=n[1-2]"
};

// Every flag a task of a Slurm step can fill in. A task given all of them takes nothing from
// the step, and runs wherever it runs (an interactive srun --pty shell of several tasks).
inline constexpr std::string_view kSlurmStepFlags[] = {
    "nnodes", "node-rank", "master-addr", "master-port", "rdzv-id", "nproc-per-node"};

// The flags a task of a Slurm step implies, in the order they are shown; nullopt when this
// process is not a task of a step. Throws ConfigError when the step runs more than one task
// on a node (one agent per node starts all of that node's workers).
std::optional<std::vector<SlurmValue>> slurm_step_values(
    const std::map<std::string, std::string>& env);

// The rendezvous port of a Slurm job: stable for the job (every node derives the same), spread
// over 20000..29999 across jobs (below the kernel's ephemeral ports).
int slurm_port(long long job_id);

// --hosts=slurm: the allocation's nodes in order (SLURM_JOB_NODELIST). Throws ConfigError
// naming `label` outside an allocation.
std::vector<std::string> slurm_allocation_hosts(const std::map<std::string, std::string>& env,
                                                std::string_view label);

}  // namespace ddprun
