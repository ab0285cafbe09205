#pragma once
// Training data: an indexable data set that assembles a batch from sample indices (chosen by
// the DistributedSampler). Every sample is a pure function of (seed, index), plus the epoch for
// augmentation, so a resumed run sees exactly the samples an uninterrupted one would.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include <ATen/Tensor.h>

namespace ddprun::workers {

struct Batch {
  at::Tensor images;  // float32 [B, 3, H, W], CPU, contiguous
  at::Tensor labels;  // int64 [B], CPU
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::size_t size() const = 0;
  virtual std::int64_t num_classes() const = 0;
  // Throws std::out_of_range for an index >= size().
  virtual Batch batch(std::span<const std::size_t> indices, std::uint64_t epoch) const = 0;
  // Moves what the data set keeps between batches into page-locked memory (CUDA training:
  // asynchronous host-to-device copies). Only for a libtorch with CUDA.
  virtual void pin_memory() {}
};

// The Python example's synthetic data: one batch of uniform random images, all labelled 0,
// returned for every step (a throughput benchmark: no data cost). `size` only sets the epoch
// length through the sampler. Every rank draws the same batch from `seed`.
std::unique_ptr<Dataset> make_fixed_synthetic(std::size_t size, int batch_size, int image_size,
                                              std::int64_t num_classes, std::uint64_t seed);

// A learnable synthetic task: sample i has label i % num_classes and the image
// 0.5 * template[label] + 0.5 * noise_i, where template[c] is a random 4x4 colour pattern
// scaled up (nearest) to the image size, drawn from a generator seeded with seed+c, and noise_i
// is uniform noise from a generator seeded with seed*1000003+i+1000 (torch's CPU generator,
// so scripts/reference_ddp.py draws the very same images). The label follows from the image.
std::unique_ptr<Dataset> make_learnable_synthetic(std::size_t size, int image_size,
                                                  std::int64_t num_classes, std::uint64_t seed);

}  // namespace ddprun::workers
