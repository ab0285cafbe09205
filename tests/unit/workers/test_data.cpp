// Training data: the CIFAR-10 binary reader on a tiny generated file, and the synthetic sets.

#include <catch2/catch.hpp>

#include <fstream>

#include <torch/torch.h>

#include "common/error.hpp"
#include "testing/test_util.hpp"
#include "workers/cifar10.hpp"
#include "workers/data.hpp"

using namespace ddprun::workers;
using ddprun::test::TempDir;

namespace {

// Record i: label i % 10, red = i, green = 100 + i, blue = pixel index % 256.
void write_cifar(const std::string& path, int records, int first_label = 0) {
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < records; ++i) {
    out.put(static_cast<char>((first_label + i) % 10));
    for (int p = 0; p < 1024; ++p) out.put(static_cast<char>(i));
    for (int p = 0; p < 1024; ++p) out.put(static_cast<char>(100 + i));
    for (int p = 0; p < 1024; ++p) out.put(static_cast<char>(p % 256));
  }
}

std::vector<std::size_t> all_indices(std::size_t n) {
  std::vector<std::size_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

}  // namespace

TEST_CASE("cifar10: records are read into images and labels", "[workers][data]") {
  TempDir dir;
  write_cifar(dir.file("data_batch_1.bin"), 3);
  write_cifar(dir.file("data_batch_2.bin"), 2, 3);
  auto files = cifar10_train_files(dir.path());
  REQUIRE(files.size() == 2);
  CifarArrays a = read_cifar10(files);
  REQUIRE(a.images.sizes() == std::vector<std::int64_t>{5, 3, 32, 32});
  CHECK(a.images.scalar_type() == torch::kByte);
  CHECK(a.labels.sizes() == std::vector<std::int64_t>{5});
  for (int i = 0; i < 5; ++i) {
    const int j = i < 3 ? i : i - 3;  // position within its file
    CHECK(a.labels[i].item<std::int64_t>() == i % 10);
    CHECK(a.images[i][0].eq(j).all().item<bool>());
    CHECK(a.images[i][1].eq(100 + j).all().item<bool>());
    CHECK(a.images[i][2][0][5].item<int>() == 5);    // row 0, column 5: pixel 5
    CHECK(a.images[i][2][1][0].item<int>() == 32);   // row 1, column 0: pixel 32
  }
}

TEST_CASE("cifar10: a truncated file or a bad label is named", "[workers][data]") {
  TempDir dir;
  write_cifar(dir.file("ok.bin"), 1);
  {
    std::ofstream out(dir.file("short.bin"), std::ios::binary);
    out << std::string(3000, 'x');
  }
  CHECK_THROWS_AS(read_cifar10({dir.file("short.bin")}), ddprun::ConfigError);
  CHECK_THROWS_WITH(read_cifar10({dir.file("short.bin")}), Catch::Matchers::Contains("short.bin") && Catch::Matchers::Contains("3073"));
  {
    std::ofstream out(dir.file("label.bin"), std::ios::binary);
    out.put(static_cast<char>(12));
    out << std::string(3072, '\0');
  }
  CHECK_THROWS_AS(read_cifar10({dir.file("label.bin")}), ddprun::ConfigError);
  CHECK_THROWS_WITH(read_cifar10({dir.file("label.bin")}), Catch::Matchers::Contains("label 12"));
  CHECK_THROWS_AS(read_cifar10({dir.file("missing.bin")}), ddprun::ConfigError);
  CHECK_THROWS_WITH(read_cifar10({dir.file("missing.bin")}), Catch::Matchers::Contains("missing.bin"));
  TempDir empty;
  CHECK_THROWS_AS(cifar10_train_files(empty.path()), ddprun::ConfigError);
  CHECK_THROWS_WITH(cifar10_train_files(empty.path()), Catch::Matchers::Contains("data_batch_1.bin"));
}

TEST_CASE("cifar10: normalized batches and augmentation deterministic per epoch", "[workers][data]") {
  TempDir dir;
  write_cifar(dir.file("data_batch_1.bin"), 8);
  auto plain = make_cifar10(read_cifar10({dir.file("data_batch_1.bin")}), false, 1);
  std::vector<std::size_t> idx{3, 1};
  Batch b = plain->batch(idx, 0);
  CHECK(b.images.sizes() == std::vector<std::int64_t>{2, 3, 32, 32});
  CHECK(b.labels[0].item<std::int64_t>() == 3);
  CHECK(b.images[0][0][0][0].item<float>() == Approx((3 / 255.0 - 0.4914) / 0.2023).epsilon(1e-5));
  CHECK(plain->num_classes() == 10);
  CHECK_THROWS_AS(plain->batch(std::vector<std::size_t>{8}, 0), std::out_of_range);

  auto aug = make_cifar10(read_cifar10({dir.file("data_batch_1.bin")}), true, 1);
  auto all = all_indices(8);
  Batch e0 = aug->batch(all, 0);
  CHECK(torch::equal(e0.images, aug->batch(all, 0).images));   // same epoch: same crops
  CHECK_FALSE(torch::equal(e0.images, aug->batch(all, 1).images));  // next epoch: others
  CHECK(torch::equal(e0.labels, plain->batch(all, 0).labels));
}

TEST_CASE("synthetic: the example's fixed batch, label 0, same every step", "[workers][data]") {
  auto fixed = make_fixed_synthetic(64, 8, 32, 1000, 5);
  CHECK(fixed->size() == 64);
  auto idx = all_indices(8);
  Batch a = fixed->batch(idx, 0);
  Batch b = fixed->batch(idx, 3);
  CHECK(a.images.sizes() == std::vector<std::int64_t>{8, 3, 32, 32});
  CHECK(torch::equal(a.images, b.images));
  CHECK(a.labels.eq(0).all().item<bool>());
  CHECK(a.images.min().item<float>() >= 0.0F);
  CHECK(a.images.max().item<float>() < 1.0F);
}

TEST_CASE("synthetic: learnable samples are pure functions of the seed and index", "[workers][data]") {
  auto a = make_learnable_synthetic(100, 16, 10, 7);
  auto b = make_learnable_synthetic(100, 16, 10, 7);
  std::vector<std::size_t> idx{42, 3, 13};
  Batch x = a->batch(idx, 0);
  CHECK(torch::equal(x.images, b->batch(idx, 5).images));
  CHECK(x.labels[0].item<std::int64_t>() == 2);
  CHECK(x.labels[1].item<std::int64_t>() == 3);
  CHECK(x.labels[2].item<std::int64_t>() == 3);
  // Same label, different noise: images differ but stay closer to each other than to the
  // other classes' (the template is what makes the task learnable).
  const double same = (x.images[1] - x.images[2]).abs().mean().item<double>();
  const double other = (x.images[0] - x.images[1]).abs().mean().item<double>();
  CHECK(same > 0);
  CHECK(same < other);
  auto c = make_learnable_synthetic(100, 16, 10, 8);
  CHECK_FALSE(torch::equal(x.images, c->batch(idx, 0).images));
}
