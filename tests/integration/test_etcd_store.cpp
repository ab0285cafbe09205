// EtcdStore and EtcdClient against a real 3-member etcd cluster on loopback: every Store
// operation, blocking waits served by watches, concurrent adders, transactions beyond etcd's
// operation limit, failover when the member in use dies, run ids kept apart, interrupts.

#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "common/error.hpp"
#include "etcd/etcd_store.hpp"
#include "testing/etcd_cluster.hpp"

using namespace ddprun;
using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

Deadline soon() { return Deadline::after(20s); }

EtcdStoreOptions options_for(const std::string& endpoints, const std::string& run_id) {
  EtcdStoreOptions o;
  o.endpoints = parse_etcd_endpoints(endpoints, "test");
  o.run_id = run_id;
  return o;
}

}  // namespace

TEST_CASE("etcd store: every operation against a real 3-member cluster", "[etcd]") {
  skip_unless_etcd();
  EtcdCluster etcd;
  EtcdStore store(options_for(etcd.endpoints(), "ops"), soon());

  SECTION("set, get, try_get, check, erase, num_keys: binary-safe keys and values") {
    const std::string binary("v\0\xff\n", 4);
    store.set("a", binary, soon());
    store.set("b/c", "", soon());
    CHECK(store.get("a", soon()) == binary);
    CHECK(store.try_get("b/c", soon()) == std::optional<std::string>(""));
    CHECK_FALSE(store.try_get("missing", soon()).has_value());
    CHECK(store.check({"a", "b/c"}, soon()));
    CHECK_FALSE(store.check({"a", "missing"}, soon()));
    CHECK(store.num_keys(soon()) == 2);
    CHECK(store.erase("a", soon()));
    CHECK_FALSE(store.erase("a", soon()));
    CHECK(store.num_keys(soon()) == 1);
    CHECK(store.erase_run(soon()) == 1);
    CHECK(store.num_keys(soon()) == 0);
  }

  SECTION("erase_run_unless: the run's keys go in one transaction, only with no key of a kind") {
    store.set("round", "3", soon());
    store.set("agents/a", "1", soon());
    CHECK_FALSE(store.erase_run_unless("agents/", soon()).has_value());
    CHECK(store.num_keys(soon()) == 2);
    store.erase("agents/a", soon());
    store.set("agentsX", "not under agents/", soon());
    CHECK(store.erase_run_unless("agents/", soon()) == 2);
    CHECK(store.num_keys(soon()) == 0);
  }

  SECTION("compare_set: a missing key equals \"\"; the winner sees its value") {
    CHECK(store.compare_set("k", "", "first", soon()) == "first");
    CHECK(store.compare_set("k", "", "second", soon()) == "first");
    CHECK(store.compare_set("k", "wrong", "third", soon()) == "first");
    CHECK(store.compare_set("k", "first", "fourth", soon()) == "fourth");
    CHECK(store.compare_set("absent", "x", "y", soon()) == "");
    CHECK_FALSE(store.try_get("absent", soon()).has_value());
    store.set("empty", "", soon());
    CHECK(store.compare_set("empty", "", "filled", soon()) == "filled");
  }

  SECTION("add: counts, and concurrent adders on their own connections lose no increment") {
    CHECK(store.add("n", 0, soon()) == 0);
    CHECK(store.add("n", 1, soon()) == 1);
    CHECK(store.add("n", 2, soon()) == 3);
    CHECK(store.add("n", 0, soon()) == 3);
    CHECK_THROWS_AS(store.add("n", -1, soon()), ProtocolError);
    // A counter starts again from 0 once erased.
    CHECK(store.erase("n", soon()));
    CHECK(store.add("n", 3, soon()) == 3);
    constexpr int kThreads = 4;
    constexpr int kAdds = 25;
    std::vector<std::thread> threads;
    std::atomic<int> errors{0};
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        try {
          EtcdStore own(options_for(etcd.endpoints(), "ops"), soon());
          for (int i = 0; i < kAdds; ++i) own.add("n", 1, soon());
        } catch (const std::exception&) {
          ++errors;
        }
      });
    }
    for (auto& t : threads) t.join();
    CHECK(errors == 0);
    CHECK(store.add("n", 0, soon()) == 3 + kThreads * kAdds);
  }

  SECTION("multi_set and multi_get beyond etcd's 128 operations per transaction") {
    std::vector<std::string> keys, values;
    for (int i = 0; i < 300; ++i) {
      keys.push_back("m/" + std::to_string(i));
      values.push_back("value " + std::to_string(i * i));
    }
    store.multi_set(keys, values, soon());
    CHECK(store.multi_get(keys, soon()) == values);
    CHECK(store.num_keys(soon()) == 300);
  }

  SECTION("get and wait block until another client sets the key (a watch, no polling)") {
    // One member, so that the waiter's watch is seen there before the key is set.
    EtcdStore own(options_for(etcd.endpoint(0), "ops"), soon());
    const int before = etcd.watchers(0);
    std::string got;
    std::thread waiter([&] {
      own.wait({"later"}, soon());
      got = own.multi_get({"later", "now"}, soon()).at(0);
    });
    REQUIRE(wait_until([&] { return etcd.watchers(0) > before; }, 20s));
    store.set("now", "1", soon());
    store.set("later", "here", soon());
    waiter.join();
    CHECK(got == "here");
  }

  SECTION("a get that times out names the key and the time waited") {
    try {
      store.get("never", Deadline::after(300ms));
      FAIL("get returned");
    } catch (const TimeoutError& e) {
      CHECK_THAT(e.what(), Catch::Contains("'never'") && Catch::Contains("did not appear"));
    }
  }

  SECTION("interrupt ends a blocking get at once, and every later call") {
    EtcdStore own(options_for(etcd.endpoint(1), "ops"), soon());
    const int before = etcd.watchers(1);
    std::atomic<bool> interrupted{false};
    std::thread waiter([&] {
      try {
        own.get("never", Deadline::after(120s));
      } catch (const InterruptedError&) {
        interrupted = true;
      }
    });
    REQUIRE(wait_until([&] { return etcd.watchers(1) > before; }, 20s));
    own.interrupt();
    waiter.join();
    CHECK(interrupted);
    CHECK_THROWS_AS(own.set("x", "y", soon()), InterruptedError);
  }
}

TEST_CASE("etcd store: two run ids on one etcd stay apart", "[etcd]") {
  skip_unless_etcd();
  EtcdCluster etcd(1);
  EtcdStore a(options_for(etcd.endpoints(), "job-a"), soon());
  EtcdStore b(options_for(etcd.endpoints(), "job-b"), soon());
  a.set("round", "1", soon());
  b.set("round", "7", soon());
  a.add("count", 2, soon());
  CHECK(a.get("round", soon()) == "1");
  CHECK(b.get("round", soon()) == "7");
  CHECK_FALSE(b.try_get("count", soon()).has_value());
  CHECK(a.erase_run(soon()) == 4);  // "round", "count" and a key per increment of it
  CHECK(b.num_keys(soon()) == 1);
  CHECK(b.get("round", soon()) == "7");
}

TEST_CASE("etcd store: the member in use is SIGKILLed, and calls and a waiting get go on", "[etcd]") {
  skip_unless_etcd();
  EtcdCluster etcd;
  // The first endpoint listed is the one used first: make it the leader, the worst case.
  const int leader = etcd.leader();
  REQUIRE(leader >= 0);
  const std::string endpoints = etcd.endpoints_leader_first();
  EtcdStore store(options_for(endpoints, "failover"), soon());
  store.set("before", "1", soon());

  EtcdStore own(options_for(endpoints, "failover"), soon());
  const int before = etcd.watchers(leader);
  std::string got;
  std::thread waiter([&] { got = own.get("after", Deadline::after(60s)); });
  // Its watch is open on the leader: killing it breaks the stream, and the watch moves on.
  REQUIRE(wait_until([&] { return etcd.watchers(leader) > before; }, 20s));
  etcd.kill(leader);
  CHECK(store.add("n", 1, Deadline::after(60s)) == 1);
  CHECK(store.get("before", soon()) == "1");
  store.set("after", "survived", Deadline::after(60s));
  waiter.join();
  CHECK(got == "survived");
}

TEST_CASE("etcd store: without quorum, calls fail within their deadline saying so", "[etcd]") {
  skip_unless_etcd();
  EtcdCluster etcd;
  EtcdStore store(options_for(etcd.endpoints(), "quorum"), soon());
  store.set("k", "v", soon());
  etcd.kill(0);
  etcd.kill(1);
  const auto started = Clock::now();
  try {
    store.set("k", "w", Deadline::after(4s));
    FAIL("set succeeded without quorum");
  } catch (const TimeoutError& e) {
    CHECK_THAT(e.what(), Catch::Contains("no quorum") && Catch::Contains(etcd.endpoint(2)));
  }
  // The deadline, plus at most one try's bound.
  CHECK(Clock::now() - started < 15s);
}

TEST_CASE("etcd store: a watch whose member loses its quorum fails over, then times out saying so",
          "[etcd]") {
  skip_unless_etcd();
  EtcdCluster etcd;
  // Member 2 first: the waiter's watch is there when the other two die.
  const auto endpoints = etcd.endpoint(2) + "," + etcd.endpoint(0) + "," + etcd.endpoint(1);
  EtcdStore waiter_store(options_for(endpoints, "lost"), soon());
  const int before = etcd.watchers(2);
  std::string error;
  const auto started = Clock::now();
  // etcd cancels a stream that requires a leader after its member has had none for three
  // election timeouts (its monitorLeader): ~4-6 s after the kill here, later on a loaded machine
  // (a CI run once saw no cancel within 12 s). The wait's deadline leaves room for that.
  std::thread waiter([&] {
    try {
      waiter_store.get("never", Deadline::after(25s));
      error = "returned";
    } catch (const std::exception& e) {
      error = std::string(dynamic_cast<const TimeoutError*>(&e) ? "TimeoutError: " : "other: ") +
              e.what();
    }
  });
  REQUIRE(wait_until([&] { return etcd.watchers(2) > before; }, 20s));
  etcd.kill(0);
  etcd.kill(1);
  INFO("the two members were killed " << format_duration(Clock::now() - started)
                                      << " after the wait began");
  waiter.join();
  // etcd cancels the watch ("no leader", inside the stream); that is not the end of the wait.
  CHECK_THAT(error, Catch::StartsWith("TimeoutError: ") && Catch::Contains("no quorum"));
  CHECK(Clock::now() - started < 45s);
}
