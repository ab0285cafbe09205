#pragma once
// The distributed sampler: torch.utils.data.DistributedSampler's contract in C++. Each rank gets
// a disjoint shard of one permutation of the data set; the permutation is a pure function of
// (seed, epoch), so every rank computes the same one without talking to the others; without
// drop_last the permutation is padded with its own head so that every rank gets the same number
// of samples (and so the same number of steps). The shuffle is std::mt19937_64 + Fisher-Yates,
// not bit-identical to torch.randperm.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ddprun::workers {

class DistributedSampler {
 public:
  // Throws std::invalid_argument for an empty data set, world_size < 1 or rank out of range, or
  // drop_last with fewer samples than ranks.
  DistributedSampler(std::size_t dataset_size, int world_size, int rank, bool shuffle,
                     std::uint64_t seed, bool drop_last = false);

  // Selects the permutation; call at the start of every epoch.
  void set_epoch(std::uint64_t epoch) { epoch_ = epoch; }
  std::uint64_t epoch() const { return epoch_; }

  // This rank's sample indices for the current epoch, in the order to visit them.
  std::vector<std::size_t> indices() const;
  // How many indices() returns: ceil(N / world) (floor with drop_last).
  std::size_t num_samples() const { return num_samples_; }
  // num_samples() * world_size.
  std::size_t total_size() const { return num_samples_ * static_cast<std::size_t>(world_size_); }

 private:
  std::size_t dataset_size_;
  int world_size_;
  int rank_;
  bool shuffle_;
  std::uint64_t seed_;
  bool drop_last_;
  std::uint64_t epoch_ = 0;
  std::size_t num_samples_;
};

}  // namespace ddprun::workers
