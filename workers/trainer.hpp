#pragma once
// The training program behind ddp_resnet's main(): model, process groups, data, the DDP engine,
// the loop, checkpoints and the final sync check. Prints the Python example's lines
// ("Local Rank: L, Epoch: E, Training ...", and on rank 0 "num_steps_per_gpu: N,
// avg_step_time: T" and "samples_per_sec: X") to stdout.

#include "workers/dist_env.hpp"
#include "workers/options.hpp"
#include "workers/resnet.hpp"

namespace ddprun::workers {

// The part of a start that depends on no rank: the model, on the CPU, initialized from
// --random_seed (the same on every rank). A warm standby builds it before it says "ready";
// only the CPU's generator is seeded, so that nothing here initializes CUDA.
ResNet build_model(const Options& options);

// Trains `model` (from build_model). Throws ConfigError (bad setup: exit 2), InjectedFailure
// (exit 3), OutOfSyncError (exit 4) and WorkerError or other exceptions (exit 1).
void run_training(const Options& options, const DistEnv& env, ResNet model);

}  // namespace ddprun::workers
