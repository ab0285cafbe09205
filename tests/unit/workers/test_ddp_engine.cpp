// The DDP engine against the definition of data parallelism: W ranks with batch b on their
// shards take the same steps as 1 rank with batch W*b on the union (for a model without batch
// norm, whose loss is a mean over the batch). Ranks run as threads; Catch2's assertions are not
// thread-safe, so the ranks record and the test thread checks. Models and data are made on the
// test thread, before the ranks start: threads share torch's one global generator.

#include <catch2/catch.hpp>

#include <mutex>

#include <torch/torch.h>

#include "ranks_in_threads.hpp"
#include "workers/ddp_engine.hpp"
#include "workers/worker_error.hpp"

using namespace ddprun::workers;
using ddprun::workers::test::run_ranks;

namespace {

namespace nn = torch::nn;

// conv -> relu -> pool -> fc1 -> relu -> fc2, plus `extra`, used only when asked.
class NetImpl final : public nn::Module {
 public:
  NetImpl()
      : conv(register_module("conv", nn::Conv2d(nn::Conv2dOptions(3, 8, 3).padding(1)))),
        fc1(register_module("fc1", nn::Linear(8 * 8 * 8, 64))),
        fc2(register_module("fc2", nn::Linear(64, 5))),
        extra(register_module("extra", nn::Linear(64, 5))) {}
  torch::Tensor forward(torch::Tensor x, bool use_extra = false) {
    x = torch::max_pool2d(torch::relu(conv(x)), 2).flatten(1);
    x = torch::relu(fc1(x));
    return use_extra ? fc2(x) + extra(x) : fc2(x);
  }
  nn::Conv2d conv;
  nn::Linear fc1, fc2, extra;
};
TORCH_MODULE(Net);

constexpr int kSteps = 3;
constexpr std::int64_t kBatch = 4;  // per rank

// Small buckets, so that this small model still has several.
DdpOptions small_buckets() {
  DdpOptions o;
  o.first_bucket_bytes = 1024;
  o.bucket_bytes = 64 * 1024;
  return o;
}

struct Data {
  torch::Tensor x, y;  // all steps, the union of all ranks' shards
};

Data make_data(int world) {
  torch::manual_seed(123);
  return {torch::rand({kSteps, world * kBatch, 3, 16, 16}),
          torch::randint(0, 5, {kSteps, world * kBatch}, torch::kLong)};
}

Net make_net(std::uint64_t seed) {
  torch::manual_seed(seed);
  return Net();
}

// Trains `net` for kSteps on rank `rank`'s shards; returns the engine's bucket count and how
// many buckets the last step started during backward.
std::pair<std::size_t, std::size_t> train(Net net, Distributed& dist, const Data& data) {
  DdpEngine engine(*net, dist.data(), small_buckets());
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  const std::int64_t b = data.x.size(1) / dist.world_size();
  for (int step = 0; step < kSteps; ++step) {
    auto x = data.x[step].narrow(0, dist.rank() * b, b);
    auto y = data.y[step].narrow(0, dist.rank() * b, b);
    engine.before_forward();
    opt.zero_grad();
    torch::nn::functional::cross_entropy(net->forward(x, /*use_extra=*/true), y).backward();
    engine.finish_backward();
    opt.step();
  }
  return {engine.buckets().size(), engine.buckets_started_in_backward()};
}

double max_diff(Net a, Net b) {
  double m = 0;
  auto pa = a->parameters();
  auto pb = b->parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    m = std::max(m, (pa[i] - pb[i]).abs().max().item<double>());
  }
  return m;
}

}  // namespace

TEST_CASE("ddp engine: 2 ranks x batch b == 1 rank x batch 2b", "[workers][ddp]") {
  const Data data = make_data(2);
  Net single = make_net(0);
  run_ranks(1, [&](Distributed& dist) { train(single, dist, data); });

  // Rank 1 starts from other weights: the engine must replace them with rank 0's.
  std::vector<Net> nets{make_net(0), make_net(99)};
  REQUIRE(max_diff(nets[0], nets[1]) > 0.01);
  std::vector<std::pair<std::size_t, std::size_t>> stats(2);
  run_ranks(2, [&](Distributed& dist) {
    stats[static_cast<std::size_t>(dist.rank())] = train(nets[static_cast<std::size_t>(dist.rank())], dist, data);
  });

  CHECK(max_diff(nets[0], nets[1]) == 0.0);  // replicas bit-identical
  CHECK(max_diff(nets[0], single) < 1e-5);   // and equal to the big-batch run
  CHECK(max_diff(single, make_net(0)) > 1e-3);  // (training did move the weights)
  // Several buckets, all started from the autograd hooks, i.e. during backward. (With a
  // parameter unused in forward, nothing could start before finish_backward(): buckets start
  // in order, and the unused one is in the first bucket.)
  CHECK(stats[0].first >= 3);
  CHECK(stats[0].second == stats[0].first);
  CHECK(stats[1] == stats[0]);
}

TEST_CASE("ddp engine: buckets in reverse order and the first one small", "[workers][ddp]") {
  Net net = make_net(0);
  std::vector<DdpEngine::Bucket> buckets;
  std::size_t default_buckets = 0;
  run_ranks(1, [&](Distributed& dist) {
    buckets = DdpEngine(*net, dist.data(), small_buckets()).buckets();
    default_buckets = DdpEngine(*net, dist.data()).buckets().size();
  });
  const std::size_t n = net->parameters().size();
  std::vector<std::size_t> order;
  for (const auto& b : buckets) {
    order.insert(order.end(), b.params.begin(), b.params.end());
    CHECK(b.flat.numel() * 4 == static_cast<std::int64_t>(b.bytes));
  }
  REQUIRE(order.size() == n);
  for (std::size_t k = 0; k < n; ++k) CHECK(order[k] == n - 1 - k);  // last parameter first
  // The first bucket closes as soon as it reaches 1 KiB, the others at 64 KiB.
  CHECK(buckets.front().bytes >= 1024);
  CHECK(buckets.front().bytes < 64 * 1024);
  CHECK(buckets.size() >= 3);
  CHECK(default_buckets == 1);  // torch's sizes: one bucket for this 140 KB model
}

TEST_CASE("ddp engine: a parameter without gradient counts as zero", "[workers][ddp]") {
  // `extra` is used on rank 0 only: both ranks must end with rank 0's gradient / 2 for it,
  // and an all-zero gradient when nobody uses it.
  const Data data = make_data(2);
  std::vector<Net> nets{make_net(0), make_net(0)};
  std::vector<torch::Tensor> extra_grads(2), fc2_grads(2), unused_grads(2);
  run_ranks(2, [&](Distributed& dist) {
    const auto r = static_cast<std::size_t>(dist.rank());
    Net net = nets[r];
    DdpEngine engine(*net, dist.data(), small_buckets());
    auto x = data.x[0].narrow(0, dist.rank() * kBatch, kBatch);
    auto y = data.y[0].narrow(0, dist.rank() * kBatch, kBatch);
    torch::nn::functional::cross_entropy(net->forward(x, /*use_extra=*/r == 0), y).backward();
    engine.finish_backward();
    extra_grads[r] = net->extra->weight.grad().clone();
    fc2_grads[r] = net->fc2->weight.grad().clone();
    net->zero_grad();  // a second iteration where nobody uses it
    torch::nn::functional::cross_entropy(net->forward(x), y).backward();
    engine.finish_backward();
    unused_grads[r] = net->extra->weight.grad().clone();
  });
  CHECK(torch::equal(extra_grads[0], extra_grads[1]));
  CHECK(extra_grads[0].abs().sum().item<double>() > 0);
  CHECK(torch::equal(fc2_grads[0], fc2_grads[1]));
  for (const auto& g : unused_grads) CHECK(g.abs().sum().item<double>() == 0.0);
}

TEST_CASE("ddp engine: a second backward without finish_backward is an error", "[workers][ddp]") {
  std::string error;
  Net net = make_net(0);  // on the test thread: the rank's thread draws from no generator
  const auto x = torch::rand({2, 3, 16, 16});
  run_ranks(1, [&](Distributed& dist) {
    DdpEngine engine(*net, dist.data(), small_buckets());
    net->forward(x).sum().backward();
    try {
      net->forward(x).sum().backward();
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  CHECK_THAT(error, Catch::Matchers::Contains("before finish_backward()"));
}

TEST_CASE("ddp engine: buffers follow rank 0 before every forward", "[workers][ddp]") {
  std::vector<bool> follows(2);
  std::vector<nn::BatchNorm2d> bns{nn::BatchNorm2d(3), nn::BatchNorm2d(3)};
  run_ranks(2, [&](Distributed& dist) {
    nn::BatchNorm2d bn = bns[static_cast<std::size_t>(dist.rank())];
    DdpEngine engine(*bn, dist.data());
    bn->running_mean.fill_(static_cast<float>(dist.rank() + 1));  // diverge
    engine.before_forward();
    follows[static_cast<std::size_t>(dist.rank())] = bn->running_mean.eq(1.0F).all().item<bool>();
  });
  CHECK(follows[0]);
  CHECK(follows[1]);
}

TEST_CASE("ddp engine: the initial broadcast is skipped only when asked", "[workers][ddp]") {
  // Ranks that loaded the same checkpoint skip it; here their states differ on purpose, so a
  // skipped broadcast shows as each rank keeping its own weights.
  std::vector<Net> nets{make_net(1), make_net(2), make_net(1), make_net(2)};
  REQUIRE(max_diff(nets[0], nets[1]) > 0);
  run_ranks(2, [&](Distributed& dist) {
    const auto r = static_cast<std::size_t>(dist.rank());
    DdpOptions skip;
    skip.broadcast_initial_state = false;
    DdpEngine skipping(*nets[r], dist.data(), skip);
    DdpEngine broadcasting(*nets[2 + r], dist.data());
  });
  CHECK(max_diff(nets[0], make_net(1)) == 0);  // not broadcast: each kept its own
  CHECK(max_diff(nets[1], make_net(2)) == 0);
  CHECK(max_diff(nets[2], make_net(1)) == 0);  // broadcast: rank 0's everywhere
  CHECK(max_diff(nets[3], make_net(1)) == 0);
}
