// Elastic rendezvous end to end: real agents on 127.0.0.1 (one store, several agents), nodes
// that join, die, pause, leave, and wait as spares. Each agent writes --events-file; the tests
// read what happened from there.

#include <catch2/catch.hpp>

#include <signal.h>

#include <nlohmann/json.hpp>

#include "common/deadline.hpp"
#include "store/tcp_store_client.hpp"
#include "testing/ddprun_process.hpp"
#include "testing/elastic_cluster.hpp"
#include "testing/child.hpp"
#include "testing/test_util.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// A c10d job: every agent on 127.0.0.1, the store at a free port (served by the first agent).
struct Cluster : ElasticCluster {
  explicit Cluster(std::string nnodes, std::string extra_conf = "")
      : ElasticCluster(std::move(nnodes),
                       {"--rdzv-backend=c10d",
                        "--rdzv-endpoint=127.0.0.1:" + std::to_string(free_port())},
                       std::move(extra_conf)) {}
};

}  // namespace

TEST_CASE("elastic: a third node joins a running 2-node job", "[elastic]") {
  Cluster c("2:3");
  auto a = c.start("a");
  REQUIRE(wait_until([&] { return !c.read("a", "rendezvous_started").empty(); }, 20s));
  auto b = c.start("b");
  REQUIRE(c.wait_for_round("a", 2));
  auto joiner = c.start("c");
  REQUIRE(c.wait_for_round("c", 3));
  // (c completed the round of 3, so a and b are in it and their workers of 2 are gone.)
  c.release_workers();
  CHECK(a->wait() == 0);
  CHECK(b->wait() == 0);
  CHECK(joiner->wait() == 0);
  CHECK(c.wait_for_round("a", 3, 1s));
  CHECK(c.wait_for_round("b", 3, 1s));
  // A membership change is not a failure: no restart was spent.
  CHECK(c.read("a", "restart").empty());
  CHECK(c.read("a", "job_finished").at(0).at("restarts") == 0);
  // The nodes that stayed kept their order.
  auto rounds = c.read("a", "rendezvous_completed");
  CHECK(rounds.front().at("group_rank") == rounds.back().at("group_rank"));
}

TEST_CASE("elastic: SIGKILL of one of three nodes, the others go on with two", "[elastic]") {
  Cluster c("2:3");
  auto a = c.start("a");  // a serves the store (it binds first)
  REQUIRE(wait_until([&] { return !c.read("a", "rendezvous_started").empty(); }, 20s));
  auto b = c.start("b");
  auto victim = c.start("c");
  REQUIRE(c.wait_for_round("c", 3));
  const int round_of_3 = c.last_round("c");
  const auto killed = ddprun::Clock::now();
  kill(victim->pid(), SIGKILL);
  // (a and b may have run a round of 2 before c came: only a later one counts.)
  REQUIRE(c.wait_for_round("a", 2, 40s, round_of_3));
  // Keep-alive deadline 1.5 s, plus the 1 s last call; the bound only catches a hang.
  CHECK(ddprun::Clock::now() - killed < 20s);
  c.release_workers();
  CHECK(a->wait() == 0);
  CHECK(b->wait() == 0);
  CHECK(c.wait_for_round("b", 2, 1s));
}

TEST_CASE("elastic: a hot spare is promoted when a member leaves", "[elastic]") {
  Cluster c("1:2");
  auto a = c.start("a");
  REQUIRE(wait_until([&] { return !c.read("a", "rendezvous_started").empty(); }, 20s));
  auto b = c.start("b");
  REQUIRE(c.wait_for_round("b", 2));
  auto spare = c.start("spare");
  // The spare waits: the round is full. It says so once it has looked at the round, the point
  // where it would otherwise have joined.
  REQUIRE(spare->wait_for_output("waiting as a hot spare"));
  CHECK(c.read("spare", "rendezvous_completed").empty());
  kill(b->pid(), SIGKILL);
  REQUIRE(c.wait_for_round("spare", 2));
  c.release_workers();
  CHECK(a->wait() == 0);
  CHECK(spare->wait() == 0);
}

TEST_CASE("elastic: MIN never reached fails after the join timeout, saying how many came",
          "[elastic]") {
  Cluster c("2:3", ",join_timeout=2");
  auto start = ddprun::Clock::now();
  auto a = c.start("a");
  CHECK(a->wait(60s) == 124);
  CHECK(ddprun::Clock::now() - start < 30s);
  CHECK_THAT(a->output(), Catch::Contains("1 node(s) joined round 0, at least 2 needed"));
}

TEST_CASE("elastic: a paused node finds out the round moved on and rejoins", "[elastic]") {
  Cluster c("2:3");
  auto a = c.start("a");
  REQUIRE(wait_until([&] { return !c.read("a", "rendezvous_started").empty(); }, 20s));
  auto b = c.start("b");
  auto paused = c.start("c");
  REQUIRE(c.wait_for_round("c", 3));
  const int round_of_3 = c.last_round("c");
  kill(paused->pid(), SIGSTOP);
  REQUIRE(c.wait_for_round("a", 2, 40s, round_of_3));  // the others dropped it
  kill(paused->pid(), SIGCONT);
  // It stops its stale workers and comes back: the job re-forms with three.
  REQUIRE(wait_until([&] { return c.read("c", "rendezvous_completed").size() >= 2; }, 40s));
  CHECK(c.read("c", "rendezvous_completed").back().at("world_size") == 3);
  c.release_workers();
  CHECK(a->wait() == 0);
  CHECK(b->wait() == 0);
  CHECK(paused->wait() == 0);
}

TEST_CASE("elastic: SIGTERM on one node does not stop the others from re-forming",
          "[elastic]") {
  Cluster c("2:3");
  auto a = c.start("a");
  REQUIRE(wait_until([&] { return !c.read("a", "rendezvous_started").empty(); }, 20s));
  auto b = c.start("b");
  auto leaver = c.start("c");
  REQUIRE(c.wait_for_round("c", 3));
  const int round_of_3 = c.last_round("c");
  kill(leaver->pid(), SIGTERM);
  CHECK(leaver->wait(30s) == 143);
  REQUIRE(c.wait_for_round("a", 2, 40s, round_of_3));
  c.release_workers();
  CHECK(a->wait() == 0);
  CHECK(b->wait() == 0);
}

TEST_CASE("elastic: two run ids on one store stay apart", "[elastic]") {
  auto port = free_port();
  Child store(SpawnSpec{{DDPRUN_STORE_BINARY, "--host", "127.0.0.1", "--port",
                         std::to_string(port), "--log-level", "warn"}, {}, {}});
  TempDir dir;
  auto run = [&](const std::string& id, const std::string& name) {
    return std::make_unique<DdprunProcess>(
        std::vector<std::string>{"--nnodes=2", "--rdzv-backend=c10d",
                                 "--rdzv-endpoint=127.0.0.1:" + std::to_string(port),
                                 "--rdzv-id=" + id, "--rdzv-conf=is_host=0,join_timeout=30",
                                 "--local-addr=127.0.0.1", "--events-file", dir.file(name),
                                 "--no-python", "true"});
  };
  auto x1 = run("job-x", "x1");
  auto y1 = run("job-y", "y1");
  auto x2 = run("job-x", "x2");
  auto y2 = run("job-y", "y2");
  for (auto* p : {&x1, &y1, &x2, &y2}) CHECK((*p)->wait() == 0);
  for (const char* name : {"x1", "x2", "y1", "y2"}) {
    bool two = false;
    for (const auto& line : read_lines(dir.file(name))) {
      auto j = json::parse(line);
      if (j.at("event") == "rendezvous_completed") two = j.at("world_size") == 2;
    }
    CHECK(two);
  }
  store.signal(SIGTERM);
  CHECK(store.wait_for(10s).has_value());
}

TEST_CASE("elastic: a run id given again after its job ended is refused at once and nothing "
          "runs", "[elastic]") {
  auto port = free_port();
  Child store(SpawnSpec{{DDPRUN_STORE_BINARY, "--host", "127.0.0.1", "--port",
                         std::to_string(port), "--log-level", "warn"}, {}, {}});
  TempDir dir;
  auto run = [&](const std::string& marker) {
    return std::make_unique<DdprunProcess>(std::vector<std::string>{
        "--nnodes=1", "--rdzv-backend=c10d",
        "--rdzv-endpoint=127.0.0.1:" + std::to_string(port), "--rdzv-id=exp1",
        "--rdzv-conf=is_host=0,join_timeout=30", "--local-addr=127.0.0.1", "--no-python",
        "touch", dir.file(marker)});
  };
  auto job = run("ran");
  REQUIRE(job->wait() == 0);
  REQUIRE(file_exists(dir.file("ran")));
  auto again = run("ran_again");
  CHECK(again->wait(30s) == 124);
  CHECK_THAT(again->output(), Catch::Contains("the job with this run id ended at ") &&
                                  Catch::Contains("(succeeded, as 127.0.0.1 saw it)"));
  CHECK_FALSE(file_exists(dir.file("ran_again")));
  store.signal(SIGTERM);
  CHECK(store.wait_for(10s).has_value());
}

TEST_CASE("elastic: a claim to close the round that a lost agent left is taken over, and the "
          "round closes", "[elastic]") {
  auto port = free_port();
  Child store(SpawnSpec{{DDPRUN_STORE_BINARY, "--host", "127.0.0.1", "--port",
                         std::to_string(port), "--log-level", "warn"}, {}, {}});
  {
    // An agent claimed round 0's closing and was SIGKILLed before it closed it.
    ddprun::store::StoreClientOptions o;
    o.port = static_cast<std::uint16_t>(port);
    o.run_id = "claimed";
    ddprun::store::TcpStoreClient seed(o, ddprun::Deadline::after(10s));
    seed.set("r/0/closing", "lost:1#0.1", ddprun::Deadline::after(5s));
  }
  TempDir dir;
  std::vector<std::unique_ptr<DdprunProcess>> agents;
  for (const char* name : {"a", "b"}) {
    // A claim goes stale after a read of the nodes (5 s) and a keep-alive's silence (3 x 1 s),
    // well within the join timeout.
    agents.push_back(std::make_unique<DdprunProcess>(std::vector<std::string>{
        "--nnodes=2", "--rdzv-backend=c10d",
        "--rdzv-endpoint=127.0.0.1:" + std::to_string(port), "--rdzv-id=claimed",
        "--rdzv-conf=is_host=0,join_timeout=90,keep_alive_interval=1,keep_alive_max_attempt=3",
        "--local-addr=127.0.0.1", "--events-file", dir.file(name), "--no-python", "true"}));
  }
  std::string said;
  for (auto& agent : agents) {
    CHECK(agent->wait(80s) == 0);  // before the join timeout
    said += agent->output();
  }
  CHECK_THAT(said, Catch::Contains("lost:1, which claimed to close it, has not done so in") &&
                       Catch::Contains("taking the claim over"));
  store.signal(SIGTERM);
  CHECK(store.wait_for(10s).has_value());
}

TEST_CASE("elastic: losing the store host fails every agent, nothing hangs", "[elastic]") {
  auto port = free_port();
  Child store(SpawnSpec{{DDPRUN_STORE_BINARY, "--host", "127.0.0.1", "--port",
                         std::to_string(port), "--log-level", "warn"}, {}, {}});
  TempDir dir;
  std::vector<std::unique_ptr<DdprunProcess>> agents;
  for (const char* name : {"a", "b"}) {
    agents.push_back(std::make_unique<DdprunProcess>(
        std::vector<std::string>{"--nnodes=2", "--rdzv-backend=c10d",
                                 "--rdzv-endpoint=127.0.0.1:" + std::to_string(port),
                                 "--rdzv-conf=is_host=0,read_timeout=5,keep_alive_interval=0.5",
                                 "--local-addr=127.0.0.1", "--events-file", dir.file(name),
                                 "--shutdown-timeout=2", "--no-python", "sleep", "60"}));
  }
  REQUIRE(wait_until([&] {
    return read_lines(dir.file("a")).size() >= 3 && read_lines(dir.file("b")).size() >= 3;
  }, 30s));
  store.signal(SIGKILL);
  store.wait_for(10s);
  for (auto& agent : agents) {
    CHECK(agent->wait(30s) == 124);
    CHECK_THAT(agent->output(), Catch::Contains("store"));
  }
}
