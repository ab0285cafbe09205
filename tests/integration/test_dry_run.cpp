// --dry-run: the plan for static, elastic and multi-host jobs, as a table and as JSON, with
// nothing started (the program does not even exist) and no host contacted.

#include <catch2/catch.hpp>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "testing/ddprun_process.hpp"
#include "testing/test_util.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

// The JSON plan: the whole of stdout+stderr is one line of JSON when the log level is warn.
nlohmann::json plan_of(std::vector<std::string> args) {
  args.insert(args.begin(), {"--dry-run=json", "--log-level=warn"});
  DdprunProcess p(args);
  REQUIRE(p.wait(30s) == 0);
  return nlohmann::json::parse(p.output());
}

}  // namespace

TEST_CASE("dry run: one node, the ranks and each worker's environment", "[dry-run]") {
  DdprunProcess p({"--dry-run", "--nproc-per-node=2", "--rdzv-id=job7", "train.py", "--lr=1"},
                  {{"OMP_NUM_THREADS", "8"}});
  REQUIRE(p.wait(30s) == 0);
  const auto out = p.output();
  CHECK_THAT(out, Contains("nothing was started"));
  CHECK_THAT(out, Contains("static, 1 node(s), master 127.0.0.1:29500, run id job7"));
  CHECK_THAT(out, Contains("python3 -u train.py --lr=1"));
  CHECK_THAT(out, Contains("0..1 of 2"));
  CHECK_THAT(out, Contains("rank 1: GROUP_RANK=0 GROUP_WORLD_SIZE=1 LOCAL_RANK=1 "
                           "LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 OMP_NUM_THREADS=8 RANK=1"));

  auto plan = plan_of({"--nproc-per-node=2", "train.py"});
  REQUIRE(plan["workers"].size() == 2);
  CHECK(plan["workers"][1]["env"]["RANK"] == "1");
  CHECK(plan["workers"][1]["env"]["WORLD_SIZE"] == "2");
  CHECK(plan["workers"][0]["env"]["OMP_NUM_THREADS"] == "1");
  CHECK(plan["program"] == nlohmann::json({"python3", "-u", "train.py"}));
}

TEST_CASE("dry run: an elastic job leaves ranks to the rendezvous", "[dry-run]") {
  auto plan = plan_of({"--rdzv-backend=c10d", "--nnodes=2:4", "--rdzv-endpoint=10.0.0.5:29400",
                       "--nproc-per-node=3", "--no-python", "/bin/true"});
  CHECK(plan["rendezvous"]["backend"] == "c10d");
  CHECK(plan["rendezvous"]["nnodes"] == "2:4");
  CHECK(plan["rendezvous"]["endpoint"] == "10.0.0.5:29400");
  CHECK(plan["nodes"][0]["workers"] == 3);
  CHECK_FALSE(plan["nodes"][0].contains("ranks"));
  CHECK(plan["workers"].empty());

  // etcd: the endpoint list as given, nothing contacted (no etcd runs at these addresses).
  plan = plan_of({"--rdzv-backend=etcd-v2", "--nnodes=1:8",
                  "--rdzv-endpoint=10.0.0.5:2379,10.0.0.6:2379", "--no-python", "/bin/true"});
  CHECK(plan["rendezvous"]["backend"] == "etcd");
  CHECK(plan["rendezvous"]["endpoint"] == "10.0.0.5:2379,10.0.0.6:2379");
  DdprunProcess table({"--dry-run", "--rdzv-backend=etcd", "--rdzv-endpoint=10.0.0.5:2379",
                       "--nnodes=2", "x.py"});
  REQUIRE(table.wait(30s) == 0);
  CHECK_THAT(table.output(), Contains("etcd, 2 node(s), etcd at 10.0.0.5:2379"));
}

TEST_CASE("dry run: several hosts, their ranks and commands, nothing contacted", "[dry-run]") {
  // A remote shell that would fail loudly if it were run.
  std::vector<std::string> args{"--hosts=10.0.0.1:2,10.0.0.2:1,10.0.0.3", "--nproc-per-node=1",
                                "--ssh-command=/nonexistent/ssh -p 2222", "-x", "FOO=secret",
                                "--no-python", "/nonexistent/train"};
  auto plan = plan_of(args);
  REQUIRE(plan["nodes"].size() == 3);
  CHECK(plan["rendezvous"]["master_addr"] == "10.0.0.1");
  CHECK(plan["nodes"][0]["ranks"] == nlohmann::json({0, 1}));
  CHECK(plan["nodes"][2]["ranks"] == nlohmann::json({3, 3}));
  CHECK(plan["nodes"][2]["world_size"] == 4);
  const auto command = plan["nodes"][1]["command"];
  CHECK(command[0] == "/nonexistent/ssh");
  CHECK(command[2] == "2222");
  // The agent's arguments travel in its hello, not on the remote shell's command line.
  CHECK_THAT(command.back().get<std::string>(), Contains("--ddprun-session"));
  CHECK_THAT(command.back().get<std::string>(), !Contains("--node-rank"));
  const auto agent_args = plan["nodes"][1]["args"].get<std::vector<std::string>>();
  CHECK(std::count(agent_args.begin(), agent_args.end(), "--node-rank=1") == 1);
  CHECK_THAT(command.back().get<std::string>(), !Contains("secret"));
  CHECK(plan["workers"].size() == 4);
  CHECK(plan["workers"][3]["env"]["GROUP_RANK"] == "2");
  bool foo_named = false;
  for (const auto& name : plan["forwarded_env"]) foo_named = foo_named || name == "FOO";
  CHECK(foo_named);
  // What a host without this ddprun gets: this binary, by its digest.
  CHECK(plan["staging"]["size"].get<std::size_t>() == std::filesystem::file_size(DDPRUN_BINARY));
  CHECK(plan["staging"]["sha256"].get<std::string>().size() == 64);
  CHECK_THAT(command.back().get<std::string>(), Contains(plan["staging"]["sha256"].get<std::string>()));
  auto no_stage = args;
  no_stage.insert(no_stage.begin(), "--no-stage");
  const auto plain = plan_of(no_stage);
  CHECK_FALSE(plain.contains("staging"));
  CHECK_THAT(plain["nodes"][1]["command"].back().get<std::string>(), !Contains("ddprun-stage"));

  args.insert(args.begin(), "--dry-run");
  DdprunProcess table(args);
  REQUIRE(table.wait(30s) == 0);
  CHECK_THAT(table.output(), Contains("command for node 2: /nonexistent/ssh -p 2222"));
  CHECK_THAT(table.output(), Contains(" 10.0.0.3 '<staging script>'\n"));
  CHECK_THAT(table.output(), Contains("staging script: each host runs "));
  CHECK_THAT(table.output(), Contains("forwarded to every host (values not shown):"));
  CHECK_THAT(table.output(), !Contains("secret"));
  // The usage error it would have hit, as without --dry-run.
  DdprunProcess bad({"--dry-run", "--hosts=a,b", "--nnodes=3", "x.py"});
  CHECK(bad.wait(30s) == 2);
}

TEST_CASE("dry run: the reference's example prints what the reference shows", "[dry-run]") {
  // docs/reference.md, "Before starting: --dry-run": the same command, line by line.
  DdprunProcess p({"--dry-run", "--hosts=10.0.0.1:2,10.0.0.2:1", "train.py"});
  REQUIRE(p.wait(30s) == 0);
  const auto out = p.output();
  CHECK_THAT(out, Contains("ddprun --dry-run: the plan (nothing was started), ddprun "));
  CHECK_THAT(out, Contains("  rendezvous   static, 2 node(s), master 10.0.0.1:29500, run id "));
  CHECK_THAT(out, Contains("  program      train.py (with python3 -u, or $PYTHON_EXEC, on each "
                           "host)\n"));
  CHECK_THAT(out, Contains("  0     10.0.0.1  2        0..1 of 3\n"));
  CHECK_THAT(out, Contains("  1     10.0.0.2  1        2 of 3\n"));
  CHECK_THAT(out, Contains("  command for node 0: ssh -o BatchMode=yes -o ServerAliveInterval=3 "
                           "-o ServerAliveCountMax=3 10.0.0.1 '<staging script>'\n"));
  // An ssh command of the user's own still never prompts.
  DdprunProcess own({"--dry-run", "--hosts=10.0.0.1", "--ssh-command=ssh -p 2222", "train.py"});
  REQUIRE(own.wait(30s) == 0);
  CHECK_THAT(own.output(), Contains("  command for node 0: ssh -p 2222 -o BatchMode=yes "
                                    "-o ServerAliveInterval=3 -o ServerAliveCountMax=3 10.0.0.1 "));
  CHECK_THAT(out, Contains("    its agent's arguments (in the session's hello): "
                           "'--log-line-prefix=[{host}:{rank}]:' --nnodes=2 --node-rank=0 "
                           "--master-addr=10.0.0.1 --master-port=29500 --rdzv-id="));
  CHECK_THAT(out, Contains("--local-addr=10.0.0.1 --nproc-per-node=2 -- train.py\n"));
  CHECK_THAT(out, Contains("  staging script: each host runs "));
  CHECK_THAT(out, Contains("  worker environment (MASTER_PORT: the workers' store on the master, "
                           "one for each attempt; TORCHELASTIC_ERROR_FILE: a file under the log "
                           "directory, per attempt; TORCH_NCCL_DEBUG_INFO_TEMP_FILE and "
                           "TORCH_FR_DUMP_TEMP_FILE: <log dir>/attempt_<n>/<local "
                           "rank>/nccl_trace_rank_):\n"));
  CHECK_THAT(out, Contains("    rank 0: GROUP_RANK=0 GROUP_WORLD_SIZE=2 LOCAL_RANK=0 "
                           "LOCAL_WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 OMP_NUM_THREADS=1 RANK=0 "));
  CHECK_THAT(out, Contains(" TORCH_FR_BUFFER_SIZE=2000 TORCH_NCCL_ASYNC_ERROR_HANDLING=1 "
                           "TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_TRACE_BUFFER_SIZE=2000 "
                           "WORLD_SIZE=3\n"));
}
