#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "agent/heartbeat.hpp"
#include "rendezvous/memory_store.hpp"
#include "support/test_util.hpp"

using namespace ddprun;
using namespace std::chrono_literals;

namespace {

HeartbeatOptions options(int group_rank, int members) {
  HeartbeatOptions o;
  o.prefix = "r/0";
  o.group_rank = group_rank;
  o.members = members;
  o.interval = 20ms;
  o.max_attempts = 3;
  o.read_timeout = 1s;
  return o;
}

}  // namespace

TEST_CASE("heartbeat: a silent successor is declared dead once", "[heartbeat]") {
  MemoryStore store;
  std::atomic<int> dead{-1};
  std::atomic<int> calls{0};
  Heartbeat hb(store.connect(), options(2, 3), [&](int g, Store&) { dead = g; ++calls; },
               [](std::string) {});
  REQUIRE(test::wait_until([&] { return dead.load() == 0; }, 10s));  // 2 watches 0
  std::this_thread::sleep_for(100ms);
  CHECK(calls == 1);
  CHECK(store.get("r/0/hb/2", Deadline::after(1s)) != "0");  // it beats itself
}

TEST_CASE("heartbeat: a beating successor is alive", "[heartbeat]") {
  MemoryStore store;
  std::atomic<int> calls{0};
  Heartbeat a(store.connect(), options(0, 2), [&](int, Store&) { ++calls; }, [](std::string) {});
  Heartbeat b(store.connect(), options(1, 2), [&](int, Store&) { ++calls; }, [](std::string) {});
  std::this_thread::sleep_for(300ms);  // fifteen intervals
  CHECK(calls == 0);
}

TEST_CASE("heartbeat: a member that left on purpose is not dead", "[heartbeat]") {
  MemoryStore store;
  store.set("r/0/hb/1", kHeartbeatDone, Deadline::after(1s));
  std::atomic<int> calls{0};
  Heartbeat a(store.connect(), options(0, 2), [&](int, Store&) { ++calls; }, [](std::string) {});
  std::this_thread::sleep_for(300ms);
  CHECK(calls == 0);
}

TEST_CASE("heartbeat: a store error is reported, and destruction does not hang", "[heartbeat]") {
  MemoryStore store;
  auto handle = store.connect();
  handle->interrupt();  // every call on it now fails like a lost connection would
  std::atomic<int> errors{0};
  {
    Heartbeat a(std::move(handle), options(0, 2), [](int, Store&) {}, [&](std::string) { ++errors; });
    std::this_thread::sleep_for(50ms);
  }
  // An interrupted store means "stop", not "error": the heartbeat just ends quietly.
  CHECK(errors == 0);
}
