#include "workers/cifar10.hpp"

#include <filesystem>
#include <fstream>
#include <random>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "common/error.hpp"

namespace ddprun::workers {
namespace {

namespace fs = std::filesystem;

constexpr int kPad = 4;

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class Cifar10 final : public Dataset {
 public:
  Cifar10(CifarArrays arrays, bool augment, std::uint64_t seed)
      : arrays_(std::move(arrays)), augment_(augment), seed_(seed) {
    mean_ = at::tensor({0.4914F, 0.4822F, 0.4465F}).view({1, 3, 1, 1});
    std_ = at::tensor({0.2023F, 0.1994F, 0.2010F}).view({1, 3, 1, 1});
  }
  std::size_t size() const override { return static_cast<std::size_t>(arrays_.images.size(0)); }
  std::int64_t num_classes() const override { return 10; }

  Batch batch(std::span<const std::size_t> indices, std::uint64_t epoch) const override {
    std::vector<std::int64_t> idx;
    for (std::size_t i : indices) {
      if (i >= size()) throw std::out_of_range(fmt::format("sample {} of {}", i, size()));
      idx.push_back(static_cast<std::int64_t>(i));
    }
    at::Tensor index = at::tensor(idx, at::kLong);
    at::Tensor images = arrays_.images.index_select(0, index).to(at::kFloat).div_(255.0);
    if (augment_) {
      // Pad with black pixels before normalizing, like RandomCrop on the PIL image.
      at::Tensor padded = at::constant_pad_nd(images, {kPad, kPad, kPad, kPad}, 0.0);
      for (std::size_t k = 0; k < indices.size(); ++k) {
        std::mt19937_64 rng(mix(seed_ ^ mix(epoch ^ mix(indices[k]))));
        const auto dy = static_cast<std::int64_t>(rng() % (2 * kPad + 1));
        const auto dx = static_cast<std::int64_t>(rng() % (2 * kPad + 1));
        const bool flip = (rng() & 1) != 0;
        at::Tensor crop = padded[static_cast<std::int64_t>(k)]
                              .narrow(1, dy, kCifarSide)
                              .narrow(2, dx, kCifarSide);
        images[static_cast<std::int64_t>(k)].copy_(flip ? crop.flip({2}) : crop);
      }
    }
    images = (images - mean_) / std_;
    return {images.contiguous(), arrays_.labels.index_select(0, index)};
  }

 private:
  CifarArrays arrays_;
  bool augment_;
  std::uint64_t seed_;
  at::Tensor mean_, std_;
};

}  // namespace

CifarArrays read_cifar10(const std::vector<std::string>& files) {
  std::vector<at::Tensor> images;
  std::vector<at::Tensor> labels;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw ConfigError(fmt::format("cannot open CIFAR-10 file {}", file));
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.empty() || bytes.size() % kCifarRecordBytes != 0) {
      throw ConfigError(fmt::format("{}: {} bytes is not a whole number of {}-byte CIFAR-10 "
                                    "records", file, bytes.size(), kCifarRecordBytes));
    }
    const auto n = static_cast<std::int64_t>(bytes.size() / kCifarRecordBytes);
    at::Tensor records = at::from_blob(bytes.data(), {n, static_cast<std::int64_t>(kCifarRecordBytes)},
                                       at::kByte).clone();
    at::Tensor label = records.select(1, 0).to(at::kLong);
    if (label.max().item<std::int64_t>() > 9) {
      const auto bad = label.gt(9).nonzero()[0][0].item<std::int64_t>();
      throw ConfigError(fmt::format("{}: record {} has label {}, expected 0..9", file, bad,
                                    label[bad].item<std::int64_t>()));
    }
    images.push_back(records.narrow(1, 1, 3 * kCifarSide * kCifarSide)
                         .reshape({n, 3, kCifarSide, kCifarSide}));
    labels.push_back(label);
  }
  if (images.empty()) throw ConfigError("no CIFAR-10 files given");
  return {at::cat(images).contiguous(), at::cat(labels)};
}

std::vector<std::string> cifar10_train_files(const std::string& dir) {
  std::vector<std::string> files;
  for (int i = 1; i <= 5; ++i) {
    fs::path p = fs::path(dir) / fmt::format("data_batch_{}.bin", i);
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) files.push_back(p.string());
  }
  if (files.empty()) {
    throw ConfigError(fmt::format("--data_dir={}: no CIFAR-10 training batches "
                                  "(data_batch_1.bin ... data_batch_5.bin, the binary version "
                                  "of CIFAR-10); or use --use_syn", dir));
  }
  return files;
}

std::unique_ptr<Dataset> make_cifar10(CifarArrays arrays, bool augment, std::uint64_t seed) {
  return std::make_unique<Cifar10>(std::move(arrays), augment, seed);
}

}  // namespace ddprun::workers
