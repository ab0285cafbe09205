// ddp_resnet's command line: the Python example's flag names, defaults and usage errors.

#include <catch2/catch.hpp>

#include "workers/options.hpp"

using namespace ddprun::workers;

namespace {

ParseOutcome parse(std::vector<std::string> args, bool cuda = false) {
  return parse_options(args, cuda);
}

}  // namespace

TEST_CASE("options: defaults are the Python example's", "[workers][options]") {
  auto out = parse({}, /*cuda=*/true);
  REQUIRE(out.options);
  const Options& o = *out.options;
  CHECK(o.arch == "resnet50");
  CHECK(o.backend == Backend::kNccl);
  CHECK(o.batch_size == 256);
  CHECK(o.num_epochs == 10000);
  CHECK(o.learning_rate == 0.1);
  CHECK(o.random_seed == 0);
  CHECK(o.image_size == 224);
  CHECK(o.steps_syn == 20);
  CHECK(o.model_dir == "saved_models");
  CHECK(o.model_filename == "resnet_distributed.pth");
  CHECK_FALSE(o.use_syn);
  CHECK_FALSE(o.resume);
  CHECK(o.num_classes == 10);  // CIFAR-10 without --use_syn
  CHECK(o.precision == Precision::kFp32);
}

TEST_CASE("options: every flag in both = and space forms", "[workers][options]") {
  auto out = parse({"--arch=resnet18", "--backend", "gloo", "--batch_size=8", "--num_epochs", "3",
                    "--learning_rate=0.01", "--random_seed", "7", "--image_size=32", "--use_syn",
                    "--steps_syn", "5", "--model_dir=/tmp/m", "--model_filename", "x.pth",
                    "--resume", "--local_rank=1", "--checkpoint_every", "2", "--precision=bf16",
                    "--channels_last", "--verify_sync", "--log_every=1", "--dist_timeout", "60",
                    "--fail_at_step=4", "--fail_rank", "0", "--num_classes=100"});
  REQUIRE(out.options);
  const Options& o = *out.options;
  CHECK(o.arch == "resnet18");
  CHECK(o.backend == Backend::kGloo);
  CHECK(o.batch_size == 8);
  CHECK(o.num_epochs == 3);
  CHECK(o.learning_rate == 0.01);
  CHECK(o.random_seed == 7);
  CHECK(o.image_size == 32);
  CHECK(o.use_syn);
  CHECK(o.steps_syn == 5);
  CHECK(o.model_dir == "/tmp/m");
  CHECK(o.model_filename == "x.pth");
  CHECK(o.resume);
  CHECK(o.local_rank == 1);
  CHECK(o.checkpoint_every == 2);
  CHECK(o.precision == Precision::kBf16);
  CHECK(o.channels_last);
  CHECK(o.verify_sync);
  CHECK(o.log_every == 1);
  CHECK(o.dist_timeout_s == 60);
  CHECK(o.fail_at_step == 4);
  CHECK(o.fail_rank == 0);
  CHECK(o.num_classes == 100);
}

TEST_CASE("options: class count follows the data", "[workers][options]") {
  CHECK(parse({"--backend=gloo", "--use_syn"}).options->num_classes == 1000);
  auto learnable = parse({"--backend=gloo", "--syn_learnable"});
  REQUIRE(learnable.options);
  CHECK(learnable.options->use_syn);  // implied
  CHECK(learnable.options->num_classes == 10);
  CHECK(parse({"--backend=gloo", "--use_syn", "--num_classes=5"}).options->num_classes == 5);
}

TEST_CASE("options: torch.distributed.launch's --local-rank spelling is accepted", "[workers][options]") {
  auto out = parse({"--backend=gloo", "--local-rank=3"});
  REQUIRE(out.options);
  CHECK(out.options->local_rank == 3);
}

TEST_CASE("options: bad values exit 2 with one line naming the flag", "[workers][options]") {
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<Case> cases{
      {{"--arch=resnet19"}, "--arch=resnet19"},
      {{"--backend=mpi"}, "--backend=mpi"},
      {{"--batch_size=0"}, "--batch_size=0"},
      {{"--batch_size=abc"}, "--batch_size"},
      {{"--num_epochs=-1"}, "--num_epochs=-1"},
      {{"--learning_rate=0"}, "--learning_rate"},
      {{"--image_size=0"}, "--image_size=0"},
      {{"--steps_syn=0"}, "--steps_syn=0"},
      {{"--precision=fp16"}, "--precision=fp16"},
      {{"--checkpoint_every=-2"}, "--checkpoint_every=-2"},
      {{"--fail_at_step=-1"}, "--fail_at_step=-1"},
      {{"--model_filename=a/b"}, "--model_filename"},
      {{"--num_classes=1"}, "--num_classes=1"},
      {{"--no_such_flag"}, "--no_such_flag"},
      {{"--stamp_dir=/nonexistent/stamps"}, "--stamp_dir=/nonexistent/stamps: not a directory"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = c.args;
    args.push_back("--backend=gloo");
    if (c.args.front().rfind("--backend", 0) == 0) args.pop_back();
    auto out = parse(args, /*cuda=*/true);
    INFO(c.args.front() << " -> " << out.message);
    CHECK_FALSE(out.options);
    CHECK(out.exit_code == kExitUsage);
    CHECK(out.message.rfind("ddp_resnet: ", 0) == 0);
    CHECK(out.message.find(c.needle) != std::string::npos);
    CHECK(out.message.find('\n') == std::string::npos);
  }
}

TEST_CASE("options: --backend nccl without CUDA says so plainly", "[workers][options]") {
  auto out = parse({"--backend=nccl", "--use_syn"}, /*cuda=*/false);
  CHECK_FALSE(out.options);
  CHECK(out.exit_code == kExitUsage);
  CHECK(out.message.find("CPU-only libtorch") != std::string::npos);
  CHECK(out.message.find("--backend=gloo") != std::string::npos);
  CHECK(parse({"--backend=nccl", "--use_syn"}, /*cuda=*/true).options);
}

TEST_CASE("options: --device places the model, gloo may use CUDA, nccl never the CPU", "[workers][options]") {
  CHECK(parse({"--backend=gloo"}).options->device == Device::kAuto);
  CHECK(parse({"--backend=gloo", "--device=cpu"}).options->device == Device::kCpu);
  auto gloo_cuda = parse({"--backend=gloo", "--device", "cuda"}, /*cuda=*/true);
  REQUIRE(gloo_cuda.options);
  CHECK(gloo_cuda.options->device == Device::kCuda);

  auto cpu_build = parse({"--backend=gloo", "--device=cuda"}, /*cuda=*/false);
  CHECK_FALSE(cpu_build.options);
  CHECK(cpu_build.exit_code == kExitUsage);
  CHECK(cpu_build.message.find("--device=cuda: this ddp_resnet was built against a CPU-only") !=
        std::string::npos);

  auto nccl_cpu = parse({"--backend=nccl", "--device=cpu"}, /*cuda=*/true);
  CHECK_FALSE(nccl_cpu.options);
  CHECK(nccl_cpu.message.find("NCCL reduces CUDA tensors only") != std::string::npos);

  auto bad = parse({"--backend=gloo", "--device=tpu"});
  CHECK(bad.exit_code == kExitUsage);
  CHECK(bad.message == "ddp_resnet: --device=tpu: must be auto, cpu or cuda");
}

TEST_CASE("options: --help exits 0 and lists the flags", "[workers][options]") {
  auto out = parse({"--help"});
  CHECK_FALSE(out.options);
  CHECK(out.exit_code == 0);
  for (const char* flag : {"--arch", "--backend", "--device", "--batch_size", "--use_syn", "--verify_sync",
                           "--fail_at_step", "--checkpoint_every", "--data_dir"}) {
    CHECK(out.message.find(flag) != std::string::npos);
  }
}
