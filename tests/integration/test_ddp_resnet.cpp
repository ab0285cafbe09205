// ddp_resnet end to end: real ddprun agents, real worker processes, Gloo on CPU. Small ResNet-18
// runs (32x32 images, batch 8, a few steps) keep the whole file to well under a minute on two
// cores. OMP_NUM_THREADS=1 as ddprun would set it, explicitly, for deterministic arithmetic.

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sys/wait.h>

#include "testing/ddprun_process.hpp"
#include "testing/test_util.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

const std::map<std::string, std::string> kEnv{{"OMP_NUM_THREADS", "1"}};

// ddprun flags, then ddp_resnet with the small ResNet-18 task and `extra` flags.
std::vector<std::string> job(std::vector<std::string> ddprun_flags, const std::string& model_dir,
                             const std::vector<std::string>& extra) {
  ddprun_flags.push_back("--master-port=" + std::to_string(free_port()));
  ddprun_flags.insert(ddprun_flags.end(),
                      {"--no-python", DDP_RESNET_BINARY, "--backend", "gloo", "--arch",
                       "resnet18", "--syn_learnable", "--image_size", "32", "--batch_size", "8",
                       "--steps_syn", "4", "--learning_rate", "0.01", "--verify_sync",
                       "--model_dir", model_dir});
  ddprun_flags.insert(ddprun_flags.end(), extra.begin(), extra.end());
  return ddprun_flags;
}

std::vector<double> losses(const std::string& out) {
  std::vector<double> v;
  static const std::regex re(R"(step: (\d+), loss: ([0-9.eE+-]+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it) {
    v.push_back(std::stod((*it)[2].str()));
  }
  return v;
}

std::string captured(const std::string& out, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(pattern))) return "";
  return m[1].str();
}

std::string checksum(const std::string& out) {
  return captured(out, R"(param_checksum: ([^ ]+) \(in sync across \d+ ranks\))");
}

std::string digest(const std::string& out) { return captured(out, R"(param_digest: ([0-9a-f]+))"); }

// Runs ddp_resnet directly (no launcher), returns its exit code and output.
int run_direct(const std::string& args_and_env, std::string& output) {
  FILE* p = ::popen((args_and_env + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) output += buf;
  int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

TEST_CASE("ddp_resnet: ResNet-18 on 2 ranks under ddprun stays in sync and learns", "[workers][e2e]") {
  TempDir dir;
  DdprunProcess p(job({"--nproc-per-node=2"}, dir.path(), {"--num_epochs", "3", "--log_every", "1"}),
                  kEnv);
  const int rc = p.wait(240s);
  const std::string out = p.output();
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("Local Rank: 0, Epoch: 0, Training ...") != std::string::npos);
  CHECK(out.find("Local Rank: 1, Epoch: 2, Training ...") != std::string::npos);
  CHECK(out.find("num_steps_per_gpu: 4, avg_step_time: ") != std::string::npos);
  CHECK(out.find("samples_per_sec: ") != std::string::npos);
  CHECK(out.find("(in sync across 2 ranks)") != std::string::npos);
  const auto l = losses(out);
  REQUIRE(l.size() == 12);
  const double first = (l[0] + l[1] + l[2]) / 3;
  const double last = (l[9] + l[10] + l[11]) / 3;
  CHECK(first > 1.5);         // about ln(10) at the start
  CHECK(last < first / 3);    // and learning
}

TEST_CASE("ddp_resnet: interrupted and resumed by ddprun equals uninterrupted", "[workers][e2e]") {
  const std::vector<std::string> training{"--num_epochs", "3", "--checkpoint_every", "3"};
  TempDir straight_dir;
  DdprunProcess straight(job({"--nproc-per-node=2"}, straight_dir.path(), training), kEnv);
  const int straight_rc = straight.wait(240s);
  const std::string reference = straight.output();
  INFO(reference);
  REQUIRE(straight_rc == 0);

  // Rank 1 exits with 3 before global step 5; ddprun restarts both ranks, which go on from the
  // checkpoint of step 3 and recompute steps 3 and 4.
  TempDir resumed_dir;
  auto flags = training;
  flags.insert(flags.end(), {"--fail_at_step", "5"});
  DdprunProcess resumed(job({"--nproc-per-node=2", "--max-restarts=1"}, resumed_dir.path(), flags),
                        kEnv);
  const int rc = resumed.wait(240s);
  const std::string out = resumed.output();
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("injected failure (--fail_at_step 5) on host") != std::string::npos);
  CHECK(out.find("rank 1, attempt 0: exiting with 3") != std::string::npos);
  CHECK(out.find("resumed from " + resumed_dir.file("resnet_distributed.pth") +
                 ": epoch 0, step 3, global step 3") != std::string::npos);

  REQUIRE_FALSE(checksum(reference).empty());
  CHECK(checksum(out) == checksum(reference));
  CHECK(digest(out) == digest(reference));  // bit-identical parameters

  // The same from warm standbys (ddprun's protocol, workers/standby.cpp): every attempt's
  // workers were waiting with libtorch loaded, and the result is the same, bit for bit.
  // --stamp_dir, the benchmark's view of the restart, is written as it goes.
  TempDir warm_dir, stamps;
  auto stamped = flags;
  stamped.insert(stamped.end(), {"--stamp_dir", stamps.path()});
  DdprunProcess warm(job({"--nproc-per-node=2", "--max-restarts=1", "--warm-standby",
                          "--log-level=debug"},
                         warm_dir.path(), stamped),
                     kEnv);
  const int warm_rc = warm.wait(240s);
  const std::string warm_out = warm.output();
  INFO(warm_out);
  REQUIRE(warm_rc == 0);
  CHECK(count_of(warm_out, "from its warm standby") == 4);
  CHECK(warm_out.find("resumed from " + warm_dir.file("resnet_distributed.pth") +
                      ": epoch 0, step 3, global step 3") != std::string::npos);
  CHECK(digest(warm_out) == digest(reference));
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(stamps.path())) {
    names.insert(entry.path().filename().string());
  }
  CHECK(names == std::set<std::string>{"fail.0.1", "joined.0.0", "joined.0.1", "joined.1.0",
                                       "joined.1.1", "restored.0.0", "restored.0.1",
                                       "restored.1.0", "restored.1.1", "step.0.0", "step.0.1",
                                       "step.1.0", "step.1.1"});
  // Seconds of CLOCK_MONOTONIC, in the order of a restart: the failure, the checkpoint loaded,
  // the first step.
  const auto at = [&](const char* name) { return std::stod(read_file(stamps.file(name))); };
  CHECK(at("fail.0.1") < at("joined.1.0"));
  CHECK(at("joined.1.0") <= at("restored.1.0"));
  CHECK(at("restored.1.0") <= at("step.1.0"));
}

TEST_CASE("ddp_resnet: a checkpoint from 2 ranks resumes on 3 and re-shards", "[workers][e2e]") {
  TempDir dir;
  DdprunProcess two(job({"--nproc-per-node=2"}, dir.path(), {"--num_epochs", "1", "--checkpoint_every", "2"}),
                    kEnv);
  {
    const int rc = two.wait(240s);
    INFO(two.output());
    REQUIRE(rc == 0);
  }
  DdprunProcess three(job({"--nproc-per-node=3"}, dir.path(), {"--num_epochs", "2", "--resume"}), kEnv);
  const int rc = three.wait(240s);
  const std::string out = three.output();
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("epoch 1, step 0, global step 4 (world size 2 -> 3, re-sharded)") != std::string::npos);
  CHECK(out.find("Local Rank: 2, Epoch: 1, Training ...") != std::string::npos);
  CHECK(out.find("Local Rank: 0, Epoch: 0, Training ...") == std::string::npos);
  CHECK(out.find("(in sync across 3 ranks)") != std::string::npos);
}

TEST_CASE("ddp_resnet: CIFAR-10 binary batches on 2 ranks", "[workers][e2e]") {
  TempDir data;
  {
    // 60 records of a tiny CIFAR-10 file: 30 per rank, 4 steps of 8 (the last one 6).
    std::ofstream out(data.file("data_batch_1.bin"), std::ios::binary);
    for (int i = 0; i < 60; ++i) {
      out.put(static_cast<char>(i % 10));
      for (int p = 0; p < 3072; ++p) out.put(static_cast<char>((i * 31 + p) % 256));
    }
  }
  TempDir model;
  std::vector<std::string> flags{"--nproc-per-node=2", "--master-port=" + std::to_string(free_port()),
                                 "--no-python", DDP_RESNET_BINARY, "--backend", "gloo", "--arch",
                                 "resnet18", "--data_dir", data.path(), "--batch_size", "8",
                                 "--num_epochs", "2", "--learning_rate", "0.01", "--verify_sync",
                                 "--model_dir", model.path()};
  DdprunProcess p(flags, kEnv);
  const int rc = p.wait(240s);
  const std::string out = p.output();
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("10 classes), 8 x 2 ranks") != std::string::npos);
  CHECK(out.find("60 samples/epoch, 4 steps/epoch") != std::string::npos);
  CHECK(out.find("num_steps_per_gpu: 4, avg_step_time: ") != std::string::npos);
  CHECK(out.find("(in sync across 2 ranks)") != std::string::npos);
  CHECK(file_exists(model.file("resnet_distributed.pth")));  // the final checkpoint
}

TEST_CASE("ddp_resnet: usage errors exit 2 with one clear line", "[workers][e2e]") {
  const std::string bin = std::string(DDP_RESNET_BINARY);
  const std::string env = "env RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 ";
  std::string out;
  CHECK(run_direct(env + bin + " --backend gloo --use_syn --arch resnet19", out) == 2);
  CHECK(out.find("ddp_resnet: --arch=resnet19: unknown architecture") != std::string::npos);
#ifdef DDP_RESNET_CPU_ONLY
  out.clear();
  CHECK(run_direct(env + bin + " --backend nccl --use_syn", out) == 2);
  CHECK(out.find("built against a CPU-only libtorch") != std::string::npos);
#endif
  out.clear();
  CHECK(run_direct("env -u RANK -u WORLD_SIZE " + bin + " --backend gloo --use_syn", out) == 2);
  CHECK(out.find("environment variable WORLD_SIZE is not set (start ddp_resnet with ddprun or "
                 "torchrun") != std::string::npos);
  out.clear();
  CHECK(run_direct(env + bin + " --backend gloo --data_dir /nonexistent", out) == 2);
  CHECK(out.find("/nonexistent: no CIFAR-10 training batches") != std::string::npos);
  out.clear();
  CHECK(run_direct(bin + " --help", out) == 0);
  CHECK(out.find("--fail_at_step") != std::string::npos);
}
