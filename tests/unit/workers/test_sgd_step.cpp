// foreach_sgd_step: the same parameters and momentum buffers as torch::optim::SGD, bit for bit
// on the CPU, and state that SGD itself finds again (checkpoints are interchangeable).

#include <catch2/catch.hpp>

#include <vector>

#include <torch/torch.h>

#include "workers/sgd_step.hpp"

using namespace ddprun::workers;

namespace {

// Parameters of a few shapes (a conv weight in channels_last too) and one that never gets a
// gradient; the same values in every call.
std::vector<torch::Tensor> make_params() {
  torch::manual_seed(7);
  std::vector<torch::Tensor> params{
      torch::randn({8, 4, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast),
      torch::randn({8}), torch::randn({5, 8}), torch::randn({3})};
  for (auto& p : params) p.set_requires_grad(true);
  return params;
}

// The gradients of step `k`, parameter `i` (none for the last parameter).
void set_grads(std::vector<torch::Tensor>& params, int k) {
  for (std::size_t i = 0; i + 1 < params.size(); ++i) {
    torch::manual_seed(100 * k + static_cast<int>(i));
    params[i].mutable_grad() = torch::randn_like(params[i]);
  }
}

void expect_identical(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i], b[i]));
}

}  // namespace

TEST_CASE("sgd step: foreach kernels give SGD's parameters bit for bit", "[workers][sgd]") {
  const int variant = GENERATE(0, 1, 2, 3);
  torch::optim::SGDOptions options(0.1);
  switch (variant) {
    case 0: options.momentum(0.9).weight_decay(1e-5); break;  // ddp_resnet's
    case 1: options.lr(0.05); break;                          // plain gradient descent
    case 2: options.momentum(0.8).dampening(0.1); break;
    default: options.momentum(0.9).nesterov(true).weight_decay(1e-3); break;
  }
  INFO("variant " << variant);
  auto reference = make_params();
  auto ours = make_params();
  const auto untouched = ours.back().detach().clone();
  torch::optim::SGD reference_opt(reference, options);
  torch::optim::SGD our_opt(ours, options);
  for (int k = 0; k < 4; ++k) {
    set_grads(reference, k);
    set_grads(ours, k);
    reference_opt.step();
    foreach_sgd_step(our_opt);
  }
  expect_identical(reference, ours);
  CHECK(torch::equal(ours.back(), untouched));           // no gradient: not stepped
  CHECK(our_opt.state().size() == reference_opt.state().size());
}

TEST_CASE("sgd step: SGD continues from the momentum buffers foreach_sgd_step left", "[workers][sgd]") {
  const auto options = torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-5);
  auto reference = make_params();
  auto mixed = make_params();
  torch::optim::SGD reference_opt(reference, options);
  torch::optim::SGD mixed_opt(mixed, options);
  for (int k = 0; k < 4; ++k) {
    set_grads(reference, k);
    set_grads(mixed, k);
    reference_opt.step();
    // Alternate: a buffer SGD cannot find would restart momentum and change the result.
    if (k % 2 == 0) {
      foreach_sgd_step(mixed_opt);
    } else {
      mixed_opt.step();
    }
  }
  expect_identical(reference, mixed);
  CHECK(mixed_opt.state().size() == 3);
}
