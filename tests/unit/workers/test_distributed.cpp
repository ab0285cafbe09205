// The control-group helpers and --verify_sync, with ranks as threads over a HashStore.
// (Catch2 assertions are not thread-safe: the ranks record, the test thread checks.)

#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <cstring>

#include "ranks_in_threads.hpp"
#include "workers/byte_buffer.hpp"
#include "testing/test_util.hpp"
#include "workers/param_sync.hpp"
#include "workers/worker_error.hpp"

using namespace ddprun::workers;
using ddprun::workers::test::run_ranks;

TEST_CASE("distributed: bytes from rank 0 and allgather and allreduce", "[workers][dist]") {
  struct Seen {
    std::string bytes, empty;
    std::vector<std::vector<std::int64_t>> all;
    double sum = 0;
  };
  std::vector<Seen> seen(3);
  run_ranks(3, [&](Distributed& dist) {
    Seen& s = seen[static_cast<std::size_t>(dist.rank())];
    const std::string sent("checkpoint\0bytes", 16);
    at::Tensor bytes;
    if (dist.rank() == 0) {
      bytes = populated_bytes(sent.size());
      std::memcpy(bytes.data_ptr(), sent.data(), sent.size());
    }
    dist.broadcast_bytes(bytes, 0);
    s.bytes = std::string(byte_view(bytes));
    // Root has none (undefined): every rank ends with none, whatever it held.
    at::Tensor none;
    if (dist.rank() == 1) none = at::ones({7}, at::kByte);
    dist.broadcast_bytes(none, 0);
    s.empty = std::string(byte_view(none));
    s.all = dist.allgather_int64({dist.rank(), 10 * dist.rank()});
    s.sum = dist.allreduce_sum(0.5 + dist.rank());
    dist.barrier();
  });
  for (const Seen& s : seen) {
    CHECK(s.bytes == std::string("checkpoint\0bytes", 16));
    CHECK(s.empty.empty());
    REQUIRE(s.all.size() == 3);
    for (std::int64_t r = 0; r < 3; ++r) {
      CHECK(s.all[static_cast<std::size_t>(r)] == std::vector<std::int64_t>{r, 10 * r});
    }
    CHECK(s.sum == 4.5);
  }
}

TEST_CASE("verify_sync: equal replicas pass and one changed weight is caught", "[workers][dist]") {
  std::vector<ParamFingerprint> prints(2);
  std::vector<std::string> errors(2);
  std::vector<double> sums(2);
  // Both replicas are built here, from the same seed, one after the other: ranks that are
  // threads would otherwise draw from torch's one global generator at the same time.
  std::vector<torch::nn::Linear> nets;
  for (int r = 0; r < 2; ++r) {
    torch::manual_seed(0);
    nets.emplace_back(4, 3);
  }
  run_ranks(2, [&](Distributed& dist) {
    const auto r = static_cast<std::size_t>(dist.rank());
    torch::nn::Linear net = nets[r];
    prints[r] = verify_in_sync(*net, dist);
    sums[r] = net->weight.to(torch::kDouble).sum().item<double>() +
              net->bias.to(torch::kDouble).sum().item<double>();
    if (r == 1) {
      torch::NoGradGuard no_grad;
      net->weight[0][0] += 1e-6F;  // a few ulps
    }
    try {
      verify_in_sync(*net, dist);
    } catch (const OutOfSyncError& e) {
      errors[r] = e.what();
    }
  });
  CHECK(prints[0].digest == prints[1].digest);
  CHECK(prints[0].checksum == Approx(sums[0]));
  for (const std::string& e : errors) {
    CHECK_THAT(e, Catch::Matchers::Contains("rank 0: param_checksum") &&
                      Catch::Matchers::Contains("rank 1: param_checksum"));
  }
}

TEST_CASE("errors: a failing c10 call names the operation, host, rank and file:line", "[workers][dist]") {
  set_error_context("node7", 3);
  try {
    checked("allreduce of gradient bucket 2", [] { TORCH_CHECK(false, "Connection closed by peer"); });
    FAIL("no exception");
  } catch (const WorkerError& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Matchers::StartsWith(
                        "allreduce of gradient bucket 2 failed on host node7, rank 3 (test_distributed.cpp:"));
    CHECK_THAT(msg, Catch::Matchers::EndsWith("Connection closed by peer"));
    CHECK(msg.find("frame #") == std::string::npos);  // no C++ backtrace
  }
  set_error_context("", -1);
}

TEST_CASE("errors: no store at MASTER_ADDR:MASTER_PORT is reported with the address", "[workers][dist]") {
  DistEnv env;
  env.rank = 1;
  env.world_size = 2;
  env.master_addr = "127.0.0.1";
  env.master_port = ddprun::test::free_port();
  set_error_context("here", 1);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(Distributed::connect(env, Backend::kGloo, std::chrono::seconds(1)), WorkerError);
  CHECK_THROWS_WITH(Distributed::connect(env, Backend::kGloo, std::chrono::seconds(1)),
                    Catch::Matchers::Contains("joining the c10d TCPStore at 127.0.0.1:" +
                                              std::to_string(env.master_port) +
                                              " failed on host here, rank 1 (distributed.cpp:"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  set_error_context("", -1);
}

TEST_CASE("populated_bytes: zeroed, writable, and freed with its tensor", "[workers][dist]") {
  at::Tensor big = populated_bytes(std::size_t{8} << 20);
  REQUIRE(big.numel() == (std::int64_t{8} << 20));
  CHECK(big.dtype() == at::kByte);
  CHECK(big.sum().item<std::int64_t>() == 0);
  big.fill_(3);
  CHECK(byte_view(big).size() == (std::size_t{8} << 20));
  CHECK(byte_view(big).back() == 3);
  CHECK(populated_bytes(0).numel() == 0);
  CHECK(byte_view(at::Tensor()).empty());
}
