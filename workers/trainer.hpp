#pragma once
// The training program behind ddp_resnet's main(): model, process groups, data, the DDP engine,
// the loop, checkpoints and the final sync check. Prints the Python example's lines
// ("Local Rank: L, Epoch: E, Training ...", and on rank 0 "num_steps_per_gpu: N,
// avg_step_time: T" and "samples_per_sec: X") to stdout.

#include "workers/dist_env.hpp"
#include "workers/options.hpp"

namespace ddprun::workers {

// Throws ConfigError (bad setup: exit 2), InjectedFailure (exit 3), OutOfSyncError (exit 4)
// and WorkerError or other exceptions (exit 1).
void run_training(const Options& options, const DistEnv& env);

}  // namespace ddprun::workers
