// The agent's state machine on the in-memory store with a fake runner: no sockets, no processes.

#include <catch2/catch.hpp>

#include <signal.h>

#include <future>
#include <thread>

#include "agent/elastic_agent.hpp"
#include "common/error.hpp"
#include "rendezvous/memory_store.hpp"
#include "support/fake_runner.hpp"
#include "support/test_util.hpp"

using namespace ddprun;
using namespace std::chrono_literals;
using test::FakeRunner;

namespace {

LaunchConfig config_for(int nnodes, int node_rank, int nproc, int max_restarts = 0) {
  LaunchConfig c;
  c.min_nodes = c.max_nodes = nnodes;
  c.node_rank = node_rank;
  c.nproc_per_node = nproc;
  c.max_restarts = max_restarts;
  c.argv = {"worker", "--rank=${local_rank}"};
  c.rdzv_conf.join_timeout = 20s;
  c.rdzv_conf.close_timeout = 5s;
  c.shutdown_timeout = 1s;
  return c;
}

// One node's agent running on its own thread.
struct Node {
  Node(MemoryStore& shared, LaunchConfig c, const std::string& host, const std::string& log_dir)
      : config(std::move(c)), store(shared.connect()) {
    AgentContext ctx;
    ctx.host = host;
    ctx.store = store.get();
    ctx.open_store = [&shared](Deadline) { return std::unique_ptr<Store>(shared.connect()); };
    ctx.runner = &runner;
    ctx.reserve_master_port = [] { return 23456; };
    ctx.log_dir = log_dir;
    ctx.base_env = {{"HOME", "/home/test"}};
    agent = std::make_unique<ElasticAgent>(config, std::move(ctx));
    result = std::async(std::launch::async, [this] { return agent->run(); });
  }
  RunResult finish() {
    REQUIRE(result.wait_for(30s) == std::future_status::ready);
    return result.get();
  }

  LaunchConfig config;
  std::unique_ptr<MemoryStore> store;
  FakeRunner runner;
  std::unique_ptr<ElasticAgent> agent;
  std::future<RunResult> result;
};

std::map<std::string, std::string> env_of(const WorkerLaunch& w) {
  std::map<std::string, std::string> env;
  for (const auto& kv : w.env) env[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  return env;
}

}  // namespace

TEST_CASE("agent: all workers succeed, the job exits 0", "[agent]") {
  MemoryStore shared;
  test::TempDir dir;
  Node node(shared, config_for(1, 0, 2), "hostA", dir.path());
  REQUIRE(node.runner.wait_for_start(1));
  auto launches = node.runner.launches()[0];
  REQUIRE(launches.size() == 2);
  CHECK(launches[1].argv == std::vector<std::string>{"worker", "--rank=1"});
  auto env = env_of(launches[1]);
  CHECK(env["RANK"] == "1");
  CHECK(env["WORLD_SIZE"] == "2");
  CHECK(env["MASTER_PORT"] == "23456");
  CHECK(env["HOME"] == "/home/test");
  CHECK(launches[0].output.prefix == "[default0]:");
  node.runner.exit_all(0);
  auto r = node.finish();
  CHECK(r.exit_code == 0);
  CHECK(r.restarts == 0);
  CHECK_FALSE(r.root_cause);
}

TEST_CASE("agent: a failure is retried with a higher restart count", "[agent]") {
  MemoryStore shared;
  test::TempDir dir;
  Node node(shared, config_for(1, 0, 2, 1), "hostA", dir.path());
  REQUIRE(node.runner.wait_for_start(1));
  node.runner.exit_worker(1, 3);
  REQUIRE(node.runner.wait_for_start(2));
  // The survivor of attempt 0 was stopped with SIGTERM before attempt 1 started.
  CHECK(node.runner.stop_signals().at(0) == SIGTERM);
  CHECK(env_of(node.runner.launches()[1][0])["TORCHELASTIC_RESTART_COUNT"] == "1");
  node.runner.exit_all(0);
  auto r = node.finish();
  CHECK(r.exit_code == 0);
  CHECK(r.restarts == 1);
}

TEST_CASE("agent: restarts exhausted, the root cause's code and rank", "[agent]") {
  MemoryStore shared;
  test::TempDir dir;
  Node node(shared, config_for(1, 0, 3), "hostA", dir.path());
  REQUIRE(node.runner.wait_for_start(1));
  node.runner.exit_worker(2, 0, SIGSEGV);
  auto r = node.finish();
  CHECK(r.exit_code == 128 + SIGSEGV);
  REQUIRE(r.root_cause);
  CHECK(r.root_cause->rank == 2);
  CHECK(r.root_cause->host == "hostA");
  CHECK(r.root_cause->signal == SIGSEGV);
  CHECK(r.root_cause->stderr_tail == std::vector<std::string>{"fake stderr of local rank 2"});
  CHECK(node.runner.starts() == 1);
}

TEST_CASE("agent: a failure on node 1 stops and restarts node 0 too", "[agent]") {
  MemoryStore shared;
  test::TempDir dir;
  Node n0(shared, config_for(2, 0, 2, 1), "hostA", dir.file("n0"));
  Node n1(shared, config_for(2, 1, 1, 1), "hostB", dir.file("n1"));
  REQUIRE(n0.runner.wait_for_start(1));
  REQUIRE(n1.runner.wait_for_start(1));
  CHECK(env_of(n1.runner.launches()[0][0])["RANK"] == "2");
  CHECK(env_of(n1.runner.launches()[0][0])["WORLD_SIZE"] == "3");
  n1.runner.exit_worker(0, 7);
  // Node 0's workers were healthy; they are restarted together with node 1's.
  REQUIRE(n0.runner.wait_for_start(2));
  REQUIRE(n1.runner.wait_for_start(2));
  CHECK(n0.runner.stop_signals().at(0) == SIGTERM);
  n1.runner.exit_all(7);
  auto r0 = n0.finish();
  auto r1 = n1.finish();
  CHECK(r0.exit_code == 7);
  CHECK(r1.exit_code == 7);
  REQUIRE(r0.root_cause);
  CHECK(r0.root_cause->host == "hostB");
  CHECK(r0.root_cause->node == 1);
  CHECK(r0.root_cause->attempt == 1);
}

TEST_CASE("agent: the first failure in the store is everyone's root cause", "[agent]") {
  MemoryStore shared;
  test::TempDir dir;
  Node n0(shared, config_for(2, 0, 1), "hostA", dir.file("n0"));
  Node n1(shared, config_for(2, 1, 1), "hostB", dir.file("n1"));
  REQUIRE(n0.runner.wait_for_start(1));
  REQUIRE(n1.runner.wait_for_start(1));
  n0.runner.exit_worker(0, 5);
  auto r0 = n0.finish();
  auto r1 = n1.finish();
  CHECK(r0.exit_code == 5);
  CHECK(r1.exit_code == 5);
  CHECK(r1.root_cause->host == "hostA");
}

TEST_CASE("agent: a signal stops the workers with that signal and exits 128+N", "[agent]") {
  MemoryStore shared;
  test::TempDir dir;
  Node node(shared, config_for(1, 0, 2, 3), "hostA", dir.path());
  REQUIRE(node.runner.wait_for_start(1));
  node.agent->on_signal(SIGINT);
  auto r = node.finish();
  CHECK(r.exit_code == 128 + SIGINT);
  CHECK(node.runner.stop_signals().at(0) == SIGINT);
  CHECK(node.runner.starts() == 1);  // a signal is not retried
}

TEST_CASE("agent: a signal during the rendezvous ends it at once", "[agent]") {
  MemoryStore shared;
  test::TempDir dir;
  Node node(shared, config_for(2, 0, 1), "hostA", dir.path());  // node 1 never comes
  std::this_thread::sleep_for(50ms);
  node.agent->on_signal(SIGTERM);
  auto r = node.finish();
  CHECK(r.exit_code == 128 + SIGTERM);
  CHECK(node.runner.starts() == 0);
  // It gave its node rank back: the node can be started again on the same store.
  CHECK(shared.get("static/node/0/owner", Deadline::after(1s)) == "");
}

TEST_CASE("agent: a rendezvous timeout names the missing nodes and exits 124", "[agent]") {
  MemoryStore shared;
  test::TempDir dir;
  auto c = config_for(3, 0, 1);
  c.rdzv_conf.join_timeout = 200ms;
  Node node(shared, c, "hostA", dir.path());
  auto r = node.finish();
  CHECK(r.exit_code == kExitRendezvous);
  CHECK_THAT(r.reason, Catch::Contains("1/3 nodes joined"));
  CHECK_THAT(r.reason, Catch::Contains("missing node ranks [1, 2]"));
}

TEST_CASE("agent: mismatched --nnodes is refused", "[agent]") {
  MemoryStore shared;
  test::TempDir dir;
  auto c0 = config_for(2, 0, 1);
  c0.rdzv_conf.join_timeout = 2s;
  Node n0(shared, c0, "hostA", dir.file("n0"));
  // Node 0 records its node count first, so node 1 is the one that disagrees.
  REQUIRE(test::wait_until([&] { return shared.check({"static/nnodes"}, Deadline::after(1s)); },
                           10s));
  auto c1 = config_for(3, 1, 1);
  c1.rdzv_conf.join_timeout = 2s;
  Node n1(shared, c1, "hostB", dir.file("n1"));
  auto r1 = n1.finish();
  CHECK(r1.exit_code == kExitRendezvous);
  CHECK_THAT(r1.reason, Catch::Contains("--nnodes=3"));
  CHECK_THAT(r1.reason, Catch::Contains("--nnodes=2"));
  CHECK(n0.finish().exit_code == kExitRendezvous);
}

TEST_CASE("agent: a worker whose stderr is not UTF-8 is still reported", "[agent]") {
  MemoryStore shared;
  test::TempDir dir;
  Node node(shared, config_for(1, 0, 1), "hostA", dir.path());
  REQUIRE(node.runner.wait_for_start(1));
  node.runner.set_stderr_tail({"bad bytes \xff\xfe and a cut \xE2\x96"});
  node.runner.exit_worker(0, 6);
  auto r = node.finish();
  CHECK(r.exit_code == 6);
  REQUIRE(r.root_cause);
  CHECK(r.root_cause->stderr_tail.size() == 1);
}
