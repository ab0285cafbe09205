// ddprun end to end: real agents, real sockets on 127.0.0.1, real worker processes (the fake
// worker, and real PyTorch where Debian's python3-torch is installed).

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "common/strings.hpp"
#include "testing/ddprun_process.hpp"
#include "testing/test_util.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

std::string port_arg(std::uint16_t port) { return "--master-port=" + std::to_string(port); }

std::vector<std::string> fake(std::vector<std::string> flags) {
  flags.push_back("--no-python");
  flags.push_back(FAKE_WORKER_BINARY);
  return flags;
}

// The fake worker's command line for one node of a 3-node static job at `port`, given its
// --node-rank flag.
auto three_nodes(const std::string& port) {
  return [port](const char* rank) {
    return fake({"--nnodes=3", port, "--rdzv-conf=join_timeout=60", rank});
  };
}

}  // namespace

TEST_CASE("ddprun: 1 node x 4 workers get torchrun's environment", "[launcher]") {
  TempDir dir;
  auto port = free_port();
  DdprunProcess p(fake({"--nproc-per-node=4", port_arg(port), "--rdzv-id=job7",
                        "--max-restarts=2"}),
                  {{"FAKE_MODE", "env"}, {"FAKE_ENV_DIR", dir.path()}});
  REQUIRE(p.wait() == 0);
  for (int rank = 0; rank < 4; ++rank) {
    auto env = read_env_file(dir.file("env_" + std::to_string(rank) + ".txt"));
    INFO("rank " << rank);
    CHECK(env["RANK"] == std::to_string(rank));
    CHECK(env["LOCAL_RANK"] == std::to_string(rank));
    CHECK(env["ROLE_RANK"] == std::to_string(rank));
    CHECK(env["GROUP_RANK"] == "0");
    CHECK(env["WORLD_SIZE"] == "4");
    CHECK(env["LOCAL_WORLD_SIZE"] == "4");
    CHECK(env["ROLE_WORLD_SIZE"] == "4");
    CHECK(env["GROUP_WORLD_SIZE"] == "1");
    CHECK(env["ROLE_NAME"] == "default");
    CHECK(env["MASTER_ADDR"] == "127.0.0.1");
    // The workers' store, on --master-port as torchrun's agent store is on one node; on another
    // port only when something took that one since free_port() saw it free, as ddprun says.
    if (p.output().find("the workers' store listens on a port the kernel picks") ==
        std::string::npos) {
      CHECK(env["MASTER_PORT"] == std::to_string(port));
    } else {
      CHECK(env["MASTER_PORT"] != std::to_string(port));
    }
    CHECK(env["TORCHELASTIC_RESTART_COUNT"] == "0");
    CHECK(env["TORCHELASTIC_MAX_RESTARTS"] == "2");
    CHECK(env["TORCHELASTIC_RUN_ID"] == "job7");
    CHECK(env["TORCHELASTIC_USE_AGENT_STORE"] == "True");
    CHECK_THAT(env["TORCHELASTIC_ERROR_FILE"], Catch::EndsWith("/" + std::to_string(rank) +
                                                               "/error.json"));
    CHECK(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
    CHECK(env["OMP_NUM_THREADS"] == "1");
    CHECK(env["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
    CHECK(env["FAKE_MODE"] == "env");  // the agent's own environment is inherited
  }
}

TEST_CASE("ddprun: two agents with 2+1 workers agree on ranks", "[launcher]") {
  TempDir dir;
  auto port = port_arg(free_port());
  std::map<std::string, std::string> env{{"FAKE_MODE", "env"}, {"FAKE_ENV_DIR", dir.path()}};
  DdprunProcess node0(fake({"--nproc-per-node=2", "--nnodes=2", "--node-rank=0", port}), env);
  DdprunProcess node1(fake({"--nproc_per_node=1", "--nnodes=2", "--node_rank=1", port,
                            "--signals_to_handle=SIGUSR1,SIGTERM"}),
                      env);
  REQUIRE(node0.wait() == 0);
  REQUIRE(node1.wait() == 0);
  auto e2 = read_env_file(dir.file("env_2.txt"));
  // The contract's example: the worker on node 1 of a 2+1 job.
  CHECK(e2["GROUP_RANK"] == "1");
  CHECK(e2["GROUP_WORLD_SIZE"] == "2");
  CHECK(e2["LOCAL_RANK"] == "0");
  CHECK(e2["LOCAL_WORLD_SIZE"] == "1");
  CHECK(e2["RANK"] == "2");
  CHECK(e2["ROLE_RANK"] == "2");
  CHECK(e2["ROLE_WORLD_SIZE"] == "3");
  CHECK(e2["WORLD_SIZE"] == "3");
  CHECK(e2["TORCHELASTIC_RESTART_COUNT"] == "0");
  CHECK(e2["TORCHELASTIC_RUN_ID"] == "none");
  CHECK(e2["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGUSR1,SIGTERM");
  auto e0 = read_env_file(dir.file("env_0.txt"));
  auto e1 = read_env_file(dir.file("env_1.txt"));
  CHECK(e0["GROUP_RANK"] == "0");
  CHECK(e1["RANK"] == "1");
  CHECK(e1["LOCAL_WORLD_SIZE"] == "2");
  // Every worker of the job gets the same master endpoint.
  CHECK(e0["MASTER_PORT"] == e2["MASTER_PORT"]);
  CHECK(e1["MASTER_PORT"] == e2["MASTER_PORT"]);
}

TEST_CASE("ddprun: PET_ variables configure it, and the command line wins", "[launcher]") {
  TempDir dir;
  std::map<std::string, std::string> env{{"FAKE_MODE", "env"},
                                         {"FAKE_ENV_DIR", dir.path()},
                                         {"PET_NPROC_PER_NODE", "3"},
                                         {"PET_MAX_RESTARTS", "4"},
                                         {"PET_MASTER_PORT", std::to_string(free_port())}};
  DdprunProcess p(fake({"--max-restarts=1"}), env);
  REQUIRE(p.wait() == 0);
  CHECK(file_exists(dir.file("env_2.txt")));
  CHECK_FALSE(file_exists(dir.file("env_3.txt")));
  CHECK(read_env_file(dir.file("env_0.txt"))["TORCHELASTIC_MAX_RESTARTS"] == "1");
}

TEST_CASE("ddprun: --pass-local-rank gives each worker torch.distributed.launch's --local_rank",
          "[launcher]") {
  TempDir dir;
  // The "interpreter" is sh, so that the script is a shell script that writes what it got.
  const auto script = dir.file("train.sh");
  std::ofstream(script) << "echo \"$*\" > \"$OUT_DIR/args_$LOCAL_RANK\"\n";
  DdprunProcess p({"--standalone", "--nproc-per-node=2", "--pass-local-rank", script, "--lr",
                   "0.1"},
                  {{"PYTHON_EXEC", "/bin/sh"}, {"OUT_DIR", dir.path()}});
  REQUIRE(p.wait() == 0);
  CHECK(read_lines(dir.file("args_0")) == std::vector<std::string>{"--local_rank=0 --lr 0.1"});
  CHECK(read_lines(dir.file("args_1")) == std::vector<std::string>{"--local_rank=1 --lr 0.1"});
}

TEST_CASE("ddprun: the arguments get the local rank in torchrun's forms, and $$ as $",
          "[launcher]") {
  TempDir dir;
  const auto script = dir.file("train.sh");
  std::ofstream(script) << "echo \"$*\" > \"$OUT_DIR/args_$LOCAL_RANK\"\n";
  DdprunProcess p({"--standalone", "--nproc-per-node=2", script, "ckpt_$local_rank",
                   "${local_rank}x", "a$$b", "$RANK", "$local_rankX"},
                  {{"PYTHON_EXEC", "/bin/sh"}, {"OUT_DIR", dir.path()}});
  REQUIRE(p.wait() == 0);
  CHECK(read_lines(dir.file("args_0")) ==
        std::vector<std::string>{"ckpt_0 0x a$b $RANK $local_rankX"});
  CHECK(read_lines(dir.file("args_1")) ==
        std::vector<std::string>{"ckpt_1 1x a$b $RANK $local_rankX"});
}

TEST_CASE("ddprun: a log line prefix's doubled braces print single, and no placeholder in them",
          "[launcher]") {
  DdprunProcess p({"--standalone", "--nproc-per-node=2", "--log-line-prefix={{rank}}{rank}|",
                   "--no-python", "echo", "hi"});
  REQUIRE(p.wait() == 0);
  CHECK_THAT(p.output(), Catch::Contains("{rank}0|hi\n"));
  CHECK_THAT(p.output(), Catch::Contains("{rank}1|hi\n"));
  // torchrun's template: its text kept as written, braces and an unknown placeholder too.
  DdprunProcess t({"--standalone", "--nproc-per-node=1", "--no-python", "echo", "hi"},
                  {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "${rank}{x}$$ $other|"}});
  REQUIRE(t.wait() == 0);
  CHECK_THAT(t.output(), Catch::Contains("0{x}$ $other|hi\n"));
}

TEST_CASE("ddprun: a worker that fails once is restarted and the job succeeds", "[launcher]") {
  TempDir dir;
  auto events_file = dir.file("events.jsonl");
  DdprunProcess p(fake({"--nproc-per-node=2", "--max-restarts=1", port_arg(free_port()),
                        "--events-file", events_file}),
                  {{"FAKE_MODE", "fail_rank:1:3"}, {"FAKE_TOUCH_DIR", dir.path()}});
  REQUIRE(p.wait() == 0);
  // Rank 0's first attempt is not checked: rank 1 fails at once, and on a loaded machine rank
  // 0 may be stopped before its first instruction (ddprun did start it: workers_started below).
  for (const char* f : {"started_1_0", "started_0_1", "started_1_1"}) {
    CHECK(file_exists(dir.file(f)));
  }
  CHECK_THAT(p.output(), Catch::Contains("restarting all workers"));

  // The events file tells the same story, in order, with monotonic times.
  // (Exits of workers that end after the attempt was decided are not events of that attempt,
  // so worker_exited lines are checked apart from the sequence.)
  std::vector<std::string> names;
  double last = 0;
  bool saw_failure = false;
  for (const auto& line : read_lines(events_file)) {
    auto event = nlohmann::json::parse(line);
    auto name = event.at("event").get<std::string>();
    CHECK(event.at("mono").get<double>() >= last);
    last = event.at("mono").get<double>();
    if (name == "worker_exited") {
      if (event.at("rank") == 1 && event.at("attempt") == 0) {
        CHECK(event.at("exit_code") == 3);
        saw_failure = true;
      }
      continue;
    }
    names.push_back(name);
  }
  CHECK(saw_failure);
  std::vector<std::string> expected{
      "agent_started",   "rendezvous_started", "rendezvous_completed", "workers_started",
      "attempt_decided", "workers_stopped",    "restart",              "workers_started",
      "attempt_decided", "workers_stopped",    "job_finished"};
  CHECK(names == expected);
}

TEST_CASE("ddprun: a failure on node 1 restarts node 0's workers too", "[launcher]") {
  TempDir dir;
  auto port = port_arg(free_port());
  std::map<std::string, std::string> env{{"FAKE_MODE", "fail_rank:2:5"},
                                         {"FAKE_TOUCH_DIR", dir.path()}};
  // Node 0's workers would succeed on their own; they must still run a second attempt. Node 0
  // serves the store and logs every request it serves, with the connection it came on.
  DdprunProcess node0(fake({"--nproc-per-node=2", "--nnodes=2", "--node-rank=0", port,
                            "--max-restarts=1", "--log-level=trace"}), env);
  DdprunProcess node1(fake({"--nproc-per-node=1", "--nnodes=2", "--node-rank=1", port,
                            "--max-restarts=1"}), env);
  REQUIRE(node0.wait() == 0);
  REQUIRE(node1.wait() == 0);
  CHECK(file_exists(dir.file("started_0_1")));
  CHECK(file_exists(dir.file("started_1_1")));
  CHECK(file_exists(dir.file("started_2_1")));

  // Node 1 watched the first attempt's outcome, settled, and watched the next attempt's on one
  // connection: the arrival and the next watch went together. (A request that waited is logged
  // again when its keys came.)
  std::map<std::string, std::set<std::string>> peers;  // request -> connections it came on
  const std::regex served(R"(store: (\w+ \S+) from (\S+))");
  for (const auto& line : ddprun::split(node0.output(), '\n')) {
    std::smatch m;
    if (std::regex_search(line, m, served)) peers[m[1]].insert(m[2]);
  }
  const auto& arrived = peers["arrive attempt/0/settled"];
  REQUIRE(arrived.size() == 1);
  CHECK(peers["get news/attempt/0/outcome"] == arrived);
  CHECK(peers["get news/attempt/1/outcome"] == arrived);
}

TEST_CASE("ddprun: a signal ends a node's wait for the others to settle, on its watcher's "
          "connection, at once", "[launcher]") {
  TempDir dir;
  auto port = port_arg(free_port());
  const auto events = dir.file("events1.jsonl");
  // Node 0's worker ignores SIGTERM, so node 0 settles only after its shutdown timeout. Node
  // 1's worker fails once that worker is set up (its started file); node 1 chose the root
  // cause and waits for node 0 in the store, its arrival on its outcome watcher's connection.
  DdprunProcess node0(fake({"--nproc-per-node=1", "--nnodes=2", "--node-rank=0", port,
                            "--max-restarts=1", "--shutdown-timeout=120"}),
                      {{"FAKE_MODE", "stubborn"}, {"FAKE_TOUCH_DIR", dir.path()}});
  DdprunProcess node1(fake({"--nproc-per-node=1", "--nnodes=2", "--node-rank=1", port,
                            "--max-restarts=1", "--shutdown-timeout=120", "--events-file",
                            events}),
                      {{"FAKE_MODE", "after_file:started_0_0:0:3"},
                       {"FAKE_TOUCH_DIR", dir.path()}});
  REQUIRE(wait_until(
      [&] { return file_exists(events) && read_file(events).find("workers_stopped") !=
                                               std::string::npos; },
      60s));
  REQUIRE(kill(node1.pid(), SIGTERM) == 0);
  // Without the signal's reach it would wait for node 0, two minutes away. The job stops with
  // its worker's failure, not restarted.
  CHECK(node1.wait(60s) == 3);
  CHECK_THAT(node1.output(), !Catch::Contains("restarting"));
}

TEST_CASE("ddprun: a second signal while the workers stop is answered, and the first one's "
          "exit code stays", "[launcher]") {
  TempDir dir;
  DdprunProcess p(fake({"--nproc-per-node=1", port_arg(free_port()), "--shutdown-timeout=15"}),
                  {{"FAKE_MODE", "stubborn"}, {"FAKE_TOUCH_DIR", dir.path()}});
  REQUIRE(wait_until([&] { return file_exists(dir.file("started_0_0")); }, 30s));
  REQUIRE(kill(p.pid(), SIGTERM) == 0);
  REQUIRE(p.wait_for_output("stopping 1 local worker(s) with SIGTERM"));
  REQUIRE(kill(p.pid(), SIGINT) == 0);
  CHECK(p.wait(60s) == 128 + SIGTERM);
  CHECK_THAT(p.output(), Catch::Contains("received SIGINT again: already stopping on SIGTERM "
                                         "(the workers have up to 15s, --shutdown-timeout, "
                                         "before SIGKILL)"));
}

TEST_CASE("ddprun: restarts exhausted, every agent exits with the worker's code and names it",
          "[launcher]") {
  auto port = port_arg(free_port());
  std::map<std::string, std::string> env{{"FAKE_MODE", "fail_rank:2:9"}};
  DdprunProcess node0(fake({"--nproc-per-node=2", "--nnodes=2", "--node-rank=0", port}),
                      {{"FAKE_MODE", "hang"}});
  DdprunProcess node1(fake({"--nproc-per-node=1", "--nnodes=2", "--node-rank=1", port}), env);
  CHECK(node1.wait() == 9);
  // Node 0's hanging workers are stopped because of node 1's failure.
  CHECK(node0.wait() == 9);
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  for (auto* p : {&node0, &node1}) {
    auto out = p->output();
    CHECK_THAT(out, Catch::Contains("Root cause"));
    CHECK_THAT(out, Catch::Contains("rank        2 of 3"));
    CHECK_THAT(out, Catch::Contains(std::string("host        ") + host));
    CHECK_THAT(out, Catch::Contains("exit code 9"));
  }
}

TEST_CASE("ddprun: a crashing worker's last lines and signal are reported", "[launcher]") {
  DdprunProcess p(fake({"--nproc-per-node=1", port_arg(free_port())}),
                  {{"FAKE_MODE", "lines_crash:300"}});
  CHECK(p.wait() == 128 + SIGABRT);
  auto out = p.output();
  CHECK_THAT(out, Catch::Contains("[default0]:line 1 of 300"));
  CHECK_THAT(out, Catch::Contains("[default0]:line 300 of 300"));
  CHECK_THAT(out, Catch::Contains("killed by SIGABRT"));
  CHECK_THAT(out, Catch::Contains("last stderr lines:"));
}

TEST_CASE("ddprun: the error file's message reaches the root cause", "[launcher]") {
  DdprunProcess p(fake({"--nproc-per-node=2", port_arg(free_port())}),
                  {{"FAKE_MODE", "error_file:4"}});
  CHECK(p.wait() == 4);
  CHECK_THAT(p.output(), Catch::Contains("RuntimeError: fake failure on rank"));
  CHECK_THAT(p.output(), Catch::Contains("Traceback (most recent call last)"));
}

TEST_CASE("ddprun: SIGTERM reaches the workers and the agent exits 143", "[launcher]") {
  TempDir dir;
  auto pid_file = dir.file("pids");
  DdprunProcess p(fake({"--nproc-per-node=2", port_arg(free_port()), "--shutdown-timeout=2"}),
                  {{"FAKE_MODE", "grandchild"}, {"FAKE_PID_FILE", pid_file}});
  REQUIRE(wait_until([&] { return read_lines(pid_file).size() == 4; }, 30s));
  kill(p.pid(), SIGTERM);
  CHECK(p.wait(30s) == 143);
  // The grandchildren, which ignore SIGTERM, were SIGKILLed before the agent exited; on a busy
  // machine one may still be on its way out then (its environment already gone, not yet a
  // zombie), as in the other orphan tests.
  CHECK(wait_until_dead(read_lines(pid_file), 60s));
  CHECK_THAT(p.output(), Catch::Contains("received SIGTERM"));
}

TEST_CASE("ddprun: SIGKILL of the agent leaves no worker, grandchild or scratch directory",
          "[launcher]") {
  TempDir dir;
  TempDir tmp;  // TMPDIR: where the console-only job's scratch log directory goes
  auto pid_file = dir.file("pids");
  DdprunProcess p(fake({"--nproc-per-node=2", port_arg(free_port())}),
                  {{"FAKE_MODE", "grandchild"}, {"FAKE_PID_FILE", pid_file},
                   {"TMPDIR", tmp.path()}});
  REQUIRE(wait_until([&] { return read_lines(pid_file).size() == 4; }, 30s));
  const auto entries = [&] {
    return std::distance(std::filesystem::directory_iterator(tmp.path()),
                         std::filesystem::directory_iterator());
  };
  REQUIRE(entries() == 1);  // torchelastic_XXXXXX, holding the workers' directories
  kill(p.pid(), SIGKILL);
  CHECK(p.wait(10s) == 128 + SIGKILL);
  auto pids = read_lines(pid_file);
  // The issue asks for "after a second"; the bound here only catches a hang.
  CHECK(wait_until_dead(pids, 10s));
  // The guardian, which outlives the agent, removed the scratch directory.
  CHECK(wait_until([&] { return entries() == 0; }, 10s));
}

TEST_CASE("ddprun: bad command lines exit 2 at once and start nothing", "[launcher]") {
  for (auto flags : std::vector<std::vector<std::string>>{
           {"--nnodes=2:1", "x"}, {"--nnodes=0", "x"}, {"--nnodes=a:b", "x"},
           {"--nnodes=1:2:3", "x"}, {"--master-port=65536", "x"}, {"--no-python", "-m", "x"},
           {"--nproc-per-node=lots", "x"}, {"--nproc-per-node=2"}}) {
    DdprunProcess p(flags);
    INFO(flags[0]);
    CHECK(p.wait(10s) == 2);
    auto out = p.output();
    CHECK_THAT(out, Catch::StartsWith("ddprun: "));
    CHECK(std::count(out.begin(), out.end(), '\n') == 1);
  }
}

TEST_CASE("ddprun: a static job uses a ddprun-store of its own host when node 0 is told so "
          "and the same command is refused there once that job ended", "[launcher]") {
  const auto port = free_port();
  Child store(SpawnSpec{{DDPRUN_STORE_BINARY, "--host", "127.0.0.1", "--port",
                         std::to_string(port), "--log-level", "warn"}, {}, {}});
  // Listening once a connection can be made (a bounded wait: the store starts in milliseconds).
  REQUIRE(wait_until([&] {
    const int fd = connect_loopback(port);
    if (fd >= 0) ::close(fd);
    return fd >= 0;
  }, 30s));
  TempDir dir;
  std::map<std::string, std::string> env{{"FAKE_MODE", "env"}, {"FAKE_ENV_DIR", dir.path()}};
  const auto common = std::vector<std::string>{"--nnodes=2", port_arg(port)};
  {
    // Told nothing, node 0 serves the store itself: the port is taken, and it says what to do.
    DdprunProcess node0(fake(common + std::vector<std::string>{"--node-rank=0"}), env);
    CHECK(node0.wait() == 124);
    CHECK_THAT(node0.output(), Catch::Contains("Address already in use") &&
                                   Catch::Contains("--rdzv-conf=is_host=0"));
  }
  DdprunProcess node0(
      fake(common + std::vector<std::string>{"--node-rank=0", "--rdzv-conf=is_host=0"}), env);
  DdprunProcess node1(fake(common + std::vector<std::string>{"--node-rank=1"}), env);
  REQUIRE(node0.wait() == 0);
  REQUIRE(node1.wait() == 0);
  CHECK(read_env_file(dir.file("env_0.txt"))["WORLD_SIZE"] == "2");
  CHECK(read_env_file(dir.file("env_1.txt"))["GROUP_RANK"] == "1");
  // The store keeps the ended job's keys under its run id (the default, "none"): the same
  // command lines again are told so at once, and start nothing.
  TempDir again_dir;
  std::map<std::string, std::string> again_env{{"FAKE_MODE", "env"},
                                               {"FAKE_ENV_DIR", again_dir.path()}};
  DdprunProcess again0(
      fake(common + std::vector<std::string>{"--node-rank=0", "--rdzv-conf=is_host=0"}),
      again_env);
  DdprunProcess again1(fake(common + std::vector<std::string>{"--node-rank=1"}), again_env);
  for (auto* again : {&again0, &again1}) {
    CHECK(again->wait(30s) == 124);
    CHECK_THAT(again->output(), Catch::Contains("the job with this run id ended at ") &&
                                    Catch::Contains("(succeeded, as ") &&
                                    Catch::Contains("--rdzv-id"));
  }
  CHECK_FALSE(file_exists(again_dir.file("env_0.txt")));
  CHECK_FALSE(file_exists(again_dir.file("env_1.txt")));
  store.signal(SIGTERM);
  CHECK(store.wait_for(10s).has_value());
}

TEST_CASE("ddprun: a duplicate node rank is reported, not a hang", "[launcher]") {
  const auto with = three_nodes(port_arg(free_port()));
  DdprunProcess node0(with("--node-rank=0"), {{"FAKE_MODE", "hang"}});
  DdprunProcess first(with("--node-rank=1"), {{"FAKE_MODE", "hang"}});
  // The second one starts once the first holds node rank 1 (it says so when it has joined).
  REQUIRE(first.wait_for_output("node 1 of 3 joined"));
  DdprunProcess second(with("--node-rank=1"), {{"FAKE_MODE", "hang"}});
  const int second_code = second.wait(30s);
  INFO("the second node with rank 1:\n" << second.output());
  CHECK(second_code == 124);
  CHECK_THAT(second.output(), Catch::Contains("node rank 1 is already taken"));
  CHECK_THAT(second.output(), Catch::Contains("which is alive"));
  // The job cannot form: the others learn it at once, not at their join timeout (60 s), and
  // from the store, which node 0's agent keeps until they have read it.
  for (auto* node : {&node0, &first}) {
    const int code = node->wait(30s);
    INFO((node == &first ? "the first node with rank 1" : "node 0") << ":\n" << node->output());
    CHECK(code == 124);
    CHECK_THAT(node->output(), Catch::Contains("node rank 1 is already taken"));
  }
}

TEST_CASE("ddprun: a node killed while it waits for the others and started again takes its "
          "rank back, and the job forms", "[launcher]") {
  const auto with = three_nodes(port_arg(free_port()));
  DdprunProcess node0(with("--node-rank=0"));
  auto killed = std::make_unique<DdprunProcess>(with("--node-rank=1"));
  REQUIRE(killed->wait_for_output("node 1 of 3 joined"));
  ::kill(killed->pid(), SIGKILL);
  REQUIRE(killed->wait(30s) == 128 + SIGKILL);
  std::unique_ptr<DdprunProcess> node2;
  SECTION("before the last node comes") {}
  SECTION("after the last node came: the others formed the job with the lost record") {
    node2 = std::make_unique<DdprunProcess>(with("--node-rank=2"));
    REQUIRE(node0.wait_for_output("rendezvous: complete"));
  }
  DdprunProcess again(with("--node-rank=1"));
  REQUIRE(again.wait_for_output("rendezvous: node rank 1 was held by "));
  if (!node2) node2 = std::make_unique<DdprunProcess>(with("--node-rank=2"));
  CHECK(node0.wait(60s) == 0);
  CHECK(again.wait(60s) == 0);
  CHECK(node2->wait(60s) == 0);
  INFO(again.output());
  CHECK_THAT(again.output(), Catch::Contains("which showed no sign of life for 3s: this node "
                                             "takes its place"));
  CHECK_THAT(node0.output(), Catch::Contains("all 3 workers succeeded"));
}

TEST_CASE("ddprun: a real PyTorch gloo job under two agents", "[launcher][torch]") {
  if (!torch_available()) {
    WARN("Debian's python3-torch is not installed: skipped");
    return;
  }
  auto port = port_arg(free_port());
  std::map<std::string, std::string> env{{"PYTHON_EXEC", "/usr/bin/python3"}};
  DdprunProcess node0({"--nproc-per-node=2", "--nnodes=2", "--node-rank=0", port,
                       TORCH_ALLREDUCE_SCRIPT}, env);
  DdprunProcess node1({"--nproc-per-node=1", "--nnodes=2", "--node-rank=1", port,
                       TORCH_ALLREDUCE_SCRIPT}, env);
  REQUIRE(node0.wait(240s) == 0);
  REQUIRE(node1.wait(240s) == 0);
  CHECK_THAT(node0.output(), Catch::Contains("rank 0/3 local 0 group 0 sum 6 expected 6"));
  CHECK_THAT(node0.output(), Catch::Contains("rank 1/3 local 1 group 0 sum 6 expected 6"));
  CHECK_THAT(node1.output(), Catch::Contains("rank 2/3 local 0 group 1 sum 6 expected 6"));
}

TEST_CASE("ddprun: torch 1.13 ranks on two agents meet again in the next attempt's workers' "
          "store, static and c10d", "[launcher][torch]") {
  if (!torch_available()) {
    WARN("Debian's python3-torch is not installed: skipped");
    return;
  }
  const auto port = std::to_string(free_port());
  // Rank 2 (node 1) raises after its first all_reduce: every rank starts again and meets in
  // the store group rank 0's agent opened for that attempt.
  std::map<std::string, std::string> env{{"PYTHON_EXEC", "/usr/bin/python3"},
                                         {"ALLREDUCE_FAIL_RANK", "2"}};
  for (const std::string backend : {"static", "c10d"}) {
    INFO(backend);
    std::vector<std::string> common{"--nnodes=2", "--max-restarts=1", "--rdzv-id=" + port};
    if (backend == "static") {
      common.push_back("--master-port=" + port);
    } else {
      common.insert(common.end(), {"--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:" + port,
                                   "--local-addr=127.0.0.1"});
    }
    auto node = [&](const char* nproc, const char* rank) {
      auto flags = common;
      flags.push_back(nproc);
      if (backend == "static") flags.push_back(rank);
      flags.push_back(TORCH_ALLREDUCE_SCRIPT);
      return std::make_unique<DdprunProcess>(flags, env);
    };
    auto node0 = node("--nproc-per-node=2", "--node-rank=0");
    auto node1 = node("--nproc-per-node=1", "--node-rank=1");
    CHECK(node0->wait(240s) == 0);
    CHECK(node1->wait(240s) == 0);
    const auto all = node0->output() + node1->output();
    INFO(all);
    // Each rank's line in both attempts: the second attempt's ranks met and summed again.
    for (int rank = 0; rank < 3; ++rank) {
      CHECK(count_of(all, "rank " + std::to_string(rank) + "/3 ") == 2);
    }
    CHECK(count_of(all, "sum 6 expected 6") == 6);
  }
}

TEST_CASE("ddprun: static mode notices a dead node and stops instead of hanging",
          "[launcher]") {
  auto port = port_arg(free_port());
  std::vector<std::string> keep_alive{"--rdzv-conf=keep_alive_interval=0.3,keep_alive_max_attempt=3",
                                      "--shutdown-timeout=2"};
  auto node = [&](const char* rank) {
    auto flags = keep_alive;
    flags.insert(flags.end(), {"--nproc-per-node=1", "--nnodes=2", rank, port});
    return fake(flags);
  };
  TempDir dir;
  DdprunProcess node0(node("--node-rank=0"), {{"FAKE_MODE", "hang"}, {"FAKE_TOUCH_DIR", dir.path()}});
  DdprunProcess node1(node("--node-rank=1"), {{"FAKE_MODE", "hang"}, {"FAKE_TOUCH_DIR", dir.path()}});
  REQUIRE(wait_until([&] { return file_exists(dir.file("started_1_0")); }, 30s));
  kill(node1.pid(), SIGKILL);
  CHECK(node0.wait(30s) == 124);
  CHECK_THAT(node0.output(), Catch::Contains("node 1 (" ));
  CHECK_THAT(node0.output(), Catch::Contains("stopped sending heartbeats"));
}

TEST_CASE("ddprun: the root cause is the earliest failure and not the first reported",
          "[launcher]") {
  // Rank 1 fails first but takes 2 s to exit (a slow teardown); rank 0 fails 300 ms after rank
  // 1 wrote its error file (it waits for the file that says so) as a knock-on and exits at once,
  // so its agent reports first. Both agents must blame rank 1.
  TempDir dir;
  auto port = port_arg(free_port());
  DdprunProcess node0(fake({"--nproc-per-node=1", "--nnodes=2", "--node-rank=0", port,
                            "--shutdown-timeout=5"}),
                      {{"FAKE_MODE", "after_file:error_file_1:300:1"}, {"FAKE_TOUCH_DIR", dir.path()}});
  DdprunProcess node1(fake({"--nproc-per-node=1", "--nnodes=2", "--node-rank=1", port,
                            "--shutdown-timeout=5"}),
                      {{"FAKE_MODE", "error_file_slow:9:2000"}, {"FAKE_TOUCH_DIR", dir.path()}});
  CHECK(node0.wait() != 0);
  CHECK(node1.wait() != 0);
  for (auto* p : {&node0, &node1}) {
    auto out = p->output();
    CHECK_THAT(out, Catch::Contains("rank        1 of 2"));
    CHECK_THAT(out, Catch::Contains("RuntimeError: fake failure on rank 1"));
  }
}

namespace {

// The one file with this name under `dir`, however deep.
std::string find_file(const std::string& dir, const std::string& name) {
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.path().filename() == name) return entry.path().string();
  }
  return {};
}

std::string expected_long_line(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) text += static_cast<char>('a' + i % 26);
  return text + "\nlast";
}

}  // namespace

TEST_CASE("ddprun: log files hold the worker's bytes exactly, however long its lines",
          "[launcher][logs]") {
  TempDir dir;
  DdprunProcess p(fake({"-r", "3", "--log-dir=" + dir.path(), port_arg(free_port())}),
                  {{"FAKE_MODE", "long_line:200000"}});
  REQUIRE(p.wait() == 0);
  const auto path = find_file(dir.path(), "stdout.log");
  REQUIRE_FALSE(path.empty());
  const std::string content = read_file(path);
  // One 200,000-byte line (not cut in pieces) and a last line without a newline (none added).
  CHECK(content.size() == 200'000 + 5);
  CHECK(content == expected_long_line(200'000));
  CHECK_THAT(p.output(), !Catch::Contains("output was lost"));
}

// Without --log-dir, the workers' error files go to a new temp dir. When all output goes to the
// console that is all it holds: it goes with the job, and is made in TMPDIR, else in /dev/shm.
// The logs of --redirects stay (TMPDIR, else /tmp).
TEST_CASE("ddprun: a console-only job's temp log directory goes with it, logs asked for stay",
          "[launcher][logs]") {
  auto entries = [](const std::string& dir) {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      names.push_back(e.path().filename().string());
    }
    return names;
  };
  TempDir tmp;
  TempDir out;
  SECTION("the workers' error files were in it") {
    DdprunProcess p(fake({"--nproc-per-node=2", port_arg(free_port())}),
                    {{"TMPDIR", tmp.path()}, {"FAKE_MODE", "env"}, {"FAKE_ENV_DIR", out.path()}});
    REQUIRE(p.wait() == 0);
    const auto env = read_env_file(out.file("env_1.txt"));
    CHECK_THAT(env.at("TORCHELASTIC_ERROR_FILE"),
               Catch::StartsWith(tmp.path() + "/torchelastic_") &&
                   Catch::EndsWith("/attempt_0/1/error.json"));
    CHECK(entries(tmp.path()).empty());
  }
  SECTION("a failed worker's error file is read before it goes") {
    DdprunProcess p(fake({"--nproc-per-node=2", port_arg(free_port())}),
                    {{"TMPDIR", tmp.path()}, {"FAKE_MODE", "error_file:3"}});
    CHECK(p.wait() == 3);
    CHECK_THAT(p.output(), Catch::Contains("RuntimeError: fake failure on rank"));
    CHECK(entries(tmp.path()).empty());
  }
  SECTION("without TMPDIR it is made in RAM, and goes too") {
    if (access("/dev/shm", W_OK | X_OK) != 0) {
      WARN("no writable /dev/shm here: the temp dir goes to /tmp, which the other sections check");
      return;
    }
    DdprunProcess p(fake({"--nproc-per-node=1", port_arg(free_port())}),
                    {{"TMPDIR", ""}, {"FAKE_MODE", "env"}, {"FAKE_ENV_DIR", out.path()}});
    REQUIRE(p.wait() == 0);
    const auto error_file = read_env_file(out.file("env_0.txt")).at("TORCHELASTIC_ERROR_FILE");
    CHECK_THAT(error_file, Catch::StartsWith("/dev/shm/torchelastic_"));
    const auto job_dir =
        error_file.substr(0, error_file.find('/', std::string("/dev/shm/").size()));
    CHECK_FALSE(std::filesystem::exists(job_dir));
  }
  SECTION("with --redirects the logs stay") {
    DdprunProcess p(fake({"-r", "3", port_arg(free_port())}),
                    {{"TMPDIR", tmp.path()}, {"FAKE_MODE", "long_line:10"}});
    REQUIRE(p.wait() == 0);
    REQUIRE(entries(tmp.path()).size() == 1);
    CHECK_FALSE(find_file(tmp.path(), "stdout.log").empty());
  }
  SECTION("a directory nobody named is named at the start and in the root cause") {
    DdprunProcess p(fake({"-r", "3", port_arg(free_port())}),
                    {{"TMPDIR", tmp.path()}, {"FAKE_MODE", "exit:3"}});
    CHECK(p.wait() == 3);
    REQUIRE(entries(tmp.path()).size() == 1);
    const auto dir = tmp.path() + "/" + entries(tmp.path()).front();
    // <TMPDIR>/torchelastic_<random>/<run id>_<random>
    CHECK_THAT(p.output(), Catch::Contains("worker logs: " + dir + "/none_") &&
                               Catch::Contains("/attempt_<n>/<local rank>/ (no --log-dir given)"));
    CHECK_THAT(p.output(), Catch::Contains("  logs        " + dir + "/none_") &&
                               Catch::Contains(" (this node's log directory)"));
  }
}

TEST_CASE("ddprun: a Python script that does not exist is refused before anything starts",
          "[launcher]") {
  DdprunProcess p({"--nproc-per-node=2", "no_such_script.py"}, {{"PYTHON_EXEC", "/bin/true"}});
  CHECK(p.wait() == 127);
  CHECK_THAT(p.output(), Catch::Contains("no_such_script.py: no such file in "));
  CHECK_THAT(p.output(), !Catch::Contains("starting 2 workers"));
  // A name with the local rank ($local_rank or ${local_rank}) is each worker's own file: left to
  // the workers.
  DdprunProcess per_rank({"--nproc-per-node=2", "rank_${local_rank}.py"},
                         {{"PYTHON_EXEC", "/bin/true"}});
  CHECK(per_rank.wait() == 0);
  DdprunProcess per_rank_bare({"--nproc-per-node=2", "--master-port=0", "rank_$local_rank.py"},
                              {{"PYTHON_EXEC", "/bin/true"}});
  CHECK(per_rank_bare.wait() == 0);
}

TEST_CASE("ddprun: a script's name is checked as the workers get it, a doubled dollar as one",
          "[launcher]") {
  TempDir dir;
  std::ofstream(dir.file("a$b.py")) << "\n";
  DdprunProcess found({"--nproc-per-node=2", "--master-port=0", dir.file("a$$b.py")},
                      {{"PYTHON_EXEC", "/bin/true"}});
  CHECK(found.wait() == 0);
  // "a$b.py" itself names a$b.py as the workers get it: "$b" is a placeholder torchrun keeps.
  DdprunProcess kept({"--nproc-per-node=2", "--master-port=0", dir.file("a$b.py")},
                     {{"PYTHON_EXEC", "/bin/true"}});
  CHECK(kept.wait() == 0);
  DdprunProcess missing({"--nproc-per-node=2", dir.file("no$$such.py")},
                        {{"PYTHON_EXEC", "/bin/true"}});
  CHECK(missing.wait() == 127);
  CHECK_THAT(missing.output(), Catch::Contains(dir.file("no$such.py") + ": no such file in "));
}

TEST_CASE("ddprun: a log file that cannot be written is reported, and the summary says so",
          "[launcher][logs]") {
  TempDir dir;
  // A file-size limit of 64 KiB for ddprun (and what it starts) makes the 200 KB log file fail
  // with EFBIG, as a full disk would with ENOSPC; the console output stays far below it.
  rlimit previous{};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &previous) == 0);
  rlimit small{64 * 1024, previous.rlim_max};
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  DdprunProcess p(fake({"-r", "3", "--log-dir=" + dir.path(), port_arg(free_port())}),
                  {{"FAKE_MODE", "long_line:200000"}});
  REQUIRE(setrlimit(RLIMIT_FSIZE, &previous) == 0);
  CHECK(p.wait() == 0);  // the job's own result
  const auto out = p.output();
  CHECK(count_of(out, "worker output lost: cannot write") == 1);  // once per file
  CHECK_THAT(out, Catch::Contains("stdout.log: File too large"));
  CHECK_THAT(out,
             Catch::Contains("output was lost: 1 worker log file(s) could not be written in full"));
}
