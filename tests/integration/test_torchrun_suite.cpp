// torchrun's own launcher test cases (pytorch's test/distributed/launcher/run_test.py, later
// test_run.py, and launch_test.py), ported: the same command lines and the same assertions, with
// the ddprun binary in place of torch.distributed.run.main. Where torchrun raises an exception in
// its test process, ddprun exits with the code its documentation gives for that case. Left out:
// the cases that replace torch internals with mocks (a GPU count of 3, a failing agent object, a
// rendezvous handler's shutdown), and the logs_specs plug-in, a Python entry point.
//
// ctest runs the suite twice: as is, and as "torchrun suite, warm standby:", where every case
// whose workers are Python runs under --warm-standby (with a restart allowed, so that standbys
// are kept) and must have started each of its workers from a standby.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "testing/ddprun_process.hpp"
#include "launcher/cpu_count.hpp"
#include "testing/test_util.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

const std::string kScript = LAUNCHER_CASES_SCRIPT;
const std::string kShell = TOUCH_RANK_SCRIPT;

// Every case's environment: Debian's Python, and the variable torchrun's tests set in their own
// process to see that the workers inherit it.
std::map<std::string, std::string> case_env(std::map<std::string, std::string> extra = {}) {
  extra.emplace("PYTHON_EXEC", "/usr/bin/python3");
  extra.emplace("TEST_SENTINEL_PARENT", "FOOBAR");
  return extra;
}

// torchrun's tests look at the files the ranks left: exactly one per rank, named by RANK.
std::set<std::string> files_in(const TempDir& dir) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

std::set<std::string> ranks(int world_size) {
  std::set<std::string> out;
  for (int r = 0; r < world_size; ++r) out.insert(std::to_string(r));
  return out;
}

using Args = std::vector<std::string>;

bool warm_suite() {
  const char* v = std::getenv("DDPRUN_SUITE_WARM_STANDBY");
  return v != nullptr && std::string(v) == "1";
}

// A program started with --no-python would have to speak the standby protocol itself, which
// the suite's shell script does not: those cases stay cold.
bool python_workers(const Args& args, const std::map<std::string, std::string>& env) {
  return std::find(args.begin(), args.end(), "--no-python") == args.end() &&
         env.count("PET_NO_PYTHON") == 0;
}

// The environment of one ddprun of a case, and whether its workers must start warm.
std::map<std::string, std::string> launch_env(const Args& args,
                                              std::map<std::string, std::string> env,
                                              bool& warm) {
  warm = warm_suite() && python_workers(args, env);
  if (warm) {
    env.emplace("PET_WARM_STANDBY", "1");
    env.emplace("PET_MAX_RESTARTS", "1");  // a case's own --max-restarts still wins
    env.emplace("PET_LOG_LEVEL", "debug");  // where each worker's start is said
  }
  return case_env(std::move(env));
}

// Under the warm suite, every worker a ddprun started came from its standby.
void check_started_warm(bool warm, const std::string& output) {
  if (!warm) return;
  const auto started = count_of(output, "started worker local rank");
  CHECK(started > 0);
  CHECK(count_of(output, "from its warm standby") == started);
}

int run(const Args& args, std::map<std::string, std::string> env = {},
        std::string* output = nullptr) {
  bool warm = false;
  DdprunProcess p(args, launch_env(args, std::move(env), warm));
  const int code = p.wait(120s);
  INFO(p.output());
  if (output != nullptr) *output = p.output();
  CHECK(code >= 0);  // not timed out
  if (code == 0) check_started_warm(warm, p.output());
  return code;
}

std::string run_id() { return "--rdzv-id=" + std::to_string(free_port()); }
std::string port_arg(std::uint16_t port) { return "--master-port=" + std::to_string(port); }

const Args kMonitor = {"--monitor-interval=1", "--start-method=spawn"};
// run_test.py's elastic cases (test_run.py's spelling, quotes and all).
const Args kQuotedConf = {"--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'"};

bool python_available() { return std::filesystem::exists("/usr/bin/python3"); }

#define REQUIRE_PYTHON()                                  \
  if (!python_available()) {                              \
    WARN("/usr/bin/python3 is not installed: skipped");   \
    return;                                               \
  }
#define REQUIRE_TORCH()                                             \
  if (!torch_available()) {                                         \
    WARN("Debian's python3-torch is not installed: skipped");       \
    return;                                                         \
  }

}  // namespace

TEST_CASE("torchrun suite: user script, python", "[torchrun-suite][python]") {
  REQUIRE_PYTHON();
  TempDir dir;
  CHECK(run(Args{"--nnodes=1", "--nproc-per-node=4", run_id()} + kMonitor +
            Args{kScript, "--touch-file-dir=" + dir.path()}) == 0);
  CHECK(files_in(dir) == ranks(4));
}

TEST_CASE("torchrun suite: user script, python, caffe2 bc (underscore flags, static master)",
          "[torchrun-suite][python]") {
  REQUIRE_PYTHON();
  TempDir dir;
  CHECK(run({"--nnodes=1", "--nproc_per_node=4", "--monitor_interval=1", "--start_method=spawn",
             "--master_addr=localhost", "--master_port=" + std::to_string(free_port()),
             "--node_rank=0", kScript, "--touch_file_dir=" + dir.path()}) == 0);
  CHECK(files_in(dir) == ranks(4));
}

TEST_CASE("torchrun suite: user script, bash", "[torchrun-suite]") {
  TempDir dir;
  const Args flags = Args{"--nnodes=1", "--nproc-per-node=4", run_id()} + kMonitor +
                     Args{"--no-python"};
  // --no-python with --module: torchrun raises ValueError, ddprun exits 2 with one line.
  std::string out;
  CHECK(run(flags + Args{"--module", kShell, dir.path()}, {}, &out) == 2);
  CHECK_THAT(out, Catch::Contains("--no-python and --module cannot be used together"));
  CHECK(files_in(dir).empty());
  CHECK(run(flags + Args{kShell, dir.path()}) == 0);
  CHECK(files_in(dir) == ranks(4));
}

TEST_CASE("torchrun suite: user script, default nproc", "[torchrun-suite]") {
  TempDir dir;
  const Args flags = Args{"--nnodes=1", run_id()} + kMonitor + Args{"--no-python"};
  CHECK(run(flags + Args{"--module", kShell, dir.path()}) == 2);
  CHECK(run(flags + Args{kShell, dir.path()}) == 0);
  CHECK(files_in(dir) == ranks(1));
}

TEST_CASE("torchrun suite: launch with PET_ environment variables only", "[torchrun-suite]") {
  TempDir dir;
  std::map<std::string, std::string> env{
      {"PET_NNODES", "1"},          {"PET_NPROC_PER_NODE", "4"},
      {"PET_RDZV_ID", "pet-case"},  {"PET_MONITOR_INTERVAL", "1"},
      {"PET_START_METHOD", "spawn"}, {"PET_NO_PYTHON", "1"},
      {"PET_MODULE", "1"}};
  std::string out;
  CHECK(run({kShell, dir.path()}, env, &out) == 2);
  CHECK_THAT(out, Catch::Contains("PET_NO_PYTHON"));
  env["PET_MODULE"] = "0";
  CHECK(run({kShell, dir.path()}, env) == 0);
  CHECK(files_in(dir) == ranks(4));
}

TEST_CASE("torchrun suite: --nproc-per-node as a number, auto and unknown", "[torchrun-suite]") {
  const Args flags = Args{"--nnodes=1", run_id()} + kMonitor + Args{"--no-python"};
  {
    TempDir dir;
    CHECK(run(flags + Args{"--nproc-per-node=4", kShell, dir.path()}) == 0);
    CHECK(files_in(dir) == ranks(4));
  }
  {
    // No GPU in the test's environment: auto is the CPUs this process may use, as torch's
    // affinity-aware count (CUDA_VISIBLE_DEVICES="" hides any GPU the machine has).
    TempDir dir;
    CHECK(run(flags + Args{"--nproc-per-node=auto", kShell, dir.path()},
              {{"CUDA_VISIBLE_DEVICES", ""}}) == 0);
    CHECK(files_in(dir) == ranks(ddprun::usable_cpu_count()));
  }
  {
    TempDir dir;
    std::string out;
    CHECK(run(flags + Args{"--nproc-per-node=unknown", kShell, dir.path()}, {}, &out) == 2);
    CHECK_THAT(out, Catch::Contains("--nproc-per-node=unknown"));
    CHECK(files_in(dir).empty());
  }
}

TEST_CASE("torchrun suite: elastic, one of 1:2 nodes, quoted --rdzv-conf",
          "[torchrun-suite][python]") {
  REQUIRE_PYTHON();
  TempDir dir;
  CHECK(run(Args{"--nnodes=1:2", "--nproc-per-node=4", "--rdzv-backend=c10d",
                 "--rdzv-endpoint=localhost:" + std::to_string(free_port())} +
            kQuotedConf + Args{run_id()} + kMonitor +
            Args{kScript, "--touch-file-dir=" + dir.path()}) == 0);
  CHECK(files_in(dir) == ranks(4));
}

TEST_CASE("torchrun suite: elastic, a worker raises", "[torchrun-suite][python]") {
  REQUIRE_PYTHON();
  std::string out;
  // torchrun raises ChildFailedError, which its command line turns into exit code 1.
  CHECK(run(Args{"--nnodes=1:2", "--nproc-per-node=4", "--rdzv-backend=c10d",
                 "--rdzv-endpoint=localhost:" + std::to_string(free_port())} +
                kQuotedConf + Args{run_id(), "--monitor-interval=1", "--max-restarts=0",
                                   "--start-method=spawn", kScript, "--fail"},
            {}, &out) == 1);
  CHECK_THAT(out, Catch::Contains("RuntimeError: raising exception since --fail was given"));
}

TEST_CASE("torchrun suite: standalone", "[torchrun-suite][python]") {
  REQUIRE_PYTHON();
  TempDir dir;
  CHECK(run(Args{"--nnodes=1", "--nproc-per-node=4", "--standalone"} + kMonitor +
            Args{kScript, "--touch-file-dir=" + dir.path()}) == 0);
  CHECK(files_in(dir) == ranks(4));
}

TEST_CASE("torchrun suite: --run-path first", "[torchrun-suite][python]") {
  REQUIRE_PYTHON();
  TempDir dir;
  CHECK(run(Args{"--run-path", "--nnodes=1", "--nproc-per-node=4"} + kMonitor +
            Args{kScript, "--touch-file-dir=" + dir.path()}) == 0);
  CHECK(files_in(dir) == ranks(4));
}

TEST_CASE("torchrun suite: elastic, two agents with the same command line",
          "[torchrun-suite][python]") {
  REQUIRE_PYTHON();
  TempDir dir;
  const Args args = Args{"--nnodes=1:2", "--nproc-per-node=4", "--rdzv-backend=c10d",
                         "--rdzv-endpoint=localhost:" + std::to_string(free_port()),
                         "--rdzv_conf=timeout=5", run_id()} +
                    kMonitor + Args{kScript, "--touch-file-dir=" + dir.path()};
  bool warm = false;
  DdprunProcess first(args, launch_env(args, {}, warm));
  DdprunProcess second(args, launch_env(args, {}, warm));
  CHECK(first.wait(120s) == 0);
  CHECK(second.wait(120s) == 0);
  INFO(first.output() << second.output());
  check_started_warm(warm, first.output());
  check_started_warm(warm, second.output());
  CHECK(files_in(dir) == ranks(8));
}

TEST_CASE("torchrun suite: --nnodes MIN:MAX:STEP is refused", "[torchrun-suite]") {
  std::string out;
  CHECK(run({"--nnodes=2:20:30", "--no-python", "true"}, {}, &out) == 2);
  CHECK_THAT(out, Catch::Contains("--nnodes=2:20:30"));
}

TEST_CASE("torchrun suite: is_torchelastic_launched", "[torchrun-suite][python]") {
  REQUIRE_TORCH();
  TempDir dir;
  const auto out_file = dir.file("out");
  CHECK(run({"--run-path", "--nnodes=1", "--nproc-per-node=1", "--monitor-interval=1", kScript,
             "--out-file=" + out_file}) == 0);
  CHECK(read_file(out_file) == "True");
  // And the same script outside any launcher says False: the check can fail.
  SpawnSpec spec;
  spec.argv = {"/usr/bin/python3", kScript, "--outside-launcher", "--out-file=" + out_file};
  Child plain(spec);
  CHECK(plain.wait_for(120s) == 0);
  CHECK(read_file(out_file) == "False");
}

TEST_CASE("torchrun suite: init_method tcp:// and env:// under the launcher",
          "[torchrun-suite][python]") {
  REQUIRE_TORCH();
  for (const char* method : {"tcp", "env"}) {
    INFO(method);
    const auto port = free_port();
    const std::string init = std::string(method) == "tcp"
                                 ? "--init-method=tcp://localhost:" + std::to_string(port)
                                 : "--init-method=env://";
    std::string out;
    CHECK(run({"--run-path", "--nnodes=1", "--nproc-per-node=4", "--master-addr=localhost",
               port_arg(port), "--monitor-interval=1", kScript, init},
              {}, &out) == 0);
    for (int r = 0; r < 4; ++r) {
      CHECK_THAT(out, Catch::Contains("rank " + std::to_string(r) + "/4: all_reduce done"));
    }
  }
}

TEST_CASE("torchrun suite: capture logs, --redirect=3 --tee=3 and the prefix template",
          "[torchrun-suite]") {
  TempDir dir;
  std::string out;
  CHECK(run(Args{"--nnodes=1", "--nproc-per-node=4", run_id(), "--redirect=3", "--tee=3"} +
                kMonitor + Args{"--no-python", kShell, dir.path()},
            {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[rank${rank}]: "}}, &out) == 0);
  for (int r = 0; r < 4; ++r) {
    CHECK_THAT(out, Catch::Contains("[rank" + std::to_string(r) + "]: creating "));
  }
}

TEST_CASE("torchrun suite: torch.distributed.launch, --local_rank passed and --use-env",
          "[torchrun-suite][python]") {
  REQUIRE_PYTHON();
  const Args flags = {"--nnodes=1", "--nproc-per-node=4", "--monitor-interval=1",
                      "--start-method=spawn", "--master-addr=localhost",
                      port_arg(free_port()), "--node-rank=0"};
  {
    TempDir dir;
    CHECK(run(flags + Args{"--pass-local-rank", kScript, "--expect-local-rank-arg",
                           "--touch-file-dir=" + dir.path()}) == 0);
    CHECK(files_in(dir) == ranks(4));
  }
  {
    TempDir dir;
    CHECK(run(flags + Args{"--use-env", kScript, "--touch-file-dir=" + dir.path()}) == 0);
    CHECK(files_in(dir) == ranks(4));
  }
}

TEST_CASE("torchrun suite: --virtual-local-rank (test_run.py's GPU case, by environment)",
          "[torchrun-suite][python]") {
  REQUIRE_PYTHON();
  const Args flags = {"--nnodes=1", "--nproc-per-node=2", "--redirect=3", "--tee=3",
                      "--monitor-interval=1", "--start-method=spawn"};
  std::string out;
  // Without it: the real local ranks and the agent's devices.
  CHECK(run(flags + Args{kScript, "--print-devices"}, {{"CUDA_VISIBLE_DEVICES", "1,0"}}, &out) ==
        0);
  CHECK_THAT(out, Catch::Contains("[default0]:LOCAL_RANK=0 CUDA_VISIBLE_DEVICES=1,0"));
  CHECK_THAT(out, Catch::Contains("[default1]:LOCAL_RANK=1 CUDA_VISIBLE_DEVICES=1,0"));
  // With it: every rank is local rank 0 with one device of the agent's list.
  CHECK(run(flags + Args{"--virtual-local-rank", kScript, "--print-devices"},
            {{"CUDA_VISIBLE_DEVICES", "1,0"}}, &out) == 0);
  CHECK_THAT(out, Catch::Contains("[default0]:LOCAL_RANK=0 CUDA_VISIBLE_DEVICES=1"));
  CHECK_THAT(out, Catch::Contains("[default1]:LOCAL_RANK=0 CUDA_VISIBLE_DEVICES=0"));
}

TEST_CASE("a script written for mpirun runs under --mpi-env", "[torchrun-suite][python]") {
  REQUIRE_TORCH();
  std::string out;
  CHECK(run({"--nproc-per-node=4", "--mpi-env", port_arg(free_port()), kScript, "--mpi"}, {},
            &out) == 0);
  for (int r = 0; r < 4; ++r) {
    CHECK_THAT(out, Catch::Contains("rank " + std::to_string(r) + "/4: all_reduce done"));
  }
}
