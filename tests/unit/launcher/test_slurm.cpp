// Slurm: hostlist expansion (checked against Slurm's own `scontrol show hostnames` where it is
// installed), what a task of a step takes from its environment, --hosts=slurm, and
// torch.distributed.launch's --local_rank / --use-env.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "cli_test_helpers.hpp"
#include "common/error.hpp"
#include "launcher/slurm.hpp"

using namespace ddprun;
using namespace ddprun::test;

namespace {

using Hosts = std::vector<std::string>;

// A task of step 0 of job 4321 on node 1 of n[1-2], as srun sets it up.
Env step_env() {
  return {{"SLURM_JOB_ID", "4321"},          {"SLURM_STEP_ID", "0"},
          {"SLURM_STEP_NUM_NODES", "2"},     {"SLURM_NODEID", "1"},
          {"SLURM_STEP_NODELIST", "n[1-2]"}, {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
          {"SLURM_NNODES", "2"},             {"SLURM_NODELIST", "n[1-2]"}};
}

// `scontrol show hostnames TEXT` with a throw-away configuration; nullopt without scontrol.
std::optional<Hosts> scontrol_hostnames(const std::string& text) {
  if (access("/usr/bin/scontrol", X_OK) != 0) return std::nullopt;
  static const std::string conf = [] {
    char dir[] = "/tmp/ddprun-slurm-conf-XXXXXX";
    const std::string path = std::string(mkdtemp(dir)) + "/slurm.conf";
    std::ofstream(path) << "ClusterName=x\nSlurmctldHost=localhost\nNodeName=n1\n"
                           "PartitionName=p Nodes=n1\n";
    return path;
  }();
  const std::string command = "SLURM_CONF=" + conf + " /usr/bin/scontrol show hostnames '" +
                              text + "' 2>/dev/null";
  Hosts out;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char line[512];
    while (fgets(line, sizeof line, pipe)) {
      std::string s(line);
      while (!s.empty() && s.back() == '\n') s.pop_back();
      out.push_back(s);
    }
    pclose(pipe);
  }
  return out;
}

}  // namespace

TEST_CASE("slurm: hostlist expansion matches scontrol show hostnames", "[launcher][slurm]") {
  const std::vector<std::pair<std::string, Hosts>> cases = {
      {"n1", {"n1"}},
      {"n[1-3]", {"n1", "n2", "n3"}},
      {"gpu[01-04,07],cpu-a[1-2]", {"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu-a1", "cpu-a2"}},
      {"node[008-011]", {"node008", "node009", "node010", "node011"}},
      {"a[9-11]", {"a9", "a10", "a11"}},
      {"x[1-2]y[3-4]", {"x1y3", "x1y4", "x2y3", "x2y4"}},
      {"rack[1-2]-n[1,3]", {"rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"}},
      {"host,other", {"host", "other"}},
      {"n[5],m[2-2]", {"n5", "m2"}},
      {"10-gpu[0-1]", {"10-gpu0", "10-gpu1"}},
  };
  bool compared = false;
  for (const auto& [text, expected] : cases) {
    INFO(text);
    CHECK(expand_hostlist(text, "test") == expected);
    if (auto theirs = scontrol_hostnames(text)) {
      CHECK(*theirs == expected);
      compared = true;
    }
  }
  if (!compared) WARN("scontrol is not installed: the expansions were not compared with Slurm's");
}

TEST_CASE("slurm: malformed hostlists are usage errors naming the variable", "[launcher][slurm]") {
  auto rejected = [](const std::string& text) {
    try {
      expand_hostlist(text, "SLURM_JOB_NODELIST");
      return false;
    } catch (const ConfigError& e) {
      CHECK_THAT(e.what(), Catch::StartsWith("SLURM_JOB_NODELIST="));
      return true;
    }
  };
  // Slurm refuses these too (scontrol prints no host names).
  for (const char* bad : {"n[]", "n[a-b]", "n[3-1]", "n[[1]]", "n[1-2]-ib"}) {
    INFO(bad);
    CHECK(rejected(bad));
    if (auto theirs = scontrol_hostnames(bad)) CHECK(theirs->empty());
  }
  // Slurm reads these as something (an unclosed bracket as a name, a blank or an empty item as a
  // separator); no scheduler writes them, and ddprun refuses to guess.
  for (const char* bad : {"n[1-", "n1]", "n[1-2", "a,,b", "", "n 1"}) {
    INFO(bad);
    CHECK(rejected(bad));
  }
}

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

TEST_CASE("slurm: flags and PET_* win over the step; GPUs come from Slurm", "[launcher][slurm]") {
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
