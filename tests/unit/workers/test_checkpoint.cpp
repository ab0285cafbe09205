// Checkpoints: round trip of model, optimizer and position; atomic replacement.

#include <catch2/catch.hpp>

#include <filesystem>

#include <torch/torch.h>

#include "common/error.hpp"
#include "testing/test_util.hpp"
#include "workers/byte_buffer.hpp"
#include "workers/checkpoint.hpp"
#include "workers/resnet.hpp"

using namespace ddprun::workers;
using ddprun::test::TempDir;

namespace {

// One SGD step so that the momentum buffers exist.
void step(ResNet& model, torch::optim::SGD& opt) {
  opt.zero_grad();
  torch::nn::functional::cross_entropy(model->forward(torch::rand({2, 3, 32, 32})),
                                       torch::tensor({1, 2}))
      .backward();
  opt.step();
}

torch::optim::SGDOptions sgd() { return torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-5); }

}  // namespace

TEST_CASE("checkpoint: model, optimizer, position and RNG states round-trip", "[workers][checkpoint]") {
  torch::manual_seed(0);
  ResNet a("resnet18", 10);
  torch::optim::SGD opt_a(a->parameters(), sgd());
  step(a, opt_a);
  Checkpoint saved;
  saved.arch = "resnet18";
  saved.position = {2, 3, 11, 4, 8};
  saved.rng_states = torch::randint(0, 255, {4, 16}, torch::kByte);
  const std::string bytes = save_checkpoint(*a, opt_a, saved);

  torch::manual_seed(1);
  ResNet b("resnet18", 10);
  torch::optim::SGD opt_b(b->parameters(), sgd());
  Checkpoint loaded = load_checkpoint(bytes, *b, opt_b, "resnet18", torch::kCPU);
  CHECK(loaded.position.epoch == 2);
  CHECK(loaded.position.epoch_step == 3);
  CHECK(loaded.position.global_step == 11);
  CHECK(loaded.position.world_size == 4);
  CHECK(loaded.position.batch_size == 8);
  CHECK(torch::equal(loaded.rng_states, saved.rng_states));
  auto pa = a->parameters();
  auto pb = b->parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) REQUIRE(torch::equal(pa[i], pb[i]));
  auto ba = a->buffers();
  auto bb = b->buffers();
  for (std::size_t i = 0; i < ba.size(); ++i) REQUIRE(torch::equal(ba[i], bb[i]));

  // Same momentum: one more identical step keeps the two models identical.
  torch::manual_seed(5);
  step(a, opt_a);
  torch::manual_seed(5);
  step(b, opt_b);
  for (std::size_t i = 0; i < pa.size(); ++i) REQUIRE(torch::equal(pa[i], pb[i]));
}

TEST_CASE("checkpoint: another architecture or garbage is refused", "[workers][checkpoint]") {
  ResNet a("resnet18", 10);
  torch::optim::SGD opt(a->parameters(), sgd());
  Checkpoint c;
  c.arch = "resnet18";
  const std::string bytes = save_checkpoint(*a, opt, c);
  CHECK_THROWS_AS(load_checkpoint(bytes, *a, opt, "resnet34", torch::kCPU), ddprun::ConfigError);
  CHECK_THROWS_WITH(load_checkpoint(bytes, *a, opt, "resnet34", torch::kCPU), Catch::Matchers::Contains("resnet18"));
  CHECK_THROWS_AS(load_checkpoint("not a checkpoint", *a, opt, "resnet18", torch::kCPU), ddprun::ConfigError);
  CHECK_THROWS_WITH(load_checkpoint("not a checkpoint", *a, opt, "resnet18", torch::kCPU), Catch::Matchers::Contains("not a ddp_resnet checkpoint"));
}

TEST_CASE("checkpoint: atomic write replaces the file and leaves no temporary", "[workers][checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ckpt.pth");
  CHECK_FALSE(read_file_if_exists(path));
  write_file_atomically(path, "first");
  write_file_atomically(path, std::string(1 << 20, 'x'));
  const auto read = read_file_if_exists(path);
  REQUIRE(read);
  CHECK(byte_view(*read) == std::string(1 << 20, 'x'));
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++files;
  CHECK(files == 1);
  CHECK_THROWS_AS(write_file_atomically(dir.file("no/such/dir/f"), "x"), ddprun::Error);
}
