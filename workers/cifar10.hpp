#pragma once
// CIFAR-10's binary format (cifar-10-batches-bin/data_batch_{1..5}.bin, test_batch.bin): records
// of 1 label byte (0..9) and 3072 pixel bytes (1024 red, 1024 green, 1024 blue, row-major
// 32x32). Nothing is downloaded.

#include <string>
#include <vector>

#include "workers/data.hpp"

namespace ddprun::workers {

inline constexpr int kCifarSide = 32;
inline constexpr std::size_t kCifarRecordBytes = 1 + 3 * kCifarSide * kCifarSide;

struct CifarArrays {
  at::Tensor images;  // uint8 [N, 3, 32, 32]
  at::Tensor labels;  // int64 [N]
};

// Reads and concatenates the files. Throws ConfigError naming the file when one cannot be read,
// its size is not a multiple of 3073 bytes, or a label is above 9.
CifarArrays read_cifar10(const std::vector<std::string>& files);

// The training files present in `dir` (data_batch_1.bin ... data_batch_5.bin, in order);
// throws ConfigError when there are none.
std::vector<std::string> cifar10_train_files(const std::string& dir);

// Normalized with CIFAR-10's per-channel mean and std. With `augment`, torchvision's
// RandomCrop(32, padding=4) and RandomHorizontalFlip, drawn per (seed, epoch, sample).
std::unique_ptr<Dataset> make_cifar10(CifarArrays arrays, bool augment, std::uint64_t seed);

}  // namespace ddprun::workers
