#pragma once
// Training checkpoints: model parameters and buffers, optimizer state (momentum buffers), the
// position in training, and every rank's CPU random generator state, in one torch::serialize
// archive. Rank 0 serializes and writes it atomically (temporary file, fsync, rename, fsync of
// the directory), so a crash leaves either the old checkpoint or the new one. To resume, rank 0
// reads the file and broadcasts its bytes, so the other nodes need no shared file system, and
// every rank loads the same bytes.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

namespace ddprun::workers {

struct TrainingPosition {
  std::int64_t epoch = 0;        // the epoch in progress
  std::int64_t epoch_step = 0;   // steps of that epoch already done
  std::int64_t global_step = 0;  // steps done since the start of training
  std::int64_t world_size = 1;   // when the checkpoint was taken (re-sharding on a change)
  std::int64_t batch_size = 0;
};

struct Checkpoint {
  TrainingPosition position;
  std::string arch;
  at::Tensor rng_states;  // uint8 [world_size, state bytes]: rank r's CPU generator state
};

// Serializes the module (parameters and buffers), the optimizer and the rest.
std::string save_checkpoint(const torch::nn::Module& module, const torch::optim::Optimizer& optimizer,
                            const Checkpoint& checkpoint);

// Loads what save_checkpoint wrote into an existing module and optimizer of the same shape;
// tensors land on `device`. Throws ConfigError when the bytes are not such a checkpoint or the
// architecture differs.
Checkpoint load_checkpoint(std::string_view bytes, torch::nn::Module& module,
                           torch::optim::Optimizer& optimizer, const std::string& expected_arch,
                           const torch::Device& device);

// temp file next to `path`, fsync, rename over `path`, fsync the directory. Throws Error with
// errno's text.
void write_file_atomically(const std::string& path, const std::string& bytes);
// The whole file as a 1-D uint8 tensor (populated_bytes), or nullopt when it does not exist.
// Throws Error when it exists but cannot be read.
std::optional<at::Tensor> read_file_if_exists(const std::string& path);

}  // namespace ddprun::workers
