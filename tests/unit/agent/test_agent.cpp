// The agent on the in-memory store with a fake runner, in both rendezvous modes: no sockets, no
// processes. Every wait is for an event (a start of the fake runner, a key in the store), with a
// deadline that only catches hangs.

#include <catch2/catch.hpp>

#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "agent/agent.hpp"
#include "agent/event_log.hpp"
#include "agent/outcome_watcher.hpp"
#include "common/error.hpp"
#include "common/exit_codes.hpp"
#include "launcher/job_report.hpp"
#include "rendezvous/backend.hpp"
#include "rendezvous/elastic_rendezvous.hpp"
#include "rendezvous/heartbeat.hpp"
#include "store/memory_store.hpp"
#include "testing/fake_runner.hpp"
#include "testing/hook_store.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;
using namespace std::chrono_literals;
using test::FakeRunner;

namespace {

constexpr auto kHang = 30s;  // only catches hangs

LaunchConfig config_for(int nnodes, int node_rank, int nproc, int max_restarts = 0) {
  LaunchConfig c;
  c.min_nodes = c.max_nodes = nnodes;
  c.node_rank = node_rank;
  c.nproc_per_node = nproc;
  c.max_restarts = max_restarts;
  c.argv = {"worker", "--rank=${local_rank}"};
  c.master_addr = "10.0.0.1";
  c.rdzv_conf.join_timeout = 20s;
  c.rdzv_conf.close_timeout = 5s;
  c.rdzv_conf.read_timeout = 5s;
  c.shutdown_timeout = 1s;
  return c;
}

LaunchConfig elastic_config(int min_nodes, int max_nodes, int nproc, int max_restarts = 0) {
  auto c = config_for(max_nodes, 0, nproc, max_restarts);
  c.rdzv_backend = RdzvBackend::kC10d;
  c.min_nodes = min_nodes;
  // Long enough that a second node started right after the first is in its round even on a
  // busy machine; it only delays rounds that close below MAX.
  c.rdzv_conf.last_call_timeout = 2s;
  c.rdzv_conf.keep_alive_interval = 100ms;
  c.rdzv_conf.keep_alive_max_attempt = 5;
  return c;
}

struct NodeOptions {
  bool hosts_store = false;  // waits for the others' goodbyes at the end
  // Runs before each set on the agent's own store connection (not on the fresh ones it opens).
  std::function<void(const std::string& key)> before_set;
  std::string events_file;  // --events-file, when not empty
};

// One node's agent running on its own thread.
struct Node {
  Node(store::MemoryStore& shared, LaunchConfig c, const std::string& host, const std::string& log_dir,
       NodeOptions options = {})
      : config(std::move(c)) {
    test::HookStore::BeforeSet before_set;
    if (options.before_set) {
      before_set = [hook = std::move(options.before_set)](const std::string& key,
                                                          const std::string&) { hook(key); };
    }
    store = std::make_unique<test::HookStore>(
        shared.connect(), std::move(before_set), [this](const std::string& key) {
          if (key.ends_with("/master_port")) ++master_port_reads;
        });
    store::StoreOpener open = [&shared, this](Deadline) {
      ++opened;
      return std::unique_ptr<store::Store>(shared.connect());
    };
    rendezvous = make_rendezvous_handler(config, *store, open, host);
    AgentContext ctx;
    ctx.host = host;
    ctx.store = store.get();
    ctx.open_store = open;
    ctx.rendezvous = rendezvous.get();
    ctx.runner = &runner;
    // A new port at each reservation, so that a test sees which one the workers got.
    ctx.open_workers_store = [this] { return 23456 + reserved++; };
    ctx.hosts_store = options.hosts_store;
    ctx.log_dir = log_dir;
    ctx.base_env = {{"HOME", "/home/test"}};
    if (!options.events_file.empty()) {
      events = std::make_unique<EventLog>(options.events_file);
      ctx.events = events.get();
    }
    agent = std::make_unique<Agent>(config, std::move(ctx));
    result = std::async(std::launch::async, [this] { return agent->run(); });
  }
  RunResult finish() {
    REQUIRE(result.wait_for(kHang) == std::future_status::ready);
    return result.get();
  }
  int exit_code() { return exit_code_of(finish()); }

  LaunchConfig config;
  std::atomic<int> opened{0};  // connections the agent opened besides its own
  std::atomic<int> reserved{0};  // master ports reserved
  std::atomic<int> master_port_reads{0};  // on the agent's own connection
  std::unique_ptr<store::Store> store;
  std::unique_ptr<RendezvousHandler> rendezvous;
  FakeRunner runner;
  std::unique_ptr<EventLog> events;
  std::unique_ptr<Agent> agent;
  std::future<RunResult> result;
};

// The node_check event in the events file at `path`, null when there is none.
nlohmann::json node_check_event(const std::string& path) {
  std::istringstream events(test::read_file(path));
  for (std::string line; std::getline(events, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] == "node_check") return j;
  }
  return nullptr;
}

// An elastic job under --node-check=refuse that measures no links (they have tests of their
// own).
LaunchConfig refusing_config(int min_nodes, int max_nodes) {
  auto c = elastic_config(min_nodes, max_nodes, 1);
  c.node_check = NodeCheck::kRefuse;
  c.node_check_mib = 0;
  return c;
}

// Waits until `n` started its first workers, or ended: the check passes unless this machine
// itself is short of something (its temp directory's room, /dev/shm), which ends every node
// alike and skips the test.
bool started_unless_refused(Node& n) {
  REQUIRE(test::wait_until([&] {
    return n.runner.starts() >= 1 || n.result.wait_for(0s) == std::future_status::ready;
  }, kHang));
  if (n.runner.starts() >= 1) return true;
  WARN("skipped: the check names this machine itself: " << n.finish().reason);
  return false;
}

std::map<std::string, std::string> env_of(const WorkerLaunch& w) {
  std::map<std::string, std::string> env;
  for (const auto& kv : w.env) env[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  return env;
}

// True once the latest start of `runner` gave its workers WORLD_SIZE `world_size`.
bool latest_world_size_is(FakeRunner& runner, int world_size) {
  auto launches = runner.launches();
  return !launches.empty() &&
         env_of(launches.back().at(0))["WORLD_SIZE"] == std::to_string(world_size);
}

std::string env_of_start(FakeRunner& runner, int start, int local_rank, const std::string& key) {
  return env_of(runner.launches().at(static_cast<std::size_t>(start))
                    .at(static_cast<std::size_t>(local_rank)))[key];
}

}  // namespace

TEST_CASE("agent: all workers succeed, the job exits 0", "[agent]") {
  store::MemoryStore shared;
  test::TempDir dir;
  Node node(shared, config_for(1, 0, 2), "hostA", dir.path());
  REQUIRE(node.runner.wait_for_start(1));
  auto launches = node.runner.launches()[0];
  REQUIRE(launches.size() == 2);
  CHECK(launches[1].argv == std::vector<std::string>{"worker", "--rank=1"});
  auto env = env_of(launches[1]);
  CHECK(env["RANK"] == "1");
  CHECK(env["WORLD_SIZE"] == "2");
  CHECK(env["MASTER_ADDR"] == "10.0.0.1");
  CHECK(env["MASTER_PORT"] == "23456");
  CHECK(env["HOME"] == "/home/test");
  CHECK(launches[0].output.prefix == "[default0]:");
  node.runner.exit_all(0);
  auto r = node.finish();
  CHECK(r.end == RunResult::End::kSucceeded);
  CHECK(exit_code_of(r) == 0);
  CHECK(r.restarts == 0);
  CHECK_FALSE(r.root_cause);
}

TEST_CASE("agent: a failure is retried with a higher restart count", "[agent]") {
  store::MemoryStore shared;
  test::TempDir dir;
  Node node(shared, config_for(1, 0, 2, 1), "hostA", dir.path());
  REQUIRE(node.runner.wait_for_start(1));
  node.runner.exit_worker(1, 3);
  REQUIRE(node.runner.wait_for_start(2));
  // The survivor of attempt 0 was stopped with SIGTERM before attempt 1 started.
  CHECK(node.runner.stop_signals().at(0) == SIGTERM);
  CHECK(env_of_start(node.runner, 1, 0, "TORCHELASTIC_RESTART_COUNT") == "1");
  node.runner.exit_all(0);
  auto r = node.finish();
  CHECK(exit_code_of(r) == 0);
  CHECK(r.restarts == 1);
}

TEST_CASE("agent: a worker that cannot be reaped does not keep the job from restarting",
          "[agent]") {
  store::MemoryStore shared;
  test::TempDir dir;
  NodeOptions options;
  options.events_file = dir.file("events.jsonl");
  Node node(shared, config_for(1, 0, 2, 1), "hostA", dir.path(), options);
  REQUIRE(node.runner.wait_for_start(1));
  node.runner.leave_unreaped({0});  // stuck in the kernel: SIGKILL does not end it
  node.runner.exit_worker(1, 3);
  REQUIRE(node.runner.wait_for_start(2));
  node.runner.exit_all(0);
  auto r = node.finish();
  CHECK(exit_code_of(r) == 0);
  CHECK(r.restarts == 1);
  // The events file names it.
  nlohmann::json stopped;
  std::istringstream events(test::read_file(options.events_file));
  for (std::string line; std::getline(events, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] == "workers_stopped" && stopped.is_null()) stopped = j;
  }
  REQUIRE(stopped["unreaped"].size() == 1);
  CHECK(stopped["unreaped"][0]["rank"] == 0);
  CHECK(stopped["unreaped"][0]["pid"] == 4242);
  CHECK(stopped["unreaped"][0]["state"] == "state D in fake");
}

TEST_CASE("agent: restarts exhausted, the root cause's code and rank", "[agent]") {
  store::MemoryStore shared;
  test::TempDir dir;
  Node node(shared, config_for(1, 0, 3), "hostA", dir.path());
  REQUIRE(node.runner.wait_for_start(1));
  node.runner.exit_worker(2, 0, SIGSEGV);
  auto r = node.finish();
  CHECK(r.end == RunResult::End::kFailed);
  CHECK(exit_code_of(r) == 128 + SIGSEGV);
  REQUIRE(r.root_cause);
  CHECK(r.root_cause->rank == 2);
  CHECK(r.root_cause->host == "hostA");
  CHECK(r.root_cause->signal == SIGSEGV);
  CHECK(r.root_cause->stderr_tail == std::vector<std::string>{"fake stderr of local rank 2"});
  CHECK(r.world_size == 3);
  CHECK(node.runner.starts() == 1);
}

TEST_CASE("agent: a node that comes after its job ended is refused at its first look, told how "
          "and when the job ended", "[agent]") {
  store::MemoryStore shared;
  test::TempDir dir;
  const bool elastic = GENERATE(false, true);
  INFO((elastic ? "elastic" : "static"));
  const auto config = elastic ? elastic_config(1, 1, 1) : config_for(1, 0, 1);
  const bool fails = GENERATE(false, true);
  {
    Node job(shared, config, "hostA", dir.file("job"));
    REQUIRE(job.runner.wait_for_start(1));
    job.runner.exit_all(fails ? 3 : 0);
    CHECK(job.exit_code() == (fails ? 3 : 0));
  }
  // The same run id again on the store that kept the job's keys (a standalone ddprun-store).
  Node again(shared, config, "hostB", dir.file("again"));
  auto r = again.finish();
  CHECK(r.end == RunResult::End::kRendezvousFailed);
  CHECK(exit_code_of(r) == kExitRendezvous);
  CHECK_THAT(r.reason, Catch::StartsWith("the job with this run id ended at 20") &&
                           Catch::Contains(fails ? " UTC (failed: rank 0 on hostA exited with 3, "
                                                   "as hostA saw it)"
                                                 : " UTC (succeeded, as hostA saw it)") &&
                           Catch::Contains("--rdzv-id"));
  CHECK(again.runner.starts() == 0);
}

TEST_CASE("agent: a node whose exit barrier expired records no end of the job the others still "
          "run", "[agent]") {
  store::MemoryStore shared;
  test::TempDir dir;
  auto config = [](int rank) {
    auto c = config_for(2, rank, 1);
    c.exit_barrier_timeout = 200ms;
    return c;
  };
  Node a(shared, config(0), "hostA", dir.file("a"));
  Node b(shared, config(1), "hostB", dir.file("b"));
  REQUIRE(a.runner.wait_for_start(1));
  REQUIRE(b.runner.wait_for_start(1));
  a.runner.exit_all(0);
  CHECK(a.exit_code() == 0);  // left with success once its barrier expired; b still runs
  CHECK_FALSE(shared.check({"ended"}, Deadline::after(kHang)));
  b.runner.exit_all(0);
  CHECK(b.exit_code() == 0);
  CHECK_THAT(shared.get("ended", Deadline::after(kHang)),
             Catch::Contains("\"how\":\"succeeded\"") && Catch::Contains("hostB"));
}

TEST_CASE("agent: a failure on node 1 stops and restarts node 0 too", "[agent]") {
  store::MemoryStore shared;
  test::TempDir dir;
  Node n0(shared, config_for(2, 0, 2, 1), "hostA", dir.file("n0"));
  Node n1(shared, config_for(2, 1, 1, 1), "hostB", dir.file("n1"));
  REQUIRE(n0.runner.wait_for_start(1));
  REQUIRE(n1.runner.wait_for_start(1));
  CHECK(env_of_start(n1.runner, 0, 0, "RANK") == "2");
  CHECK(env_of_start(n1.runner, 0, 0, "WORLD_SIZE") == "3");
  n1.runner.exit_worker(0, 7);
  // Node 0's workers were healthy; they are restarted together with node 1's.
  REQUIRE(n0.runner.wait_for_start(2));
  REQUIRE(n1.runner.wait_for_start(2));
  CHECK(n0.runner.stop_signals().at(0) == SIGTERM);
  n1.runner.exit_all(7);
  auto r0 = n0.finish();
  auto r1 = n1.finish();
  CHECK(exit_code_of(r0) == 7);
  CHECK(exit_code_of(r1) == 7);
  REQUIRE(r0.root_cause);
  CHECK(r0.root_cause->host == "hostB");
  CHECK(r0.root_cause->node == 1);
  CHECK(r0.root_cause->attempt == 1);
}

TEST_CASE("agent: a static restart after a settled failure skips the start barrier, gets its "
          "master port with the root cause and reuses the outcome watcher's connection and the "
          "keep-alive ring", "[agent]") {
  store::MemoryStore shared;
  test::TempDir dir;
  Node n0(shared, config_for(2, 0, 1, 2), "hostA", dir.file("n0"));
  Node n1(shared, config_for(2, 1, 1, 2), "hostB", dir.file("n1"));
  REQUIRE(n0.runner.wait_for_start(1));
  REQUIRE(n1.runner.wait_for_start(1));
  n1.runner.exit_worker(0, 7);
  REQUIRE(n0.runner.wait_for_start(2));
  REQUIRE(n1.runner.wait_for_start(2));
  auto store = shared.connect();
  const auto op = Deadline::after(5s);
  // The first attempt waits for every node; the restart does not wait or count again: every
  // node settled the failure, and the root cause says so. The node that chose it (node 1, whose
  // worker failed) opened the gate for a node that would have missed it.
  CHECK(store->add("attempt/0/arrived", 0, op) == 2);
  CHECK(store->add("attempt/1/arrived", 0, op) == 0);
  CHECK(store->check({"attempt/1/go"}, op));
  const auto cause = nlohmann::json::parse(store->get("news/attempt/0/root_cause", op));
  CHECK(cause.at("all_stopped") == true);
  CHECK(cause.at("node") == 1);
  // Node 0 reserved the restart's master port before it settled; the root cause carried it,
  // node 0 published the same one, and both nodes' workers got it.
  CHECK(cause.at("next_master_port") == 23457);
  CHECK(store->get("news/attempt/1/master_port", op) == "23457");
  CHECK(n0.reserved == 2);
  CHECK(n1.reserved == 0);
  CHECK(env_of_start(n0.runner, 1, 0, "MASTER_PORT") == "23457");
  CHECK(env_of_start(n1.runner, 1, 0, "MASTER_PORT") == "23457");
  CHECK(n1.master_port_reads == 1);  // the first attempt's only
  // Node 0 learnt of the failure from its outcome watcher, whose idle connection watches the
  // next attempt; the keep-alive ring is the job's: two connections in all.
  CHECK(n0.opened == 2);
  CHECK(!store->check({"attempt/1/hb/0"}, op));
  CHECK(test::wait_until([&] { return store->add("static/hb/0", 0, Deadline::after(5s)) >= 1; },
                         30s));
  // Both nodes run the next attempt with the same restart count, and end it the same way.
  CHECK(env_of_start(n0.runner, 1, 0, "TORCHELASTIC_RESTART_COUNT") == "1");
  CHECK(env_of_start(n1.runner, 1, 0, "TORCHELASTIC_RESTART_COUNT") == "1");
  n0.runner.exit_all(0);
  n1.runner.exit_all(0);
  CHECK(exit_code_of(n0.finish()) == 0);
  CHECK(exit_code_of(n1.finish()) == 0);
}

namespace {

// A connection the store's end has closed: every request fails as a closed one does.
class ClosedStore final : public store::Store {
 public:
  [[noreturn]] static void closed() { throw ConnectionError("the store closed the connection"); }
  void set(const std::string&, const std::string&, Deadline) override { closed(); }
  std::string get(const std::string&, Deadline) override { closed(); }
  std::optional<std::string> try_get(const std::string&, Deadline) override { closed(); }
  bool check(const std::vector<std::string>&, Deadline) override { closed(); }
  std::int64_t add(const std::string&, std::int64_t, Deadline) override { closed(); }
  std::string compare_set(const std::string&, const std::string&, const std::string&,
                          Deadline) override {
    closed();
  }
  bool erase(const std::string&, Deadline) override { closed(); }
  std::vector<std::string> multi_get(const std::vector<std::string>&, Deadline) override {
    closed();
  }
  void multi_set(const std::vector<std::string>&, const std::vector<std::string>&,
                 Deadline) override {
    closed();
  }
  void wait(const std::vector<std::string>&, Deadline) override { closed(); }
  std::int64_t num_keys(Deadline) override { closed(); }
  void ping(Deadline) override { closed(); }
  std::string describe() const override { return "closed"; }
  void interrupt() override {}
};

}  // namespace

TEST_CASE("outcome watcher: a kept connection found closed is replaced once, then reused",
          "[agent]") {
  store::MemoryStore shared;
  EventQueue events;
  int reopened = 0;
  OutcomeWatcher watcher(std::make_unique<ClosedStore>(), "r/0/outcome", 0, events, [&] {
    ++reopened;
    return std::unique_ptr<store::Store>(shared.connect());
  });
  shared.connect()->set("r/0/outcome", "success", Deadline::after(kHang));
  auto e = events.pop(Deadline::after(kHang));
  REQUIRE(e);
  CHECK(e->kind == AgentEvent::Kind::kOutcome);
  CHECK(e->text == "success");
  CHECK(reopened == 1);
  // It read its outcome: its connection is idle and goes to the next round's watcher.
  CHECK(watcher.release_if_idle() != nullptr);
}

TEST_CASE("outcome watcher: handed back once it has read the outcome, waiting for it no longer "
          "than asked", "[agent]") {
  store::MemoryStore shared;
  EventQueue events;
  OutcomeWatcher watcher(std::unique_ptr<store::Store>(shared.connect()), "r/0/outcome", 0,
                         events);
  // No outcome yet: it waits out the deadline and keeps its connection.
  const auto start = Clock::now();
  CHECK(watcher.release_when_idle(Deadline::after(200ms)) == nullptr);
  CHECK(Clock::now() - start >= 200ms);
  // Published: the connection comes back as soon as the watcher has read it.
  shared.connect()->set("r/0/outcome", "success", Deadline::after(kHang));
  CHECK(watcher.release_when_idle(Deadline::after(kHang)) != nullptr);
  auto e = events.pop(Deadline::after(kHang));
  REQUIRE(e);
  CHECK(e->kind == AgentEvent::Kind::kOutcome);
}

TEST_CASE("outcome watcher: a closed connection without a way to reopen is a lost store",
          "[agent]") {
  EventQueue events;
  OutcomeWatcher watcher(std::make_unique<ClosedStore>(), "r/0/outcome", 0, events);
  auto e = events.pop(Deadline::after(kHang));
  REQUIRE(e);
  CHECK(e->kind == AgentEvent::Kind::kStoreLost);
  CHECK_THAT(e->text, Catch::Contains("closed the connection"));
  CHECK(watcher.release_if_idle() == nullptr);
}

TEST_CASE("agent: one node's failure is every node's root cause", "[agent]") {
  store::MemoryStore shared;
  test::TempDir dir;
  Node n0(shared, config_for(2, 0, 1), "hostA", dir.file("n0"));
  Node n1(shared, config_for(2, 1, 1), "hostB", dir.file("n1"));
  REQUIRE(n0.runner.wait_for_start(1));
  REQUIRE(n1.runner.wait_for_start(1));
  n0.runner.exit_worker(0, 5);
  auto r0 = n0.finish();
  auto r1 = n1.finish();
  CHECK(exit_code_of(r0) == 5);
  CHECK(exit_code_of(r1) == 5);
  CHECK(r1.root_cause->host == "hostA");
}

std::string stack_fixture(const std::string& name) {
  return test::read_file(std::string(STACK_FIXTURES) + "/" + name);
}

TEST_CASE("agent: a job whose every node is idle hangs, every node agrees, exit 122",
          "[agent][hang]") {
  store::MemoryStore shared;
  test::TempDir dir;
  auto c0 = config_for(2, 0, 2);
  auto c1 = config_for(2, 1, 1);
  c0.hang_timeout = c1.hang_timeout = 300ms;
  Node n0(shared, c0, "hostA", dir.file("n0"));
  Node n1(shared, c1, "hostB", dir.file("n1"));
  // Node 0's two ranks wait in all_reduce; node 1's rank (rank 2) sleeps elsewhere.
  n0.runner.set_stacks({stack_fixture("gdb_python_rank0.txt"), stack_fixture("gdb_python_rank0.txt")});
  n1.runner.set_stacks({stack_fixture("gdb_python_rank1.txt")});
  auto r0 = n0.finish();
  auto r1 = n1.finish();
  CHECK(exit_code_of(r0) == kExitHang);
  CHECK(exit_code_of(r1) == kExitHang);
  REQUIRE(r0.root_cause);
  REQUIRE(r1.root_cause);
  const auto& f = *r0.root_cause;
  CHECK(f.kind == Failure::Kind::kHang);
  CHECK_THAT(f.message, Catch::Contains("no progress from any of 3 ranks"));
  CHECK_THAT(f.message, Catch::Contains("out of step: rank 2"));
  CHECK(f.rank == 2);
  CHECK(f.host == "hostB");
  REQUIRE(f.where.size() == 2);
  CHECK(f.where[0] == "ranks 0, 1 (2 of 3): in all_reduce, train.py:7 step()");
  CHECK_THAT(f.where[1], Catch::StartsWith("rank 2 (1 of 3):"));
  CHECK_THAT(f.where[1], Catch::EndsWith("<- not in the collective"));
  CHECK(r1.root_cause->to_json() == f.to_json());  // one verdict for the job
  // Stacks were taken before any worker was stopped, each into its rank's directory.
  CHECK(n0.runner.captured_pids().size() == 2);
  CHECK(n1.runner.captured_pids().size() == 1);
  CHECK(std::ifstream(dir.file("n1") + "/attempt_0/0/stacks.txt").good());
}

TEST_CASE("agent: a hang spends a restart like a failure", "[agent][hang]") {
  store::MemoryStore shared;
  test::TempDir dir;
  auto c = config_for(1, 0, 1, 1);
  c.hang_timeout = 200ms;
  Node node(shared, c, "hostA", dir.path());
  REQUIRE(node.runner.wait_for_start(2));  // attempt 0 hung (no stack: the runner has none)
  CHECK(env_of_start(node.runner, 1, 0, "TORCHELASTIC_RESTART_COUNT") == "1");
  node.runner.exit_all(0);
  auto r = node.finish();
  CHECK(exit_code_of(r) == 0);
  CHECK(r.restarts == 1);
  REQUIRE(r.attempts.size() == 2);
  CHECK_THAT(r.attempts[0].ended, Catch::StartsWith("hung: no progress"));
}

TEST_CASE("agent: a signal stops the workers with that signal and exits 128+N", "[agent]") {
  store::MemoryStore shared;
  test::TempDir dir;
  Node node(shared, config_for(1, 0, 2, 3), "hostA", dir.path());
  REQUIRE(node.runner.wait_for_start(1));
  node.agent->on_signal(SIGINT);
  CHECK(node.exit_code() == 128 + SIGINT);
  CHECK(node.runner.stop_signals().at(0) == SIGINT);
  CHECK(node.runner.starts() == 1);  // a signal is not retried
  // It ends this node's part only (an elastic job goes on without it), so it records no end
  // of the job: a node that comes now may still join.
  CHECK_FALSE(shared.check({"ended"}, Deadline::after(kHang)));
}

TEST_CASE("agent: a signal in the middle of a goodbye does not keep the store's host waiting",
          "[agent]") {
  store::MemoryStore shared;
  test::TempDir dir;
  // The host would wait far beyond kHang for a goodbye that never comes.
  auto c0 = config_for(2, 0, 1);
  c0.rdzv_conf.close_timeout = 3 * kHang;
  Node n0(shared, c0, "hostA", dir.path(), NodeOptions{true, {}, {}});
  // Node 1's signal comes just as it says goodbye on its own connection, which the signal
  // interrupts (as SIGTERM after an ssh hang-up does, racing the job's end).
  std::atomic<Agent*> agent1{nullptr};
  std::atomic<int> signalled{0};
  NodeOptions o1;
  o1.before_set = [&](const std::string& key) {
    if (key.size() >= 7 && key.compare(key.size() - 7, 7, "/left/1") == 0 && !signalled++) {
      agent1.load()->on_signal(SIGTERM);
    }
  };
  Node n1(shared, config_for(2, 1, 1), "hostB", dir.path(), std::move(o1));
  agent1 = n1.agent.get();
  REQUIRE(n0.runner.wait_for_start(1));
  REQUIRE(n1.runner.wait_for_start(1));
  n0.runner.exit_all(0);
  n1.runner.exit_all(0);
  CHECK(n1.finish().end == RunResult::End::kSucceeded);
  CHECK(n0.finish().end == RunResult::End::kSucceeded);  // not after 3 x kHang
  CHECK(signalled == 1);
}

TEST_CASE("agent: a signal that interrupts a store call stops the workers before the store's "
          "host waits for the others' goodbyes", "[agent]") {
  store::MemoryStore shared;
  test::TempDir dir;
  // The store's host would wait far beyond kHang for goodbyes.
  auto c0 = config_for(2, 0, 1);
  c0.rdzv_conf.close_timeout = 3 * kHang;
  // Node 0's signal comes as it records its worker's failure, which the signal interrupts (a
  // scheduler's SIGTERM to every process of the job, racing a rank's crash).
  std::atomic<Agent*> agent0{nullptr};
  std::atomic<int> signalled{0};
  NodeOptions o0{true, {}, {}};
  o0.before_set = [&](const std::string& key) {
    if (key.find("/failure/") != std::string::npos && !signalled++) {
      agent0.load()->on_signal(SIGTERM);
    }
  };
  Node n0(shared, c0, "hostA", dir.path(), std::move(o0));
  agent0 = n0.agent.get();
  // Node 1 says goodbye only once node 0 has stopped its workers, or after kHang.
  std::atomic<bool> stopped_first{false};
  NodeOptions o1;
  o1.before_set = [&](const std::string& key) {
    if (!key.ends_with("/left/1")) return;
    stopped_first = test::wait_until([&] { return !n0.runner.stop_signals().empty(); }, kHang);
  };
  Node n1(shared, config_for(2, 1, 1), "hostB", dir.path(), std::move(o1));
  REQUIRE(n0.runner.wait_for_start(1));
  REQUIRE(n1.runner.wait_for_start(1));
  n0.runner.exit_worker(0, 3);
  n0.finish();
  n1.finish();
  CHECK(signalled == 1);
  CHECK(stopped_first);
}

TEST_CASE("agent: node 0 stopped before it publishes the workers' port does not keep the "
          "others waiting for it", "[agent]") {
  store::MemoryStore shared;
  test::TempDir dir;
  // The others would wait for the port up to the keep-alive's limit plus 5 s: far beyond kHang.
  auto c0 = config_for(2, 0, 1);
  c0.rdzv_conf.keep_alive_interval = 1s;
  c0.rdzv_conf.keep_alive_max_attempt = 60;
  auto c1 = c0;
  c1.node_rank = 1;
  // Node 0's signal comes as it is about to publish the port, which the signal interrupts.
  std::atomic<Agent*> agent0{nullptr};
  std::atomic<int> signalled{0};
  NodeOptions o0;
  o0.before_set = [&](const std::string& key) {
    if (key.ends_with("/master_port") && !signalled++) agent0.load()->on_signal(SIGTERM);
  };
  Node n0(shared, c0, "hostA", dir.path(), std::move(o0));
  agent0 = n0.agent.get();
  Node n1(shared, c1, "hostB", dir.path());
  CHECK(n0.exit_code() == 128 + SIGTERM);
  const auto r1 = n1.finish();
  CHECK(r1.end == RunResult::End::kFailed);
  CHECK(r1.reason == "the agent on hostA received SIGTERM");
  CHECK(n1.runner.starts() == 0);
  CHECK(n0.runner.starts() == 0);
  CHECK(signalled == 1);
}

TEST_CASE("agent: a signal during the rendezvous ends it at once", "[agent]") {
  store::MemoryStore shared;
  test::TempDir dir;
  Node node(shared, config_for(2, 0, 1), "hostA", dir.path());  // node 1 never comes
  // The agent has claimed node rank 0: it is inside the rendezvous.
  shared.wait({"static/node/0/owner"}, Deadline::after(kHang));
  node.agent->on_signal(SIGTERM);
  auto r = node.finish();
  CHECK(r.end == RunResult::End::kStopped);
  CHECK(exit_code_of(r) == 128 + SIGTERM);
  CHECK(node.runner.starts() == 0);
  // It gave its node rank back: the node can be started again on the same store.
  CHECK(shared.get("static/node/0/owner", Deadline::after(kHang)) == "");
}

TEST_CASE("agent: a rendezvous timeout names the missing nodes and exits 124", "[agent]") {
  store::MemoryStore shared;
  test::TempDir dir;
  auto c = config_for(3, 0, 1);
  c.rdzv_conf.join_timeout = 200ms;
  Node node(shared, c, "hostA", dir.path());
  auto r = node.finish();
  CHECK(r.end == RunResult::End::kRendezvousFailed);
  CHECK(exit_code_of(r) == kExitRendezvous);
  CHECK_THAT(r.reason, Catch::Contains("1/3 nodes joined"));
  CHECK_THAT(r.reason, Catch::Contains("missing node ranks [1, 2]"));
}

TEST_CASE("agent: mismatched --nnodes is refused", "[agent]") {
  store::MemoryStore shared;
  test::TempDir dir;
  auto c0 = config_for(2, 0, 1);
  c0.rdzv_conf.join_timeout = 2s;
  Node n0(shared, c0, "hostA", dir.file("n0"));
  // Node 0 records its node count first, so node 1 is the one that disagrees.
  shared.wait({"static/nnodes"}, Deadline::after(kHang));
  auto c1 = config_for(3, 1, 1);
  c1.rdzv_conf.join_timeout = 2s;
  Node n1(shared, c1, "hostB", dir.file("n1"));
  auto r1 = n1.finish();
  CHECK(exit_code_of(r1) == kExitRendezvous);
  CHECK_THAT(r1.reason, Catch::Contains("--nnodes=3"));
  CHECK_THAT(r1.reason, Catch::Contains("--nnodes=2"));
  CHECK(n0.exit_code() == kExitRendezvous);
}

TEST_CASE("agent: a worker whose stderr is not UTF-8 is still reported", "[agent]") {
  store::MemoryStore shared;
  test::TempDir dir;
  Node node(shared, config_for(1, 0, 1), "hostA", dir.path());
  REQUIRE(node.runner.wait_for_start(1));
  node.runner.set_stderr_tail({"bad bytes \xff\xfe and a cut \xE2\x96"});
  node.runner.exit_worker(0, 6);
  auto r = node.finish();
  CHECK(exit_code_of(r) == 6);
  REQUIRE(r.root_cause);
  CHECK(r.root_cause->stderr_tail.size() == 1);
}

// Elastic mode: the same agent over the c10d rendezvous.

TEST_CASE("agent, elastic: two nodes form a round, ranks follow the join order", "[agent][elastic]") {
  store::MemoryStore shared;
  test::TempDir dir;
  Node a(shared, elastic_config(2, 2, 2), "hostA", dir.file("a"));
  // a has its join slot before b comes, so a is group rank 0 and the master.
  shared.wait({"r/0/node/0"}, Deadline::after(kHang));
  Node b(shared, elastic_config(2, 2, 1), "hostB", dir.file("b"));
  REQUIRE(a.runner.wait_for_start(1));
  REQUIRE(b.runner.wait_for_start(1));
  CHECK(env_of_start(b.runner, 0, 0, "RANK") == "2");
  CHECK(env_of_start(b.runner, 0, 0, "WORLD_SIZE") == "3");
  CHECK(env_of_start(b.runner, 0, 0, "GROUP_RANK") == "1");
  CHECK(env_of_start(b.runner, 0, 0, "MASTER_ADDR") == "hostA");
  a.runner.exit_all(0);
  b.runner.exit_all(0);
  CHECK(a.exit_code() == 0);
  CHECK(b.exit_code() == 0);
}

TEST_CASE("agent, elastic: a worker failure spends a restart and forms the next round",
          "[agent][elastic]") {
  store::MemoryStore shared;
  test::TempDir dir;
  Node a(shared, elastic_config(2, 2, 1, 1), "hostA", dir.file("a"));
  shared.wait({"r/0/node/0"}, Deadline::after(kHang));
  Node b(shared, elastic_config(2, 2, 1, 1), "hostB", dir.file("b"));
  REQUIRE(a.runner.wait_for_start(1));
  REQUIRE(b.runner.wait_for_start(1));
  b.runner.exit_worker(0, 9);
  REQUIRE(a.runner.wait_for_start(2));
  REQUIRE(b.runner.wait_for_start(2));
  CHECK(env_of_start(a.runner, 1, 0, "TORCHELASTIC_RESTART_COUNT") == "1");
  CHECK(env_of_start(b.runner, 1, 0, "TORCHELASTIC_RESTART_COUNT") == "1");
  // The members keep their order in the new round, and with it round 0's keep-alive ring: a's
  // only connections are round 0's ring and its outcome watcher (idle, it watches round 1).
  CHECK(env_of_start(a.runner, 1, 0, "GROUP_RANK") == "0");
  const auto closed = nlohmann::json::parse(shared.get("news/r/1/closed", Deadline::after(kHang)));
  CHECK(closed.at("ring_round") == 0);
  CHECK(closed.at("ranks_of") == 0);
  CHECK(closed.at("failures") == 1);
  // Both nodes settled and nobody waited to join: the chooser closed round 1 ahead, and the
  // root cause carried it to both, so neither joined it (no descriptor, no join).
  const auto cause = nlohmann::json::parse(shared.get("news/r/0/root_cause", Deadline::after(kHang)));
  REQUIRE(cause.contains("next_round"));
  CHECK(nlohmann::json::parse(cause.at("next_round").get<std::string>()).at("round") == 1);
  CHECK(!shared.check({"r/1/node/0"}, Deadline::after(kHang)));
  CHECK(!shared.check({"r/1/node/1"}, Deadline::after(kHang)));
  CHECK(!shared.check({"r/1/join"}, Deadline::after(kHang)));
  // a, group rank 0 in both rounds, offered round 1's master port with round 0's root cause;
  // both nodes' workers got it.
  CHECK(cause.at("next_master_port") == 23457);
  CHECK(a.reserved == 2);
  CHECK(b.reserved == 0);
  CHECK(env_of_start(a.runner, 1, 0, "MASTER_PORT") == "23457");
  CHECK(env_of_start(b.runner, 1, 0, "MASTER_PORT") == "23457");
  CHECK(b.master_port_reads == 1);  // round 0's only
  CHECK(a.opened == 2);
  CHECK(!shared.check({"r/1/hb/0"}, Deadline::after(kHang)));
  b.runner.exit_all(9);
  auto ra = a.finish();
  CHECK(exit_code_of(ra) == 9);
  CHECK(ra.restarts == 1);
  REQUIRE(ra.root_cause);
  CHECK(ra.root_cause->host == "hostB");
  CHECK(b.exit_code() == 9);
}

TEST_CASE("agent, elastic: a late node makes the round re-form without spending a restart",
          "[agent][elastic]") {
  store::MemoryStore shared;
  test::TempDir dir;
  Node a(shared, elastic_config(1, 2, 1), "hostA", dir.file("a"));
  REQUIRE(a.runner.wait_for_start(1));  // round 0 closed with a alone after the last call
  CHECK(env_of_start(a.runner, 0, 0, "WORLD_SIZE") == "1");
  Node b(shared, elastic_config(1, 2, 1), "hostB", dir.file("b"));
  // b asks a to re-form: a's worker is stopped and both start in a round of two.
  REQUIRE(test::wait_until([&] { return latest_world_size_is(a.runner, 2); }, kHang));
  REQUIRE(test::wait_until([&] { return latest_world_size_is(b.runner, 2); }, kHang));
  CHECK(a.runner.stop_signals().at(0) == SIGTERM);
  const auto last_a = a.runner.starts() - 1;
  const auto last_b = b.runner.starts() - 1;
  CHECK(env_of_start(a.runner, last_a, 0, "GROUP_RANK") == "0");  // the stayer comes first
  CHECK(env_of_start(b.runner, last_b, 0, "GROUP_RANK") == "1");
  CHECK(env_of_start(a.runner, last_a, 0, "TORCHELASTIC_RESTART_COUNT") == "0");
  // Other members than the last round's: the round forms a ring of its own.
  const int round = a.runner.starts() - 1;
  const auto closed = nlohmann::json::parse(
      shared.get(fmt::format("news/r/{}/closed", round), Deadline::after(kHang)));
  CHECK(closed.at("ring_round") == -1);
  CHECK(test::wait_until(
      [&] { return shared.check({fmt::format("r/{}/hb/1", round)}, Deadline::after(kHang)); },
      kHang));
  a.runner.exit_all(0);
  b.runner.exit_all(0);
  auto ra = a.finish();
  CHECK(exit_code_of(ra) == 0);
  CHECK(ra.restarts == 0);
  CHECK(b.exit_code() == 0);
}

TEST_CASE("agent, elastic: a node that stops answering is dropped and the others re-form",
          "[agent][elastic]") {
  store::MemoryStore shared;
  test::TempDir dir;
  // A member that joins round 0 first (so it is group rank 0, the master), publishes the
  // workers' master port, and then falls silent: it never heartbeats.
  auto ghost_store = shared.connect();
  auto ghost = std::async(std::launch::async, [&] {
    ElasticRendezvousOptions o;
    o.min_nodes = 1;
    o.max_nodes = 2;
    o.last_call_timeout = kHang;  // the round closes when a joins (MAX)
    o.join_timeout = kHang;
    auto joined = join_round(*ghost_store, 0, ElasticNode{"ghost:1", "ghost", 1, -1, 0}, o);
    if (joined.member) ghost_store->set("news/r/0/master_port", "23456", Deadline::after(kHang));
    return joined.member;
  });
  shared.wait({"r/0/node/0"}, Deadline::after(kHang));
  Node a(shared, elastic_config(1, 2, 1), "hostA", dir.file("a"));
  REQUIRE(ghost.wait_for(kHang) == std::future_status::ready);
  REQUIRE(ghost.get());
  REQUIRE(a.runner.wait_for_start(1));
  CHECK(env_of_start(a.runner, 0, 0, "WORLD_SIZE") == "2");
  CHECK(env_of_start(a.runner, 0, 0, "MASTER_ADDR") == "ghost");
  // a's keep-alive declares the ghost dead, and a goes on alone in the next round.
  REQUIRE(a.runner.wait_for_start(2));
  CHECK(env_of_start(a.runner, 1, 0, "WORLD_SIZE") == "1");
  auto outcome = Failure::from_json(shared.get("news/r/0/outcome", Deadline::after(kHang)));
  CHECK(outcome.kind == Failure::Kind::kMembership);
  CHECK(outcome.lost_node == 0);
  CHECK_THAT(outcome.message, Catch::Contains("ghost"));
  a.runner.exit_all(0);
  auto ra = a.finish();
  CHECK(exit_code_of(ra) == 0);
  CHECK(ra.restarts == 0);
}

TEST_CASE("agent, elastic: a node stopped by a signal leaves, the others re-form",
          "[agent][elastic]") {
  store::MemoryStore shared;
  test::TempDir dir;
  Node a(shared, elastic_config(1, 2, 1), "hostA", dir.file("a"));
  shared.wait({"r/0/node/0"}, Deadline::after(kHang));
  Node b(shared, elastic_config(1, 2, 1), "hostB", dir.file("b"));
  REQUIRE(a.runner.wait_for_start(1));
  REQUIRE(b.runner.wait_for_start(1));
  b.agent->on_signal(SIGTERM);
  CHECK(b.exit_code() == 128 + SIGTERM);
  // Its mark in the ring: a's keep-alive does not take its silence for a death meanwhile.
  CHECK(shared.get("r/0/hb/1", Deadline::after(kHang)) == kHeartbeatDone);
  REQUIRE(a.runner.wait_for_start(2));
  CHECK(env_of_start(a.runner, 1, 0, "WORLD_SIZE") == "1");
  a.runner.exit_all(0);
  CHECK(a.exit_code() == 0);
}

TEST_CASE("agent, --node-check=warn: a node's unwritable log directory is named, and the job "
          "starts", "[agent][node_check]") {
  store::MemoryStore shared;
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("n0"));
  auto c0 = config_for(2, 0, 1);
  auto c1 = config_for(2, 1, 1);
  c0.node_check = c1.node_check = NodeCheck::kWarn;
  c0.node_check_mib = c1.node_check_mib = 0;  // the links have tests of their own
  NodeOptions o0;
  o0.events_file = dir.file("events0.jsonl");
  Node n0(shared, c0, "hostA", dir.file("n0"), o0);
  Node n1(shared, c1, "hostB", dir.file("n1/missing"));
  REQUIRE(n0.runner.wait_for_start(1));
  REQUIRE(n1.runner.wait_for_start(1));
  n0.runner.exit_all(0);
  n1.runner.exit_all(0);
  CHECK(exit_code_of(n0.finish()) == 0);
  CHECK(exit_code_of(n1.finish()) == 0);
  // Node 0's events file holds its own figures and every node's findings.
  auto check = node_check_event(dir.file("events0.jsonl"));
  REQUIRE(check.is_object());
  CHECK(check["figures"]["host"] == "hostA");
  CHECK(check["figures"]["dirs"][0]["error"] == "");
  std::vector<std::string> about_logs;
  for (const auto& f : check["findings"]) {
    const std::string what = f["what"];
    // Node 0's own log directory is this machine's temp directory, which may be short of room.
    if (f["node"] == 1 && what.starts_with("log directory")) {
      about_logs.push_back(f["host"].get<std::string>() + ": " + what);
    }
  }
  CHECK(about_logs == std::vector<std::string>{"hostB: log directory " + dir.file("n1/missing") +
                                               " is not writable: No such file or directory "
                                               "(errno 2)"});
}

TEST_CASE("agent, --node-check=refuse: every node ends with 120 before any worker starts, "
          "naming the node", "[agent][node_check]") {
  store::MemoryStore shared;
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("n0"));
  auto c0 = config_for(2, 0, 1);
  auto c1 = config_for(2, 1, 1);
  c0.node_check = c1.node_check = NodeCheck::kRefuse;
  c0.node_check_mib = c1.node_check_mib = 0;
  NodeOptions o0;
  o0.hosts_store = true;
  o0.events_file = dir.file("events0.jsonl");
  Node n0(shared, c0, "hostA", dir.file("n0"), o0);
  Node n1(shared, c1, "hostB", dir.file("n1/missing"));
  for (Node* n : {&n0, &n1}) {
    const auto r = n->finish();
    CHECK(r.end == RunResult::End::kNodeCheckRefused);
    CHECK(exit_code_of(r) == kExitNodeCheck);
    CHECK_THAT(r.reason, Catch::Matchers::StartsWith("--node-check=refuse: "));
    CHECK(n->runner.launches().empty());
  }
  // Node 1's finding is among the job's (the machine may add its own: node 0 runs here too).
  bool named = false;
  auto check = node_check_event(dir.file("events0.jsonl"));
  for (const auto& f : check["findings"]) {
    named = named || (f["node"] == 1 && f["what"].get<std::string>().starts_with("log directory"));
  }
  CHECK(named);
  // The refusal is the round's outcome, for nodes that were not in the round.
  const auto outcome = Failure::from_json(shared.get("news/attempt/0/outcome", Deadline::after(kHang)));
  CHECK(outcome.exit_code == kExitNodeCheck);
}

TEST_CASE("agent, elastic --node-check=refuse: a node named after the first round stays out and "
          "the job runs on undisturbed, while a healthy one joins it",
          "[agent][node_check][elastic]") {
  store::MemoryStore shared;
  test::TempDir dir;
  for (const char* d : {"a", "c"}) std::filesystem::create_directories(dir.file(d));
  const auto config = refusing_config(1, 3);
  NodeOptions oa;
  oa.events_file = dir.file("a.jsonl");
  Node a(shared, config, "hostA", dir.file("a"), oa);
  // Round 0 closes with a alone after the last call.
  if (!started_unless_refused(a)) return;
  // b's log directory cannot be made: it is named before it asks to join, and ends.
  NodeOptions ob;
  ob.events_file = dir.file("b.jsonl");
  Node b(shared, config, "hostB", dir.file("b/missing"), ob);
  const auto rb = b.finish();
  CHECK(rb.end == RunResult::End::kNodeCheckExcluded);
  CHECK(exit_code_of(rb) == kExitNodeCheck);
  CHECK_THAT(rb.reason, Catch::Matchers::StartsWith(
                            "--node-check=refuse: this node came after the job's first round "
                            "and stays out of it: log directory " + dir.file("b/missing") +
                            " is not writable"));
  auto late = node_check_event(dir.file("b.jsonl"));
  REQUIRE(late.is_object());
  CHECK(late["late"] == true);
  CHECK(late["compared_with"] == 1);  // a's report
  CHECK(late["findings"].size() >= 1);
  CHECK(b.runner.launches().empty());
  // a's round was never asked to end: no outcome, no second start.
  CHECK_FALSE(shared.check({"news/r/0/outcome"}, Deadline::after(kHang)));
  CHECK(a.runner.starts() == 1);
  // c is healthy: it looks, finds nothing, and joins; a's round re-forms with it.
  NodeOptions oc;
  oc.events_file = dir.file("c.jsonl");
  Node c(shared, config, "hostC", dir.file("c"), oc);
  REQUIRE(test::wait_until([&] { return latest_world_size_is(a.runner, 2); }, kHang));
  REQUIRE(test::wait_until([&] { return latest_world_size_is(c.runner, 2); }, kHang));
  auto joined = node_check_event(dir.file("c.jsonl"));
  REQUIRE(joined.is_object());
  CHECK(joined["late"] == true);
  CHECK(joined["findings"].empty());
  a.runner.exit_all(0);
  c.runner.exit_all(0);
  CHECK(a.exit_code() == 0);
  CHECK(c.exit_code() == 0);
}

TEST_CASE("agent, elastic --node-check=refuse: a spare that found the first round open looks "
          "once it joins a later round, and leaves it before any worker starts",
          "[agent][node_check][elastic]") {
  store::MemoryStore shared;
  test::TempDir dir;
  for (const char* d : {"a", "b", "d"}) std::filesystem::create_directories(dir.file(d));
  auto config = refusing_config(1, 2);
  // Every round closes full, whoever joins it first; and only the outcome c publishes, not its
  // silence, ends the round it leaves.
  config.rdzv_conf.last_call_timeout = kHang;
  config.rdzv_conf.keep_alive_interval = 1s;
  config.rdzv_conf.keep_alive_max_attempt = 60;
  // Round 0's record waits for c's descriptor: c looks while the round is still open, and
  // joins it once it is full.
  NodeOptions members;
  members.before_set = [&](const std::string& key) {
    if (key == "news/r/0/closed") shared.wait({"r/0/node/2"}, Deadline::after(kHang));
  };
  Node a(shared, config, "hostA", dir.file("a"), members);
  shared.wait({"r/0/node/0"}, Deadline::after(kHang));
  Node b(shared, config, "hostB", dir.file("b"), members);
  shared.wait({"r/0/node/1"}, Deadline::after(kHang));
  NodeOptions oc;
  oc.events_file = dir.file("c.jsonl");
  Node c(shared, config, "hostC", dir.file("c/missing"), oc);
  if (!started_unless_refused(a)) return;
  REQUIRE(b.runner.wait_for_start(1));
  CHECK(env_of_start(b.runner, 0, 0, "WORLD_SIZE") == "2");
  // a leaves; the spare c and b form round 1, where c is a member before it has looked.
  a.agent->on_signal(SIGTERM);
  CHECK(a.exit_code() == 128 + SIGTERM);
  const auto rc = c.finish();
  CHECK(rc.end == RunResult::End::kNodeCheckExcluded);
  CHECK(exit_code_of(rc) == kExitNodeCheck);
  CHECK_THAT(rc.reason, Catch::Matchers::StartsWith(
                            "--node-check=refuse: this node came after the job's first round "
                            "and stays out of it: log directory " + dir.file("c/missing") +
                            " is not writable"));
  CHECK(c.runner.launches().empty());
  // It was group rank 1 of round 1, whose outcome its leaving is; its mark in the ring keeps
  // b's keep-alive from taking its silence for a death.
  const auto left = Failure::from_json(shared.get("news/r/1/outcome", Deadline::after(kHang)));
  CHECK(left.kind == Failure::Kind::kMembership);
  CHECK_THAT(left.message, Catch::Matchers::StartsWith("node 1 (hostC) left: --node-check=refuse"));
  CHECK(shared.get("r/1/hb/1", Deadline::after(kHang)) == kHeartbeatDone);
  auto check = node_check_event(dir.file("c.jsonl"));
  REQUIRE(check.is_object());
  CHECK(check["late"] == true);
  CHECK(check["compared_with"] == 2);  // a's and b's reports
  CHECK(check["node"] == 1);
  // Before its first round a node has no group rank.
  std::istringstream events(test::read_file(dir.file("c.jsonl")));
  std::string line;
  REQUIRE(std::getline(events, line));
  CHECK(nlohmann::json::parse(line)["node"].is_null());
  // b re-forms without c, spending no restart; d, healthy, takes the place.
  Node d(shared, config, "hostD", dir.file("d"));
  REQUIRE(test::wait_until([&] { return latest_world_size_is(b.runner, 2) &&
                                        b.runner.starts() == 3; }, kHang));
  REQUIRE(d.runner.wait_for_start(1));
  b.runner.exit_all(0);
  d.runner.exit_all(0);
  const auto rb = b.finish();
  CHECK(exit_code_of(rb) == 0);
  CHECK(rb.restarts == 0);
  CHECK(d.exit_code() == 0);
}

TEST_CASE("agent, elastic --node-check=refuse: a late node that serves the store cannot stay "
          "out, and joins with its finding", "[agent][node_check][elastic]") {
  store::MemoryStore shared;
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("a"));
  const auto config = refusing_config(1, 2);
  Node a(shared, config, "hostA", dir.file("a"));
  if (!started_unless_refused(a)) return;
  NodeOptions ob;
  ob.hosts_store = true;
  ob.events_file = dir.file("b.jsonl");
  Node b(shared, config, "hostB", dir.file("b/missing"), ob);
  REQUIRE(test::wait_until([&] { return latest_world_size_is(a.runner, 2); }, kHang));
  REQUIRE(test::wait_until([&] { return latest_world_size_is(b.runner, 2); }, kHang));
  auto check = node_check_event(dir.file("b.jsonl"));
  REQUIRE(check.is_object());
  CHECK(check["figures"]["serves_store"] == true);
  CHECK(check["findings"].size() >= 1);
  a.runner.exit_all(0);
  b.runner.exit_all(0);
  CHECK(a.exit_code() == 0);
  CHECK(b.exit_code() == 0);
}
