// Slurm: what a task of a step takes from its environment, --hosts=slurm, and
// torch.distributed.launch's --local_rank / --use-env. The hostlist syntax is tested with the
// other host lists (tests/unit/cluster/test_slurm_hostlist.cpp).

#include "cli_test_helpers.hpp"
#include "common/error.hpp"
#include "launcher/slurm.hpp"

using namespace ddprun;
using namespace ddprun::test;

namespace {

// A task of step 0 of job 4321 on node 1 of n[1-2], as srun sets it up.
Env step_env() {
  return {{"SLURM_JOB_ID", "4321"},          {"SLURM_STEP_ID", "0"},
          {"SLURM_STEP_NUM_NODES", "2"},     {"SLURM_NODEID", "1"},
          {"SLURM_STEP_NODELIST", "n[1-2]"}, {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
          {"SLURM_NNODES", "2"},             {"SLURM_NODELIST", "n[1-2]"}};
}

}  // namespace

TEST_CASE("slurm: a task of a step needs no rendezvous flags", "[launcher][slurm]") {
  CliOutcome o = parse_command_line({"--nproc-per-node=2", "train.py"}, step_env());
  REQUIRE(o.config);
  const auto& c = *o.config;
  CHECK(c.is_static());
  CHECK(c.max_nodes == 2);
  CHECK(c.node_rank == 1);
  CHECK(c.master_addr == "n1");
  CHECK(c.master_port == slurm_port(4321));
  CHECK(c.master_port == 24321);
  CHECK(c.rdzv_id == "slurm-4321.0");
  CHECK(c.nproc_per_node == 2);
  // The startup log says where each value came from, and what was kept as given.
  REQUIRE(o.notes.size() == 1);
  CHECK_THAT(o.notes[0], Catch::Contains("Slurm step 4321.0") &&
                             Catch::Contains("--node-rank=1 (SLURM_NODEID)") &&
                             Catch::Contains("first of SLURM_STEP_NODELIST=n[1-2]") &&
                             Catch::Contains("given, so kept: --nproc-per-node"));
}

TEST_CASE("slurm: flags and PET_* win over the step, GPUs come from Slurm", "[launcher][slurm]") {
  auto env = step_env();
  env["PET_MASTER_PORT"] = "29999";
  env["SLURM_GPUS_ON_NODE"] = "4";
  auto c = parse_ok({"--master-addr=10.0.0.9", "--rdzv-id=mine", "train.py"}, env);
  CHECK(c.master_addr == "10.0.0.9");
  CHECK(c.master_port == 29999);
  CHECK(c.rdzv_id == "mine");
  CHECK(c.node_rank == 1);
  CHECK(c.nproc_per_node == 4);
  // Not the static rendezvous, or --standalone: the step's values are not used.
  CHECK(parse_ok({"--standalone", "train.py"}, env).max_nodes == 1);
  auto elastic = parse_ok({"--rdzv-backend=c10d", "--rdzv-endpoint=h:1", "train.py"}, env);
  CHECK(elastic.max_nodes == 1);
  CHECK(elastic.rdzv_id != "slurm-4321.0");
  // A batch script (no step) is not a task of a step either.
  env.erase("SLURM_STEP_ID");
  CHECK(parse_ok({"train.py"}, env).max_nodes == 1);
}

TEST_CASE("slurm: more than one task per node is a usage error saying how to fix it",
          "[launcher][slurm]") {
  auto env = step_env();
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";
  expect_usage_error({"train.py"}, {"2 tasks on a node", "srun --ntasks-per-node=1"}, env);
  env["SLURM_STEP_TASKS_PER_NODE"] = "1,3";
  expect_usage_error({"train.py"}, {"3 tasks on a node"}, env);
  env = step_env();
  env["SLURM_STEP_NODELIST"] = "n[1-";
  expect_usage_error({"train.py"}, {"SLURM_STEP_NODELIST=n[1-"}, env);
}

TEST_CASE("slurm: a task given every flag the step could fill in takes nothing from it",
          "[launcher][slurm]") {
  // An interactive shell of a step of several tasks (srun --ntasks-per-node=4 --pty bash).
  auto env = step_env();
  env["SLURM_STEP_TASKS_PER_NODE"] = "4";
  env["SLURM_STEP_NODELIST"] = "n[1-";
  auto c = parse_ok({"--nnodes=1", "--node-rank=0", "--master-addr=127.0.0.1",
                     "--master-port=29511", "--rdzv-id=mine", "--nproc-per-node=4", "train.py"},
                    env);
  CHECK(c.max_nodes == 1);
  CHECK(c.master_port == 29511);
  CHECK(c.nproc_per_node == 4);
  // One flag short, the step is read, and its tasks refused.
  expect_usage_error({"--nnodes=1", "--node-rank=0", "--master-addr=127.0.0.1",
                      "--master-port=29511", "--rdzv-id=mine", "train.py"},
                     {"4 tasks on a node"}, env);
}

TEST_CASE("slurm: --hosts=slurm is every node of the allocation, reached with srun",
          "[launcher][slurm]") {
  Env env{{"SLURM_JOB_ID", "77"}, {"SLURM_JOB_NODELIST", "gpu[1-3]"}};
  auto c = parse_ok({"--hosts=slurm", "--nproc-per-node=4", "train.py"}, env);
  REQUIRE(c.cluster);
  CHECK(c.cluster->hosts ==
        std::vector<HostSpec>{{"gpu1", std::nullopt}, {"gpu2", std::nullopt}, {"gpu3", std::nullopt}});
  CHECK(c.cluster->via_srun);
  CHECK(c.cluster->ssh_command.front() == "srun");
  CHECK(c.master_addr == "gpu1");
  CHECK(c.max_nodes == 3);
  expect_usage_error({"--hosts=slurm", "train.py"}, {"--hosts=slurm", "not inside a Slurm allocation"});
  expect_usage_error({"--hosts=slurm", "--ssh-command=ssh -p 2", "train.py"},
                     {"--ssh-command", "does not apply to --hosts=slurm"}, env);
}

TEST_CASE("slurm: --hosts=slurm on GPU nodes without a worker count says it runs one",
          "[launcher][slurm]") {
  Env env{{"SLURM_JOB_ID", "77"}, {"SLURM_JOB_NODELIST", "gpu[1-3]"},
          {"SLURM_GPUS_ON_NODE", "8"}};
  CliOutcome o = parse_command_line({"--hosts=slurm", "train.py"}, env);
  REQUIRE(o.config);
  REQUIRE(o.warnings.size() == 1);
  CHECK_THAT(o.warnings[0], Catch::Contains("each node runs 1 worker"));
  CHECK_THAT(o.warnings[0], Catch::Contains("--nproc-per-node=8"));
  o = parse_command_line({"--hosts=slurm", "--nproc-per-node=gpu", "train.py"}, env);
  REQUIRE(o.config);
  CHECK(o.warnings.empty());
}

TEST_CASE("cli: torch.distributed.launch's --local_rank and --use-env", "[launcher][cli]") {
  auto c = parse_ok({"--pass-local-rank", "--nproc-per-node=2", "train.py", "--lr", "1"},
                    {{"PYTHON_EXEC", "/usr/bin/python3"}});
  CHECK(c.argv == std::vector<std::string>{"/usr/bin/python3", "-u", "train.py",
                                           "--local_rank=${local_rank}", "--lr", "1"});
  auto m = parse_ok({"--pass_local_rank", "-m", "pkg.train", "x"});
  CHECK(m.argv == std::vector<std::string>{"python3", "-u", "-m", "pkg.train",
                                           "--local_rank=${local_rank}", "x"});
  // --use-env / --use_env: accepted, and the script's arguments stay as given.
  CHECK(parse_ok({"--use_env", "train.py", "a"}).argv ==
        std::vector<std::string>{"python3", "-u", "train.py", "a"});
  expect_usage_error({"--use-env", "--pass-local-rank", "train.py"}, {"cannot be used together"});
  expect_usage_error({"--pass-local-rank", "--no-python", "prog"}, {"needs a Python script"});
}
