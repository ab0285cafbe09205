#include "workers/sampler.hpp"

#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

namespace ddprun::workers {

DistributedSampler::DistributedSampler(std::size_t dataset_size, int world_size, int rank,
                                       bool shuffle, std::uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size),
      world_size_(world_size),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (dataset_size == 0) throw std::invalid_argument("DistributedSampler: empty data set");
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw std::invalid_argument("DistributedSampler: rank " + std::to_string(rank) +
                                " out of range for world size " + std::to_string(world_size));
  }
  const auto world = static_cast<std::size_t>(world_size);
  num_samples_ = drop_last ? dataset_size / world : (dataset_size + world - 1) / world;
  if (num_samples_ == 0) {
    throw std::invalid_argument("DistributedSampler: " + std::to_string(dataset_size) +
                                " samples cannot give every one of " + std::to_string(world) +
                                " ranks one with drop_last");
  }
}

std::vector<std::size_t> DistributedSampler::indices() const {
  std::vector<std::size_t> order(dataset_size_);
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (shuffle_) {
    // The engine's output is specified by the standard, unlike std::shuffle's algorithm, so
    // the order is the same with every standard library.
    std::mt19937_64 rng(seed_ + epoch_);
    for (std::size_t i = order.size() - 1; i > 0; --i) {
      std::size_t j = static_cast<std::size_t>(rng() % (i + 1));
      std::swap(order[i], order[j]);
    }
  }
  const std::size_t total = total_size();
  if (order.size() > total) {
    order.resize(total);  // drop_last: cut the tail
  } else {
    // Pad with the permutation's head (repeated when the data set is smaller than the padding).
    for (std::size_t i = 0; order.size() < total; ++i) order.push_back(order[i % dataset_size_]);
  }
  std::vector<std::size_t> mine;
  mine.reserve(num_samples_);
  for (std::size_t i = static_cast<std::size_t>(rank_); i < total;
       i += static_cast<std::size_t>(world_size_)) {
    mine.push_back(order[i]);
  }
  return mine;
}

}  // namespace ddprun::workers
