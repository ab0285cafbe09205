#include "workers/data.hpp"

#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

namespace ddprun::workers {
namespace {

at::Generator generator(std::uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

void check_index(std::size_t index, std::size_t size) {
  if (index >= size) {
    throw std::out_of_range("sample " + std::to_string(index) + " of a data set of " +
                            std::to_string(size));
  }
}

class FixedSynthetic final : public Dataset {
 public:
  FixedSynthetic(std::size_t size, int batch_size, int image_size, std::int64_t num_classes,
                 std::uint64_t seed)
      : size_(size), num_classes_(num_classes) {
    images_ = at::rand({batch_size, 3, image_size, image_size}, generator(seed));
    labels_ = at::zeros({batch_size}, at::kLong);
  }
  std::size_t size() const override { return size_; }
  std::int64_t num_classes() const override { return num_classes_; }
  Batch batch(std::span<const std::size_t> indices, std::uint64_t) const override {
    for (std::size_t i : indices) check_index(i, size_);
    const auto n = std::min<std::int64_t>(static_cast<std::int64_t>(indices.size()), images_.size(0));
    return {images_.narrow(0, 0, n), labels_.narrow(0, 0, n)};
  }
  void pin_memory() override {
    images_ = images_.pin_memory();
    labels_ = labels_.pin_memory();
  }

 private:
  std::size_t size_;
  std::int64_t num_classes_;
  at::Tensor images_;
  at::Tensor labels_;
};

class LearnableSynthetic final : public Dataset {
 public:
  LearnableSynthetic(std::size_t size, int image_size, std::int64_t num_classes,
                     std::uint64_t seed)
      : size_(size), image_size_(image_size), num_classes_(num_classes), seed_(seed) {
    for (std::int64_t c = 0; c < num_classes; ++c) {
      at::Tensor small = at::rand({1, 3, 4, 4}, generator(seed + static_cast<std::uint64_t>(c)));
      templates_.push_back(
          at::upsample_nearest2d(small, {image_size, image_size}).squeeze(0).contiguous());
    }
  }
  std::size_t size() const override { return size_; }
  std::int64_t num_classes() const override { return num_classes_; }
  Batch batch(std::span<const std::size_t> indices, std::uint64_t) const override {
    const auto n = static_cast<std::int64_t>(indices.size());
    at::Tensor images = at::empty({n, 3, image_size_, image_size_});
    at::Tensor labels = at::empty({n}, at::kLong);
    auto* label = labels.data_ptr<std::int64_t>();
    for (std::int64_t k = 0; k < n; ++k) {
      const std::size_t i = indices[static_cast<std::size_t>(k)];
      check_index(i, size_);
      const auto c = static_cast<std::int64_t>(i % static_cast<std::size_t>(num_classes_));
      at::Tensor noise = at::rand({3, image_size_, image_size_},
                                  generator(seed_ * 1000003 + static_cast<std::uint64_t>(i) + 1000));
      images[k].copy_(templates_[static_cast<std::size_t>(c)] * 0.5 + noise * 0.5);
      label[k] = c;
    }
    return {images, labels};
  }

 private:
  std::size_t size_;
  int image_size_;
  std::int64_t num_classes_;
  std::uint64_t seed_;
  std::vector<at::Tensor> templates_;
};

}  // namespace

std::unique_ptr<Dataset> make_fixed_synthetic(std::size_t size, int batch_size, int image_size,
                                              std::int64_t num_classes, std::uint64_t seed) {
  return std::make_unique<FixedSynthetic>(size, batch_size, image_size, num_classes, seed);
}

std::unique_ptr<Dataset> make_learnable_synthetic(std::size_t size, int image_size,
                                                  std::int64_t num_classes, std::uint64_t seed) {
  return std::make_unique<LearnableSynthetic>(size, image_size, num_classes, seed);
}

}  // namespace ddprun::workers
