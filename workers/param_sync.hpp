#pragma once
// --verify_sync: are the model replicas identical on every rank?

#include <cstdint>
#include <string>

#include <torch/nn/module.h>

#include "workers/distributed.hpp"

namespace ddprun::workers {

struct ParamFingerprint {
  double checksum = 0;      // sum of every parameter element, in double
  std::uint64_t digest = 0; // FNV-1a over the parameters' bytes, in order (bit-exact)
};

ParamFingerprint fingerprint(const torch::nn::Module& module);

// Collective. Returns the fingerprint when every rank's equals rank 0's; otherwise throws
// OutOfSyncError listing each rank's values.
ParamFingerprint verify_in_sync(const torch::nn::Module& module, Distributed& dist);

}  // namespace ddprun::workers
