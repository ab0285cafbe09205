// EtcdStore and EtcdClient against a real 3-member etcd cluster on loopback: every Store
// operation, blocking waits served by watches, concurrent adders, transactions beyond etcd's
// operation limit, failover when the member in use dies, run ids kept apart, interrupts.

#include <catch2/catch.hpp>

#include <signal.h>

#include <atomic>
#include <optional>
#include <thread>

#include <fmt/format.h>

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

namespace {

int watch_streams_started(const EtcdCluster& etcd) {
  int sum = 0;
  for (int m = 0; m < etcd.size(); ++m) {
    if (etcd.alive(m)) sum += etcd.watch_streams_started(m);
  }
  return sum;
}

}  // namespace

TEST_CASE("etcd store: keys under a mirror's prefix are waited for on its one watch, by every "
          "store that shares it",
          "[etcd]") {
  skip_unless_etcd();
  EtcdCluster etcd;
  EtcdStore writer(options_for(etcd.endpoints(), "mirrored"), soon());
  auto options = options_for(etcd.endpoints(), "mirrored");
  writer.set("news/before", "early", soon());
  options.mirror = std::make_shared<EtcdMirror>(options.endpoints, writer.full_key("news/"));
  EtcdStore a(options, soon());
  EtcdStore b(options, soon());
  // The mirror's read and its watch, then nothing more.
  REQUIRE(wait_until([&] { return watch_streams_started(etcd) == 1; }, 20s));
  const int started = watch_streams_started(etcd);

  std::string got_a, got_b;
  std::thread wait_a([&] { got_a = a.get("news/r/1/closed", soon()); });
  std::thread wait_b([&] { got_b = b.get("news/r/1/closed", soon()); });
  writer.set("news/r/1/closed", "{\"members\":3}", soon());
  wait_a.join();
  wait_b.join();
  CHECK(got_a == "{\"members\":3}");
  CHECK(got_b == "{\"members\":3}");
  CHECK(a.get("news/before", soon()) == "early");
  for (int i = 0; i < 20; ++i) writer.set(fmt::format("news/k/{}", i), std::to_string(i), soon());
  std::vector<std::string> keys;
  for (int i = 0; i < 20; ++i) keys.push_back(fmt::format("news/k/{}", i));
  b.wait(keys, soon());
  CHECK(b.get("news/k/19", soon()) == "19");
  CHECK(watch_streams_started(etcd) == started);

  // A key outside the prefix is waited for as before: a watch of its own.
  std::thread plain([&] { got_a = a.get("r/1/node/0", soon()); });
  REQUIRE(wait_until([&] { return watch_streams_started(etcd) > started; }, 20s));
  writer.set("r/1/node/0", "x", soon());
  plain.join();
  CHECK(got_a == "x");

  SECTION("a wait for a key that never comes ends at its deadline, or at once on interrupt") {
    const auto t0 = Clock::now();
    CHECK_THROWS_AS(b.get("news/never", Deadline::after(3s)), TimeoutError);
    CHECK(Clock::now() - t0 >= 3s);
    CHECK(Clock::now() - t0 < 15s);
    std::string error;
    std::thread waiter([&] {
      try {
        a.get("news/never", Deadline::after(120s));
      } catch (const InterruptedError& e) {
        error = e.what();
      }
    });
    const auto t1 = Clock::now();
    a.interrupt();
    waiter.join();
    CHECK_THAT(error, Catch::Contains("interrupted"));
    CHECK(Clock::now() - t1 < 15s);
  }
}

// A mirror whose watch is on member 0 (listed first), a store that waits through it, and a
// writer on the other two members, which keep a quorum when member 0 stops.
struct MirrorOnMemberZero {
  explicit MirrorOnMemberZero(const std::string& run_id,
                              std::chrono::milliseconds quiet = std::chrono::minutes(1))
      : writer(options_for(etcd.endpoint(1) + "," + etcd.endpoint(2), run_id), soon()),
        options(options_for(etcd.endpoints(), run_id)) {
    const int before = etcd.watchers(0);
    options.mirror = std::make_shared<EtcdMirror>(options.endpoints, writer.full_key("news/"), quiet);
    store.emplace(options, soon());
    REQUIRE(wait_until([&] { return etcd.watchers(0) > before; }, 20s));
  }

  // The time a wait for `key` takes, which must find `value`.
  Clock::duration time_to_get(const std::string& key, const std::string& value) {
    const auto t0 = Clock::now();
    CHECK(store->get(key, Deadline::after(60s)) == value);
    return Clock::now() - t0;
  }

  EtcdCluster etcd;
  EtcdStore writer;
  EtcdStoreOptions options;
  std::optional<EtcdStore> store;
};

TEST_CASE("etcd store: a mirror whose member dies resumes elsewhere, and after a compaction of the "
          "history it would resume from, it reads the prefix again",
          "[etcd]") {
  skip_unless_etcd();
  MirrorOnMemberZero m("resume");
  m.writer.set("news/gone", "1", soon());
  REQUIRE(m.store->get("news/gone", soon()) == "1");

  // Member 0 stops answering (its stream stays open, silent) while the others change the keys
  // and compact the history; then it dies, and the mirror's stream breaks.
  REQUIRE(::kill(m.etcd.pid(0), SIGSTOP) == 0);
  m.writer.erase("news/gone", Deadline::after(60s));
  m.writer.set("news/after", "2", Deadline::after(60s));
  m.writer.set("unrelated", "3", Deadline::after(60s));
  const auto now = json_int(m.writer.client()
                                .call("/v3/kv/range", key_only(m.writer.full_key("unrelated")),
                                      Deadline::after(60s))
                                .at("header"),
                            "revision");
  m.writer.client().call("/v3/kv/compaction", {{"revision", std::to_string(now)}},
                         Deadline::after(60s));
  m.etcd.kill(0);

  // From the copy: this store's own read would begin only in the wait's last 2 s.
  CHECK(m.time_to_get("news/after", "2") < 40s);
  CHECK_THAT(m.options.mirror->state(), Catch::Contains("follows etcd from revision"));
  // The copy read again has no key that was erased while the history was lost: the wait for it
  // ends at its deadline.
  CHECK_THROWS_AS(m.store->get("news/gone", Deadline::after(2s)), TimeoutError);
}

TEST_CASE("etcd store: a mirror whose member freezes moves to another member after a quiet "
          "spell",
          "[etcd]") {
  skip_unless_etcd();
  MirrorOnMemberZero m("frozen", 2s);
  // Stopped, member 0 keeps the mirror's connection open and silent: nothing breaks it.
  REQUIRE(::kill(m.etcd.pid(0), SIGSTOP) == 0);
  m.writer.set("news/while-frozen", "1", Deadline::after(60s));
  // The quiet spell, one try on the frozen member and the read elsewhere; the store's own read
  // would come only in the wait's last 2 s.
  CHECK(m.time_to_get("news/while-frozen", "1") < 40s);
  m.etcd.kill(0);
}
