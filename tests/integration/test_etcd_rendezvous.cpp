// --rdzv-backend=etcd end to end: real ddprun agents on 127.0.0.1 against a real etcd cluster
// (3 members unless said), workers that wait at a gate. What the agents did is read from their
// --events-file and output; what they left in etcd is read with etcdctl where it is installed,
// and with the project's client otherwise.

#include <catch2/catch.hpp>

#include <signal.h>

#include <cstdio>

#include <fmt/format.h>

#include "common/deadline.hpp"
#include "etcd/etcd_store.hpp"
#include "testing/elastic_cluster.hpp"
#include "testing/etcd_cluster.hpp"

using namespace ddprun;
using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

Deadline soon() { return Deadline::after(20s); }

// Leases of 3 s by default (renewed every second): long enough that a loaded machine (the
// three members' fsyncs, the tests beside this one) does not let a live agent's lease run out.
constexpr const char* kLeases = ",keep_alive_interval=1,keep_alive_max_attempt=3";

ElasticCluster etcd_job(const EtcdCluster& etcd, std::string nnodes,
                        std::string conf = kLeases) {
  return ElasticCluster(std::move(nnodes),
                        {"--rdzv-backend=etcd", "--rdzv-endpoint=" + etcd.endpoints()},
                        std::move(conf));
}

// A view of a run's keys, as another etcd client sees them.
EtcdStore view(const EtcdCluster& etcd, const std::string& run_id) {
  EtcdStoreOptions o;
  o.endpoints = parse_etcd_endpoints(etcd.endpoints(), "test");
  o.run_id = run_id;
  return EtcdStore(o, soon());
}

// The keys under `prefix` as etcd's own command-line client lists them; nullopt without it.
std::optional<std::string> etcdctl_keys(const EtcdCluster& etcd, const std::string& prefix) {
  if (access("/usr/bin/etcdctl", X_OK) != 0) return std::nullopt;
  const auto command = fmt::format("ETCDCTL_API=3 /usr/bin/etcdctl --endpoints={} "
                                   "--command-timeout=10s get --prefix --keys-only {} 2>&1",
                                   etcd.endpoints(), prefix);
  std::string out;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[4096];
    while (std::size_t n = fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
    pclose(pipe);
  }
  return out;
}

}  // namespace

TEST_CASE("etcd rendezvous: 3 agents form a round under the run's prefix, and the end removes it",
          "[etcd]") {
  skip_unless_etcd();
  EtcdCluster etcd;
  auto c = etcd_job(etcd, "3");
  auto a = c.start("a", "job42");
  auto b = c.start("b", "job42");
  auto d = c.start("d", "job42");
  REQUIRE(c.wait_for_round("a", 3));
  REQUIRE(c.wait_for_round("b", 3));
  REQUIRE(c.wait_for_round("d", 3));
  CHECK_THAT(a->output(), Catch::Contains("rendezvous: etcd " + etcd.endpoints() +
                                          " under /ddprun/job42/"));

  auto run = view(etcd, "job42");
  CHECK(run.count_prefix("agents/", soon()) == 3);
  // An agent's marker holds its lease, which it keeps renewing: for twice its TTL, the
  // lease never runs out (etcd reports the time left in whole seconds, rounded up).
  auto markers = run.client().call("/v3/kv/range", prefix_range(run.full_key("agents/")), soon());
  const auto lease = parse_kv(markers.at("kvs").at(0)).lease;
  REQUIRE(lease != 0);
  auto time_to_live = [&] {
    return run.client().call("/v3/lease/timetolive", {{"ID", std::to_string(lease)}}, soon());
  };
  const auto granted = json_int(time_to_live(), "grantedTTL");
  REQUIRE(granted >= 2);
  for (auto until = Clock::now() + std::chrono::seconds(2 * granted); Clock::now() < until;) {
    const auto left = json_int(time_to_live(), "TTL");
    REQUIRE(left > 0);
  }
  auto closed = nlohmann::json::parse(run.get("news/r/0/closed", soon()));
  CHECK(closed.at("members") == 3);
  CHECK(closed.at("world_size") == 3);
  // Each member's liveness key, on its lease, once its keep-alive started.
  CHECK(wait_until([&] { return run.count_prefix("r/0/hb/", soon()) == 3; }, 20s));
  if (auto keys = etcdctl_keys(etcd, "/ddprun/job42/")) {
    CHECK_THAT(*keys, Catch::Contains("/ddprun/job42/agents/127.0.0.1:") &&
                          Catch::Contains("/ddprun/job42/news/r/0/closed") &&
                          Catch::Contains("/ddprun/job42/r/0/hb/2"));
  } else {
    WARN("etcdctl (Debian's etcd-client) is not installed: the keys were read with ddprun's "
         "client only");
  }

  c.release_workers();
  CHECK(a->wait() == 0);
  CHECK(b->wait() == 0);
  CHECK(d->wait() == 0);
  CHECK(run.num_keys(soon()) == 0);
  if (auto keys = etcdctl_keys(etcd, "/ddprun/job42/")) CHECK(keys->empty());
}

TEST_CASE("etcd rendezvous: the etcd leader is SIGKILLed mid-job, after a compaction of the "
          "history its watches would resume from, and the job finishes",
          "[etcd]") {
  skip_unless_etcd();
  EtcdCluster etcd;
  // The leader first: every agent's connections and watches are on the member that dies.
  ElasticCluster c("3", {"--rdzv-backend=etcd", "--rdzv-endpoint=" + etcd.endpoints_leader_first()},
                   kLeases);
  auto a = c.start("a");
  auto b = c.start("b");
  auto d = c.start("d");
  REQUIRE(c.wait_for_round("a", 3));
  REQUIRE(c.wait_for_round("b", 3));
  REQUIRE(c.wait_for_round("d", 3));
  // Every member's liveness key is on its lease, so the watches of the keep-alive (and each
  // agent's outcome watcher) wait from revisions now behind; two writes later, etcd compacts
  // up to its present revision. When the leader dies, each watch resumes on another member
  // from a revision etcd no longer has.
  auto run = view(etcd, "elastic");
  REQUIRE(wait_until([&] { return run.count_prefix("r/0/hb/", soon()) == 3; }, 20s));
  run.set("unrelated/1", "x", soon());
  run.set("unrelated/2", "x", soon());
  const auto now = json_int(
      run.client().call("/v3/kv/range", key_only(run.full_key("unrelated/2")), soon()).at("header"),
      "revision");
  run.client().call("/v3/kv/compaction", {{"revision", std::to_string(now)}}, soon());
  const int leader = etcd.leader();
  REQUIRE(leader >= 0);
  etcd.kill(leader);
  // The agents' leases are renewed through the new leader: nobody is taken for dead.
  REQUIRE(wait_until([&] { return etcd.leader() >= 0; }, 30s));
  c.release_workers();
  const int codes[] = {a->wait(), b->wait(), d->wait()};
  INFO("agent a:\n" << a->output() << "\nagent b:\n" << b->output() << "\nagent d:\n"
                     << d->output());
  CHECK(codes[0] == 0);
  CHECK(codes[1] == 0);
  CHECK(codes[2] == 0);
  for (const char* name : {"a", "b", "d"}) {
    CHECK(c.read(name, "rendezvous_completed").size() == 1);
    REQUIRE(c.read(name, "job_finished").size() == 1);
    CHECK(c.read(name, "job_finished").at(0).at("restarts") == 0);
  }
}

TEST_CASE("etcd rendezvous: SIGKILL of one of three agents, the lease expires and two go on",
          "[etcd]") {
  skip_unless_etcd();
  EtcdCluster etcd;
  // Leases of 2 s (keep-alive 0.5 s x 3, raised to etcd's minimum).
  auto c = etcd_job(etcd, "2:3", "");
  auto a = c.start("a");
  REQUIRE(wait_until([&] { return !c.read("a", "rendezvous_started").empty(); }, 20s));
  auto b = c.start("b");
  auto victim = c.start("c");
  REQUIRE(c.wait_for_round("c", 3));
  const int round_of_3 = c.last_round("c");
  // Once every member's liveness key hangs on its lease (a member killed before that is judged
  // by another rule: "never registered").
  auto run = view(etcd, "elastic");
  REQUIRE(wait_until(
      [&] { return run.count_prefix(fmt::format("r/{}/hb/", round_of_3), soon()) == 3; }, 20s));
  const auto killed = Clock::now();
  kill(victim->pid(), SIGKILL);
  REQUIRE(c.wait_for_round("a", 2, 40s, round_of_3));
  // Lease TTL 2 s (keep-alive 0.5 s x 3, raised to etcd's minimum), plus the 1 s last call;
  // the bound only catches a hang.
  CHECK(Clock::now() - killed < 20s);
  CHECK_THAT(a->output() + b->output(), Catch::Contains("etcd lease expired"));
  c.release_workers();
  CHECK(a->wait() == 0);
  CHECK(b->wait() == 0);
  CHECK(c.wait_for_round("b", 2, 1s, round_of_3));
}

TEST_CASE("etcd rendezvous: a worker failure keeps the round's lease ring, which still finds a "
          "death", "[etcd]") {
  skip_unless_etcd();
  EtcdCluster etcd;
  // A last call long enough that all three are back in the round after the failure, on a
  // loaded machine too.
  auto c = etcd_job(etcd, "2:3", std::string(kLeases) + ",last_call_timeout=5");
  // Rank 2 fails once, at once: the same three nodes form the next round.
  c.set_extra({"--max-restarts=1"},
              "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 2 ]; then exit 3; fi; " +
                  std::string(ElasticCluster::kGateWorker));
  auto a = c.start("a");
  REQUIRE(wait_until([&] { return !c.read("a", "rendezvous_started").empty(); }, 20s));
  auto b = c.start("b");
  auto victim = c.start("v");
  REQUIRE(c.wait_for_round("v", 3));
  int failed_round = -1;
  for (const auto& e : c.read("v", "rendezvous_completed")) {
    if (e.at("world_size") == 3) {
      failed_round = e.at("round").get<int>();
      break;
    }
  }
  REQUIRE(c.wait_for_round("v", 3, 40s, failed_round));
  REQUIRE(c.wait_for_round("a", 3, 40s, failed_round));
  REQUIRE(c.wait_for_round("b", 3, 40s, failed_round));
  const int restarted = c.last_round("v");
  // Every member's keep-alive of the restarted round has started once its workers have.
  for (const char* name : {"a", "b", "v"}) {
    REQUIRE(wait_until(
        [&] {
          for (const auto& e : c.read(name, "workers_started")) {
            if (e.value("attempt", -1) == restarted) return true;
          }
          return false;
        },
        40s));
  }
  auto run = view(etcd, "elastic");
  auto closed_kv =
      run.client().call("/v3/kv/range", key_only(run.full_key(fmt::format("news/r/{}/closed", restarted))),
                        soon());
  const auto closed = parse_kv(closed_kv.at("kvs").at(0));
  CHECK(nlohmann::json::parse(closed.value).at("ring_round") == failed_round);
  // The members' liveness keys are the kept ring's, none written since the restarted round
  // closed, and the restarted round has none of its own.
  auto keys = run.client().call(
      "/v3/kv/range", prefix_range(run.full_key(fmt::format("r/{}/hb/", failed_round))), soon());
  REQUIRE(keys.contains("kvs"));
  REQUIRE(keys["kvs"].size() == 3);
  for (const auto& kv : keys["kvs"]) CHECK(parse_kv(kv).mod_revision < closed.mod_revision);
  CHECK(run.count_prefix(fmt::format("r/{}/hb/", restarted), soon()) == 0);

  // The kept watches still watch: a member killed now is found by its lease's expiry.
  kill(victim->pid(), SIGKILL);
  REQUIRE(c.wait_for_round("a", 2, 40s, restarted));
  REQUIRE(c.wait_for_round("b", 2, 40s, restarted));
  CHECK_THAT(a->output() + b->output(), Catch::Contains("etcd lease expired"));
  c.release_workers();
  CHECK(a->wait() == 0);
  CHECK(b->wait() == 0);
}

TEST_CASE("etcd rendezvous: with 2 of 3 members gone the agents fail saying etcd has no quorum",
          "[etcd]") {
  skip_unless_etcd();
  EtcdCluster etcd;
  auto c = etcd_job(etcd, "2", std::string(kLeases) + ",read_timeout=3");
  auto a = c.start("a");
  auto b = c.start("b");
  REQUIRE(c.wait_for_round("a", 2));
  REQUIRE(c.wait_for_round("b", 2));
  const auto lost = Clock::now();
  etcd.kill(0);
  etcd.kill(1);
  const int code_a = a->wait(90s);
  const int code_b = b->wait(90s);
  CHECK(code_a != 0);
  CHECK(code_a != -1);
  CHECK(code_b != 0);
  CHECK(code_b != -1);
  // Read timeout 3 s per call (each try bounded by 5 s), then the workers' shutdown.
  CHECK(Clock::now() - lost < 60s);
  CHECK_THAT(a->output(), Catch::Contains("no quorum"));
  CHECK_THAT(b->output(), Catch::Contains("no quorum"));
  c.release_workers();
}

TEST_CASE("etcd rendezvous: two run ids on one etcd stay apart", "[etcd]") {
  skip_unless_etcd();
  EtcdCluster etcd(1);
  auto c = etcd_job(etcd, "2");
  auto x1 = c.start("x1", "x");
  auto y1 = c.start("y1", "y");
  auto x2 = c.start("x2", "x");
  auto y2 = c.start("y2", "y");
  for (const char* name : {"x1", "x2", "y1", "y2"}) REQUIRE(c.wait_for_round(name, 2));
  c.release_workers();
  for (auto* p : {&x1, &x2, &y1, &y2}) CHECK((*p)->wait() == 0);
  CHECK(view(etcd, "x").num_keys(soon()) == 0);
  CHECK(view(etcd, "y").num_keys(soon()) == 0);
}

TEST_CASE("etcd rendezvous: keys a killed job left are removed by the next with its run id",
          "[etcd]") {
  skip_unless_etcd();
  EtcdCluster etcd(1);
  auto c = etcd_job(etcd, "1");
  auto first = c.start("first", "again");
  REQUIRE(c.wait_for_round("first", 1));
  kill(first->pid(), SIGKILL);
  CHECK(first->wait(30s) == 128 + SIGKILL);
  auto run = view(etcd, "again");
  // Its lease expires (TTL 3 s) and takes its marker; the round's keys stay.
  REQUIRE(wait_until([&] { return run.count_prefix("agents/", soon()) == 0; }, 30s));
  const auto left = run.num_keys(soon());
  CHECK(left > 0);

  auto second = c.start("second", "again");
  REQUIRE(c.wait_for_round("second", 1));
  CHECK_THAT(second->output(),
             Catch::Contains(fmt::format("removed {} keys under /ddprun/again/", left)));
  // A fresh start: round 0 again, not a round after the killed job's.
  CHECK(c.last_round("second") == 0);
  c.release_workers();
  CHECK(second->wait() == 0);
  CHECK(run.num_keys(soon()) == 0);
}
